// A rate limit in front of a drop-tail queue, modelled with a virtual clock.
//
// Instead of holding packets in a queue and dequeuing them on a timer, the
// bottleneck only remembers when its transmitter becomes free (`free_at_`).
// A packet arriving at `now` starts transmission at max(now, free_at_) and
// leaves after len*8/rate. The queue's backlog is whatever remains to be
// transmitted, (free_at_ - now) * rate, so a drop-tail queue of Q bytes drops
// a packet exactly when backlog + len > Q. This gives the same departure times
// as a real FIFO + serializer, costs O(1) per packet and needs no timers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

namespace geoccl::testbed {

// rate (up to 1e12 bit/s) times a time span in ns overflows 64 bits.
__extension__ using Int128 = __int128;

class Bottleneck {
 public:
  // rate_bps == 0 means unlimited: packets leave the instant they arrive.
  Bottleneck(std::uint64_t rate_bps, std::uint64_t queue_bytes)
      : rate_bps_(rate_bps), queue_bytes_(queue_bytes) {}

  // Departure time (ns) of a packet of `len` bytes arriving at `now`, or
  // nullopt if the drop-tail queue is full. Arrivals must be non-decreasing.
  std::optional<std::int64_t> admit(std::int64_t now, std::uint32_t len) {
    if (rate_bps_ == 0) return now;
    const std::int64_t start = std::max(now, free_at_);
    // An idle transmitter always takes the packet, however small the queue:
    // a queue below one MTU would otherwise black-hole large packets.
    const std::uint64_t backlog = backlog_bytes(now);
    if (backlog > 0 && backlog + len > queue_bytes_) return std::nullopt;
    free_at_ = start + serialization_ns(len);
    return free_at_;
  }

  // Bytes still waiting for (or in) transmission at `now`.
  std::uint64_t backlog_bytes(std::int64_t now) const {
    if (rate_bps_ == 0 || free_at_ <= now) return 0;
    const Int128 bits = static_cast<Int128>(free_at_ - now) * rate_bps_ / 1'000'000'000;
    return static_cast<std::uint64_t>(bits / 8);
  }

  std::int64_t serialization_ns(std::uint32_t len) const {
    return static_cast<std::int64_t>(static_cast<Int128>(len) * 8 * 1'000'000'000 / rate_bps_);
  }

  // A rate change applies to packets admitted from now on; bytes already
  // serialized keep their departure times (as on a real interface).
  void set_rate(std::uint64_t rate_bps) { rate_bps_ = rate_bps; }
  void set_queue_bytes(std::uint64_t queue_bytes) { queue_bytes_ = queue_bytes; }
  std::uint64_t rate_bps() const { return rate_bps_; }
  std::uint64_t queue_bytes() const { return queue_bytes_; }

 private:
  std::uint64_t rate_bps_;
  std::uint64_t queue_bytes_;
  std::int64_t free_at_ = 0;
};

}  // namespace geoccl::testbed
