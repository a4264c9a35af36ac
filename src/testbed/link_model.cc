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

std::uint64_t flow_key(const std::uint8_t* p, std::size_t len) {
  if (len < 20 || (p[0] >> 4) != 4) return 0;
  const std::size_t ihl = static_cast<std::size_t>(p[0] & 0x0F) * 4;
  const std::uint8_t proto = p[9];
  const bool fragment = ((p[6] & 0x3F) | p[7]) != 0;  // more-fragments or an offset
  if ((proto != 6 && proto != 17) || fragment || ihl < 20 || len < ihl + 4) return 0;
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over proto, addresses and ports
  auto mix = [&h](std::uint8_t b) { h = (h ^ b) * 0x100000001b3ULL; };
  mix(proto);
  for (std::size_t i = 12; i < 20; ++i) mix(p[i]);
  for (std::size_t i = ihl; i < ihl + 4; ++i) mix(p[i]);
  return h == 0 ? 1 : h;
}

namespace {
bool later(const InFlight& a, const InFlight& b) { return a.deliver_at > b.deliver_at; }
}  // namespace

Fate LinkModel::submit(std::int64_t now, std::uint32_t slot, std::uint32_t len,
                       Bottleneck* uplink, std::uint64_t flow) {
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
  if (flow != 0 && params_.flow_rate_bps > 0) {
    // The flow's own transmitter at flow_rate, behind a drop-tail queue of 20 ms at that rate.
    FlowShaper& f = flows_.try_emplace(flow, FlowShaper{Bottleneck(params_.flow_rate_bps, flow_queue_bytes())}).first->second;
    const auto shaped = f.out.admit(*departed, len);
    if (!shaped) {
      ++counters_.flow_drops;
      return Fate::kFlowDrop;
    }
    const std::int64_t at = std::max(*shaped + params_.delay_ns + jitter_sample(), f.last_deliver_at);
    f.last_deliver_at = at;
    shaped_.push_back(InFlight{at, slot, len});
    std::push_heap(shaped_.begin(), shaped_.end(), later);
    return Fate::kQueued;
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
  counters_.bytes_out += front().len;
  if (from_shaped()) {
    std::pop_heap(shaped_.begin(), shaped_.end(), later);
    shaped_.pop_back();
  } else {
    fifo_.pop();
  }
}

void LinkModel::apply(const LinkChange& change) {
  change.apply_to(params_);
  bottleneck_.set_rate(params_.rate_bps);
  bottleneck_.set_queue_bytes(params_.queue.bytes_at(params_.rate_bps));
  loss_.set_bernoulli(params_.loss);
  loss_.set_gilbert_elliott(params_.ge);
  if (params_.flow_rate_bps == 0) flows_.clear();
  for (auto& [key, f] : flows_) {
    f.out.set_rate(params_.flow_rate_bps);
    f.out.set_queue_bytes(flow_queue_bytes());
  }
}

std::int64_t LinkModel::jitter_sample() {
  if (params_.jitter_ns <= 0) return 0;
  const double u = static_cast<double>(jitter_rng_() >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<std::int64_t>((2 * u - 1) * static_cast<double>(params_.jitter_ns));
}

}  // namespace geoccl::testbed
