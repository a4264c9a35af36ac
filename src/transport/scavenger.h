// The bulk class's rate on one WAN path: a delay-based scavenger controller, I/O-free (time and
// RTT samples are inputs), shared by every transport that carries bulk traffic.
//
// Background traffic (checkpoints, blobs) must use only what gradients leave. Two mechanisms:
//  - strict priority, outside this class: while the gradient class has frames queued for WAN
//    peers, the bulk class sends at `floor_bps` only (the transport applies it);
//  - this controller, for the bandwidth the gradients leave: it follows the queueing delay of
//    the path (smoothed RTT above the minimum seen), LEDBAT/TIMELY style. Below half the target
//    it grows the rate by a quarter per RTT; above the target it cuts the rate in proportion to
//    the excess (at most by half, once per RTT); a rising RTT gradient between the two holds it.
//    So a path the bulk class fills never queues more than about the target delay, which is
//    what the gradient traffic then finds in front of it.
// Rates are bit/s on the wire, clamped to [floor_bps, cap_bps].
#pragma once

#include <chrono>
#include <cstdint>

#include "geoccl/config.h"

namespace geoccl::transport {

struct ScavengerOptions {
  uint64_t cap_bps = 0;      // GEOCCL_BULK_RATE; 0 = kNoCap
  uint64_t floor_bps = 2'000'000;
  uint64_t initial_bps = 0;  // 0: min(cap, 100 Mbit/s)
  std::chrono::microseconds target_delay{5000};  // GEOCCL_BULK_TARGET_DELAY_MS
  static constexpr uint64_t kNoCap = 100'000'000'000ull;
  static ScavengerOptions from_config(const Config& cfg);
};

class ScavengerRate {
 public:
  using Clock = std::chrono::steady_clock;
  using Micros = std::chrono::microseconds;

  explicit ScavengerRate(const ScavengerOptions& o);

  // A smoothed RTT sample of the path, taken at `now` while bulk frames were in flight.
  // Returns the new rate.
  uint64_t on_rtt(Clock::time_point now, Micros srtt);
  uint64_t rate_bps() const { return rate_; }
  // The path's minimum RTT seen (zero before the first sample) and the last queueing delay.
  Micros base_rtt() const { return base_; }
  Micros queueing_delay() const { return qdelay_; }

 private:
  uint64_t cap() const { return opt_.cap_bps ? opt_.cap_bps : ScavengerOptions::kNoCap; }

  ScavengerOptions opt_;
  uint64_t rate_;
  Micros base_{0}, last_rtt_{0}, qdelay_{0};
  // The base RTT is the minimum over the current and the previous window (a route change
  // that raises the RTT for good is learnt within two windows).
  static constexpr std::chrono::seconds kBaseWindow{30};
  Micros base_prev_{0};
  Clock::time_point window_start_{};
  Clock::time_point last_change_{};
};

}  // namespace geoccl::transport
