// Chrome trace-event JSON of one rank (GEOCCL_TRACE=DIR, docs/metrics.md "Traces"): complete
// events ("X") for operations and the phases of the hierarchical allreduce, async events
// ("b"/"e") for per-peer sends and receives with their bytes. Timestamps are this host's
// system clock in microseconds; the file also carries this rank's clock offset to rank 0
// (measured at start-up), which `geoccl trace merge` subtracts to put every rank on one
// timeline. Events are kept in memory and written when the writer is destroyed (or flush()).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace geoccl::metrics {

// Tracks (the trace's "tid") of one rank.
inline constexpr int kTraceTrackOps = 0;      // + priority class
inline constexpr int kTraceTrackPhases = 10;  // phases of an operation (+1: a second lane)
inline constexpr int kTraceTrackPeer = 100;   // + peer: that peer's sends and receives

class TraceWriter {
 public:
  // Opens DIR/rank-R.json for writing (DIR is created if missing). Throws Error(kIo) naming the
  // path when it cannot be created or written, Error(kInvalidArgument) for an empty dir.
  TraceWriter(const std::string& dir, int rank, int world_size, const std::string& domain);
  // Writes the file (errors are logged: a destructor does not throw).
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  static int64_t now_us();
  const std::string& path() const { return path_; }

  // A complete event; `args_json` is "" or the members of the args object ("\"bytes\":4096").
  void complete(std::string_view name, std::string_view cat, int track, int64_t ts_us,
                int64_t dur_us, const std::string& args_json = {});
  // An async span (begin and end at once, when it is over); ids are unique per writer.
  void async_span(std::string_view name, std::string_view cat, int track, int64_t begin_us,
                  int64_t end_us, const std::string& args_json = {});
  // This rank's clock minus rank 0's (microseconds) and the round trip it was measured over.
  void set_clock_offset(double offset_us, double rtt_us);
  // Writes everything so far to the file (replacing its contents). Throws Error(kIo).
  void flush();

 private:
  std::string path_;
  int rank_;
  int world_size_;
  std::string domain_;
  std::mutex mu_;
  std::vector<std::string> events_;  // serialized
  std::vector<int> tracks_;          // named so far
  double offset_us_ = 0, offset_rtt_us_ = -1;
  uint64_t next_id_ = 1;
  void name_track(int track);  // under mu_
};

// A phase of an operation: a complete event on `track` from construction to destruction. With
// a null writer (tracing off) it does nothing beyond one branch.
class TraceSpan {
 public:
  TraceSpan(TraceWriter* w, const char* name, int track = kTraceTrackPhases);
  ~TraceSpan();
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceWriter* w_;
  const char* name_;
  int track_;
  int64_t t0_ = 0;
};

// `s` as a JSON string literal (quotes included).
std::string json_string(std::string_view s);

}  // namespace geoccl::metrics
