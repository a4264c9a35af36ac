#include "link_model.h"

#include <algorithm>

namespace geoccl::testbed {

LinkModel::LinkModel(const LinkParams& params, std::uint64_t seed)
    : params_(params),
      bottleneck_(params.rate_bps, params.queue.bytes_at(params.rate_bps)),
      loss_(params.loss, params.ge, seed),
      // A distinct stream so that turning jitter on does not change which
      // packets the loss model drops.
      jitter_rng_(seed ^ 0x9e3779b97f4a7c15ULL) {}

Fate LinkModel::submit(std::int64_t now, std::uint32_t slot, std::uint32_t len,
                       Bottleneck* uplink) {
  ++counters_.packets_in;
  counters_.bytes_in += len;
  if (len > params_.mtu) {
    ++counters_.mtu_drops;
    return Fate::kMtuDrop;
  }
  if (is_down(now)) {
    ++counters_.outage_drops;
    return Fate::kOutageDrop;
  }
  std::int64_t t = now;
  if (uplink != nullptr) {
    const auto left_uplink = uplink->admit(t, len);
    if (!left_uplink) {
      ++counters_.queue_drops;
      return Fate::kQueueDrop;
    }
    t = *left_uplink;
  }
  const auto departed = bottleneck_.admit(t, len);
  if (!departed) {
    ++counters_.queue_drops;
    return Fate::kQueueDrop;
  }
  if (loss_.lose()) {
    ++counters_.random_drops;
    return Fate::kRandomDrop;
  }
  std::int64_t deliver_at = *departed + params_.delay_ns + jitter_sample();
  // Jitter never reorders: a packet cannot overtake the one before it.
  deliver_at = std::max({deliver_at, last_deliver_at_, *departed});
  last_deliver_at_ = deliver_at;
  fifo_.push(InFlight{deliver_at, slot, len});
  return Fate::kQueued;
}

void LinkModel::pop_delivered() {
  ++counters_.packets_out;
  counters_.bytes_out += fifo_.front().len;
  fifo_.pop();
}

void LinkModel::apply(const LinkChange& change) {
  change.apply_to(params_);
  bottleneck_.set_rate(params_.rate_bps);
  bottleneck_.set_queue_bytes(params_.queue.bytes_at(params_.rate_bps));
  loss_.set_bernoulli(params_.loss);
  loss_.set_gilbert_elliott(params_.ge);
}

std::int64_t LinkModel::jitter_sample() {
  if (params_.jitter_ns <= 0) return 0;
  const double u = static_cast<double>(jitter_rng_() >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<std::int64_t>((2 * u - 1) * static_cast<double>(params_.jitter_ns));
}

}  // namespace geoccl::testbed
