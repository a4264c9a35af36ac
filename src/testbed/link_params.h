// The parameters of one direction of an emulated WAN link, and partial
// updates of them (from scheduled events or the control socket).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loss_model.h"

namespace geoccl::testbed {

// A drop-tail queue limit, either in bytes or in time at the link's rate
// ("20ms" of a 1 Gbit/s link is 2.5 MB). A time limit follows rate changes.
struct QueueLimit {
  std::uint64_t bytes = 0;
  std::int64_t ns = 0;  // takes precedence when > 0

  std::uint64_t bytes_at(std::uint64_t rate_bps) const {
    if (ns <= 0) return bytes;
    return static_cast<std::uint64_t>(static_cast<long double>(ns) * rate_bps / 8e9L);
  }
  std::string to_string() const;
};

struct LinkParams {
  std::int64_t delay_ns = 0;   // one-way propagation delay
  std::int64_t jitter_ns = 0;  // delay varies uniformly in +-jitter, never reordering
  std::uint64_t rate_bps = 0;  // 0 = no rate limit on this pair
  QueueLimit queue{0, 20'000'000};
  double loss = 0;             // Bernoulli loss ratio
  GilbertElliott ge;           // optional burst loss
  std::uint32_t mtu = 1500;    // larger IP packets are dropped
  // A per-flow shaper, as clouds cap one TCP connection or UDP flow (a 5-tuple) below the
  // path's rate: each flow leaves at most at this rate from a drop-tail queue of 20 ms at it.
  // 0 = none.
  std::uint64_t flow_rate_bps = 0;
};

struct LinkChange {
  std::optional<std::int64_t> delay_ns;
  std::optional<std::int64_t> jitter_ns;
  std::optional<std::uint64_t> rate_bps;
  std::optional<QueueLimit> queue;
  std::optional<double> loss;
  std::optional<GilbertElliott> ge;
  std::optional<std::uint32_t> mtu;
  std::optional<std::uint64_t> flow_rate_bps;

  bool empty() const {
    return !delay_ns && !jitter_ns && !rate_bps && !queue && !loss && !ge && !mtu && !flow_rate_bps;
  }
  void apply_to(LinkParams& p) const {
    if (delay_ns) p.delay_ns = *delay_ns;
    if (jitter_ns) p.jitter_ns = *jitter_ns;
    if (rate_bps) p.rate_bps = *rate_bps;
    if (queue) p.queue = *queue;
    if (loss) p.loss = *loss;
    if (ge) p.ge = *ge;
    if (mtu) p.mtu = *mtu;
    if (flow_rate_bps) p.flow_rate_bps = *flow_rate_bps;
  }
  std::string to_string() const;
};

std::string to_string(const LinkParams& p);

}  // namespace geoccl::testbed
