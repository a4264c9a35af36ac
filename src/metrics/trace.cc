#include "metrics/trace.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/logging.h"
#include "geoccl/error.h"

namespace geoccl::metrics {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + '"';
}

TraceWriter::TraceWriter(const std::string& dir, int rank, int world_size,
                         const std::string& domain)
    : rank_(rank), world_size_(world_size), domain_(domain) {
  if (dir.empty()) throw Error(ErrorCode::kInvalidArgument, "GEOCCL_TRACE: empty directory");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  path_ = (std::filesystem::path(dir) / ("rank-" + std::to_string(rank) + ".json")).string();
  if (ec) throw Error(ErrorCode::kIo, "GEOCCL_TRACE: cannot create " + dir + ": " + ec.message());
  // Find out now, not at the end of the job, that the file cannot be written.
  std::ofstream probe(path_, std::ios::trunc);
  if (!probe)
    throw Error(ErrorCode::kIo,
                "GEOCCL_TRACE: cannot write " + path_ + ": " + std::strerror(errno));
  probe << "{\"traceEvents\":[]}\n";
  if (!probe) throw Error(ErrorCode::kIo, "GEOCCL_TRACE: cannot write " + path_);
}

TraceWriter::~TraceWriter() {
  try {
    flush();
  } catch (const std::exception& e) {
    GEOCCL_LOG(kError, e.what());
  }
}

int64_t TraceWriter::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void TraceWriter::name_track(int track) {
  for (int t : tracks_)
    if (t == track) return;
  tracks_.push_back(track);
  std::string name;
  if (track >= kTraceTrackPeer)
    name = "peer " + std::to_string(track - kTraceTrackPeer);
  else if (track >= kTraceTrackPhases)
    name = track == kTraceTrackPhases ? "phases" : "phases (WAN lane)";
  else
    name = track == kTraceTrackOps ? "operations (gradient)"
                                   : "operations (class " + std::to_string(track) + ")";
  events_.push_back("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(rank_) +
                    ",\"tid\":" + std::to_string(track) +
                    ",\"args\":{\"name\":" + json_string(name) + "}}");
  events_.push_back("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" +
                    std::to_string(rank_) + ",\"tid\":" + std::to_string(track) +
                    ",\"args\":{\"sort_index\":" + std::to_string(track) + "}}");
}

void TraceWriter::complete(std::string_view name, std::string_view cat, int track, int64_t ts,
                           int64_t dur, const std::string& args) {
  std::string e = "{\"ph\":\"X\",\"name\":" + json_string(name) + ",\"cat\":" + json_string(cat) +
                  ",\"pid\":" + std::to_string(rank_) + ",\"tid\":" + std::to_string(track) +
                  ",\"ts\":" + std::to_string(ts) +
                  ",\"dur\":" + std::to_string(std::max<int64_t>(dur, 0)) + ",\"args\":{" + args +
                  "}}";
  std::lock_guard lk(mu_);
  name_track(track);
  events_.push_back(std::move(e));
}

void TraceWriter::async_span(std::string_view name, std::string_view cat, int track, int64_t b,
                             int64_t end, const std::string& args) {
  std::lock_guard lk(mu_);
  name_track(track);
  const std::string id = std::to_string(next_id_++);
  const std::string common = ",\"name\":" + json_string(name) + ",\"cat\":" + json_string(cat) +
                             ",\"id\":" + id + ",\"pid\":" + std::to_string(rank_) +
                             ",\"tid\":" + std::to_string(track);
  events_.push_back("{\"ph\":\"b\"" + common + ",\"ts\":" + std::to_string(b) + ",\"args\":{" +
                    args + "}}");
  events_.push_back("{\"ph\":\"e\"" + common + ",\"ts\":" + std::to_string(std::max(b, end)) + "}");
}

void TraceWriter::set_clock_offset(double offset_us, double rtt_us) {
  std::lock_guard lk(mu_);
  offset_us_ = offset_us;
  offset_rtt_us_ = rtt_us;
}

void TraceWriter::flush() {
  std::string out;
  {
    std::lock_guard lk(mu_);
    out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"geoccl_rank\":" + std::to_string(rank_) +
          ",\"world_size\":" + std::to_string(world_size_) + ",\"domain\":" + json_string(domain_) +
          ",\"clock\":\"system_clock_us\",\"clock_offset_us\":" + std::to_string(offset_us_) +
          ",\"clock_offset_rtt_us\":" + std::to_string(offset_rtt_us_) + "},\n\"traceEvents\":[\n";
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(rank_) +
           ",\"args\":{\"name\":" +
           json_string("rank " + std::to_string(rank_) +
                       (domain_.empty() ? "" : " (" + domain_ + ")")) +
           "}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(rank_) +
           ",\"args\":{\"sort_index\":" + std::to_string(rank_) + "}}";
    for (const auto& e : events_) out += ",\n" + e;
    out += "\n]}\n";
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << out;
    if (!f) throw Error(ErrorCode::kIo, "GEOCCL_TRACE: cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path_, ec);
  if (ec) throw Error(ErrorCode::kIo, "GEOCCL_TRACE: cannot rename " + tmp + ": " + ec.message());
}

TraceSpan::TraceSpan(TraceWriter* w, const char* name, int track)
    : w_(w), name_(name), track_(track) {
  if (w_) t0_ = TraceWriter::now_us();
}

TraceSpan::~TraceSpan() {
  if (w_) w_->complete(name_, "phase", track_, t0_, TraceWriter::now_us() - t0_);
}

}  // namespace geoccl::metrics
