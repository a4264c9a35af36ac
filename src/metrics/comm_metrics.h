// The series one communicator exports (docs/metrics.md): per-operation latency, volume and
// errors, recorded when an operation completes; per-peer and per-link series and the process's
// memory, read from the transport at scrape time.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "geoccl/error.h"
#include "metrics/registry.h"

namespace geoccl::metrics {

// What a scrape reads of one peer's link (the communicator fills it from its peer statistics).
struct PeerFigures {
  int peer = -1;
  std::string transport;
  double rtt_ms = 0;
  double min_rtt_ms = 0;                        // 0: not reported
  uint64_t bytes_sent = 0, bytes_received = 0;  // both priority classes
  uint64_t retransmits = 0, reconnects = 0;
  uint64_t delivery_rate_bps = 0;
};

// Size classes of the duration histogram's size_class label: powers of 16 from 4 KiB.
const char* size_class(uint64_t bytes);

// The duration buckets (seconds): 10 us .. 100 s.
const std::vector<double>& op_duration_bounds();

// Physical limit (seconds) of an allreduce of `bytes` across `domains` domains over links of
// `bps` bit/s with round-trip time `rtt_s`: 2(k-1)/k * 8S/B + RTT (bench/compare.py's). 0 when
// it does not apply (one domain, unknown rate).
double allreduce_limit_s(uint64_t bytes, int domains, double bps, double rtt_s);

// The resident set of this process in bytes (/proc/self/statm), 0 where unreadable.
uint64_t process_resident_bytes();

class CommMetrics {
 public:
  static constexpr size_t kOpKinds = 16;
  static constexpr size_t kAlgos = 24;
  static constexpr size_t kSizeClasses = 5;

  // `link_bps`: the known capacity of this rank's inter-domain links (0 = use the rate the
  // transport measured).
  CommMetrics(Registry& registry, int rank, int world_size, std::string domain, double link_bps);

  // What the scrape-time series read: the peers' statistics and the domains.
  void set_peer_source(std::function<std::vector<PeerFigures>()> peers);
  void set_topology(std::vector<int> domain_of, std::vector<std::string> names);

  // One completed operation. `kind` < kOpKinds with its name, `algo` a string with static
  // storage duration (compared by address first). Lock-free once the operation's series exist.
  void record(uint8_t kind, const char* op, const char* algo, uint64_t bytes, double seconds);
  // One failed operation (its duration is not recorded).
  void record_error(uint8_t kind, const char* op, ErrorCode code);
  // An allreduce issued with `codec` on its hops across domains, of `bytes` user bytes (the
  // codecs compression "auto" chooses show here).
  void record_codec(const std::string& codec, uint64_t bytes);

 private:
  struct OpSeries {
    Histogram* duration;
  };
  struct PerKind {
    Counter* bytes = nullptr;
    std::atomic<uint64_t> last_bytes{0};
    std::atomic<double> last_seconds{0};
    const char* name = nullptr;
  };
  // Rate sampling of one destination domain for the utilization series.
  struct LinkSample {
    std::chrono::steady_clock::time_point at{};
    uint64_t bytes = 0;
    double rate_bps = 0;
    double measured_bps = 0;  // largest delivery rate the transport reported
  };
  size_t algo_index(const char* algo);
  OpSeries* series(uint8_t kind, const char* op, const char* algo, uint64_t bytes);
  void collect();

  const int rank_;
  const std::string domain_;
  const double link_bps_;
  Family<Histogram>& duration_;
  Family<Counter>& bytes_;
  Family<Counter>& errors_;
  Family<Counter>& codec_calls_;
  Family<Counter>& codec_bytes_;
  Family<Gauge>& rtt_;
  Family<Gauge>& min_rtt_;
  Family<Counter>& sent_;
  Family<Counter>& received_;
  Family<Counter>& retransmits_;
  Family<Counter>& reconnects_;
  Family<Gauge>& utilization_;
  Family<Gauge>& limit_ratio_;
  Family<Gauge>& resident_;

  std::array<std::atomic<const char*>, kAlgos> algos_{};
  std::array<std::atomic<OpSeries*>, kOpKinds * kAlgos * kSizeClasses> cells_{};
  std::vector<std::unique_ptr<OpSeries>> owned_;  // guarded by mu_
  std::array<PerKind, kOpKinds> kinds_;
  std::mutex mu_;  // creation of series; the collector's state below

  std::function<std::vector<PeerFigures>()> peers_;
  std::vector<int> domain_of_;
  std::vector<std::string> domain_names_;
  std::vector<LinkSample> links_;  // per destination domain
};

}  // namespace geoccl::metrics
