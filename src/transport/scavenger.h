// The bulk class's rate on one WAN path: a delay-based scavenger controller, I/O-free (time and
// RTT samples are inputs), shared by every transport that carries bulk traffic.
//
// Background traffic (checkpoints, blobs) must use only what gradients leave. Two mechanisms:
//  - strict priority, outside this class: while the gradient class has frames queued for WAN
//    peers, the bulk class writes nothing more (the transport holds its frames);
//  - this controller, for the bandwidth the gradients leave: it follows the queueing delay of
//    the path (smoothed RTT above the minimum seen), LEDBAT/TIMELY style. Below half the target
//    it grows the rate by a quarter per RTT; above the target it cuts the rate in proportion to
//    the excess (at most by half, once per RTT); a rising RTT gradient between the two holds it.
//    So a path the bulk class fills never queues more than about the target delay, which is
//    what the gradient traffic then finds in front of it.
//    The rate also stays within 1.5x of what the path delivers to the bulk class (the
//    transport's delivery-rate samples): the delay signal lags by a round trip and is only
//    sampled while the bulk class sends, so without this ceiling a rate grown on an idle path
//    would overrun it (and drop gradient packets) the moment the gradients come back.
// Rates are bit/s on the wire. The controller's rate stays within [min_bps, cap_bps]: below
// min_bps a TCP flow's RTT samples carry the receiver's delayed-ACK timer (tens of ms) and say
// nothing about the queue. The transport pauses sampling while it yields.
#pragma once

#include <chrono>
#include <cstdint>


namespace geoccl::transport {

struct ScavengerOptions {
  uint64_t cap_bps = 0;      // GEOCCL_BULK_RATE; 0 = kNoCap
  uint64_t min_bps = 40'000'000;   // the controller's own lowest rate
  uint64_t initial_bps = 0;  // 0: min(cap, 100 Mbit/s)
  std::chrono::microseconds target_delay{5000};  // GEOCCL_EXPERIMENT bulk_delay_ms
  static constexpr uint64_t kNoCap = 100'000'000'000ull;
};

class ScavengerRate {
 public:
  using Clock = std::chrono::steady_clock;
  using Micros = std::chrono::microseconds;

  explicit ScavengerRate(const ScavengerOptions& o);

  // A smoothed RTT sample of the path, taken at `now` while bulk frames were in flight;
  // `path_min`: the transport's own minimum RTT of the path, when it keeps one (the kernel's
  // windowed min_rtt), which may be lower than every sample seen here. Returns the new rate.
  // `delivered_bps`: what the path delivered to the bulk class lately, when known (0: not).
  uint64_t on_rtt(Clock::time_point now, Micros srtt, Micros path_min = Micros(0),
                  uint64_t delivered_bps = 0);
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
