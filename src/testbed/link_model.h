// One direction of an emulated WAN link, free of I/O and clocks: the caller
// feeds packets (opaque buffer slots + lengths) with their arrival time and
// takes back packets whose delivery time has come, plus the next deadline.
// The forwarder drives it from epoll + timerfd; unit tests drive it with
// invented timestamps, so every property is tested without sleeping.
//
// Order of the stages a packet crosses:
//   MTU check -> outage check -> [shared uplink bottleneck] -> pair bottleneck
//   -> random loss (Bernoulli, Gilbert–Elliott) -> [per-flow shaper] -> propagation delay (+jitter)
// Random loss is drawn after the bottleneck, so a lost packet has used its
// share of the link, as it does on a real path.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "bottleneck.h"
#include "link_params.h"
#include "loss_model.h"
#include "ring_fifo.h"

namespace geoccl::testbed {

struct LinkCounters {
  std::uint64_t packets_in = 0;  // offered to the link
  std::uint64_t bytes_in = 0;
  std::uint64_t packets_out = 0;  // handed back for delivery
  std::uint64_t bytes_out = 0;
  std::uint64_t queue_drops = 0;   // drop-tail (pair or uplink queue full)
  std::uint64_t random_drops = 0;  // Bernoulli + Gilbert–Elliott
  std::uint64_t outage_drops = 0;  // link cut (arrivals and in-flight packets)
  std::uint64_t mtu_drops = 0;     // larger than the link MTU
  std::uint64_t flow_drops = 0;    // per-flow shaper's queue full (flow_rate_bps)
  std::uint64_t other_drops = 0;   // outside the model: no buffer, write error
};

enum class Fate { kQueued, kMtuDrop, kOutageDrop, kFlowDrop, kQueueDrop, kRandomDrop };

// The 5-tuple of an IPv4 TCP or UDP packet, hashed (never 0); 0 for anything else (not shaped).
std::uint64_t flow_key(const std::uint8_t* packet, std::size_t len);

struct InFlight {
  std::int64_t deliver_at = 0;
  std::uint32_t slot = 0;
  std::uint32_t len = 0;
};

class LinkModel {
 public:
  static constexpr std::int64_t kForever = std::numeric_limits<std::int64_t>::max();

  LinkModel(const LinkParams& params, std::uint64_t seed);

  // Offers a packet arriving at `now` (ns, non-decreasing across calls).
  // `uplink` is the sending domain's shared egress bottleneck, if any; `flow` the packet's
  // flow_key (0: not shaped). Unless the fate is kQueued the caller still owns `slot`.
  Fate submit(std::int64_t now, std::uint32_t slot, std::uint32_t len,
              Bottleneck* uplink = nullptr, std::uint64_t flow = 0);

  // Packets leave in FIFO order (their delivery times never decrease), except that with a
  // per-flow shaper each flow keeps its own order and flows may pass each other.
  bool has_packets() const { return !fifo_.empty() || !shaped_.empty(); }
  const InFlight& front() const { return from_shaped() ? shaped_.front() : fifo_.front(); }
  void pop_delivered();
  // Earliest delivery time, or kForever when nothing is in flight.
  std::int64_t next_deadline() const { return has_packets() ? front().deliver_at : kForever; }

  // Cuts the link from `now` until `until` (kForever = until restore()).
  // Packets in flight are lost too; their slots are handed to `release`.
  template <typename Release>
  void cut(std::int64_t now, std::int64_t until, Release&& release) {
    down_until_ = std::max(down_until_, until);
    if (now >= down_until_) return;
    while (!fifo_.empty()) {
      ++counters_.outage_drops;
      release(fifo_.front().slot);
      fifo_.pop();
    }
    for (const InFlight& p : shaped_) {
      ++counters_.outage_drops;
      release(p.slot);
    }
    shaped_.clear();
  }
  void restore() { down_until_ = 0; }
  bool is_down(std::int64_t now) const { return now < down_until_; }
  std::int64_t down_until() const { return down_until_; }

  void apply(const LinkChange& change);
  const LinkParams& params() const { return params_; }

  LinkCounters& counters() { return counters_; }
  const LinkCounters& counters() const { return counters_; }

 private:
  std::int64_t jitter_sample();
  std::uint64_t flow_queue_bytes() const { return QueueLimit{0, 20'000'000}.bytes_at(params_.flow_rate_bps); }
  bool from_shaped() const {
    return !shaped_.empty() && (fifo_.empty() || shaped_.front().deliver_at < fifo_.front().deliver_at);
  }
  // Each flow's shaper: its own bottleneck at flow_rate, and its latest delivery (never passed).
  struct FlowShaper {
    Bottleneck out;
    std::int64_t last_deliver_at = 0;
  };
  std::unordered_map<std::uint64_t, FlowShaper> flows_;
  std::vector<InFlight> shaped_;  // a min-heap on deliver_at: the shaped packets in flight

  LinkParams params_;
  Bottleneck bottleneck_;
  LossModel loss_;
  std::mt19937_64 jitter_rng_;
  RingFifo<InFlight> fifo_;
  std::int64_t last_deliver_at_ = 0;
  std::int64_t down_until_ = 0;
  LinkCounters counters_;
};

}  // namespace geoccl::testbed
