#include "transport/scavenger.h"

#include <algorithm>

namespace geoccl::transport {

ScavengerOptions ScavengerOptions::from_config(const Config& cfg) {
  ScavengerOptions o;
  o.cap_bps = cfg.bulk_rate_bps;
  o.target_delay = std::chrono::duration_cast<std::chrono::microseconds>(cfg.bulk_target_delay);
  return o;
}

ScavengerRate::ScavengerRate(const ScavengerOptions& o) : opt_(o) {
  rate_ = o.initial_bps ? o.initial_bps : std::min<uint64_t>(cap(), 100'000'000);
  rate_ = std::clamp(rate_, opt_.floor_bps, cap());
}

uint64_t ScavengerRate::on_rtt(Clock::time_point now, Micros srtt) {
  if (srtt.count() <= 0) return rate_;
  if (base_.count() == 0) {
    base_ = base_prev_ = last_rtt_ = srtt;
    window_start_ = last_change_ = now;
  }
  if (now - window_start_ > kBaseWindow) {
    base_prev_ = base_;
    base_ = srtt;
    window_start_ = now;
  }
  base_ = std::min(base_, srtt);
  const Micros base = std::min(base_, base_prev_);
  qdelay_ = srtt - base;
  const Micros gradient = srtt - last_rtt_;
  last_rtt_ = srtt;
  // One change per RTT: the effect of the last one shows in the samples a round trip later.
  if (now - last_change_ < std::max(srtt, Micros(1000))) return rate_;
  const auto target = opt_.target_delay;
  uint64_t next = rate_;
  if (qdelay_ > target) {
    const double excess = static_cast<double>((qdelay_ - target).count()) / static_cast<double>(qdelay_.count());
    next = static_cast<uint64_t>(static_cast<double>(rate_) * std::max(0.5, 1.0 - excess));
  } else if (qdelay_ * 2 < target) {
    next = rate_ + std::max<uint64_t>(rate_ / 4, opt_.floor_bps);
  } else if (gradient.count() <= 0) {
    next = rate_ + rate_ / 16;
  }
  next = std::clamp(next, opt_.floor_bps, cap());
  if (next != rate_) last_change_ = now;
  rate_ = next;
  return rate_;
}

}  // namespace geoccl::transport
