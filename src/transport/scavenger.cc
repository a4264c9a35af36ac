#include "transport/scavenger.h"

#include <algorithm>

namespace geoccl::transport {

ScavengerRate::ScavengerRate(const ScavengerOptions& o) : opt_(o) {
  rate_ = o.initial_bps ? o.initial_bps : std::min<uint64_t>(cap(), 100'000'000);
  rate_ = std::clamp(rate_, std::min(opt_.min_bps, cap()), cap());
}

uint64_t ScavengerRate::on_rtt(Clock::time_point now, Micros srtt, Micros path_min,
                              uint64_t delivered_bps) {
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
  if (path_min.count() > 0) base_ = std::min(base_, path_min);
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
    next = rate_ + std::max<uint64_t>(rate_ / 4, opt_.min_bps / 4);
  } else if (gradient.count() <= 0) {
    next = rate_ + rate_ / 16;
  }
  if (delivered_bps > 0) next = std::min(next, delivered_bps + delivered_bps / 2);
  next = std::clamp(next, std::min(opt_.min_bps, cap()), cap());
  if (next != rate_) last_change_ = now;
  rate_ = next;
  return rate_;
}

}  // namespace geoccl::transport
