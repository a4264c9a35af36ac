#include "transport/tcp/stall.h"

#include <algorithm>
#include <optional>

namespace geoccl::transport::tcp {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

std::chrono::milliseconds busy_bound(std::span<const StallSample> streams,
                                     std::chrono::milliseconds timeout) {
  uint64_t in_flight = 0, rate_bps = 0;
  microseconds rtt{0};
  for (const auto& s : streams) {
    if (!s.open) continue;
    in_flight += s.unacked_bytes;
    rate_bps += s.delivery_bps;
    rtt = std::max(rtt, s.srtt);
  }
  // What waits ahead of a stream's oldest unacknowledged byte is at most the data in flight to
  // the peer; the path drains it at about the sum of its streams' delivery rates. Without a rate
  // sample the floor alone holds.
  const milliseconds drain =
      rate_bps > 0 ? milliseconds(in_flight * 8 * 1000 / rate_bps) : milliseconds(0);
  return std::max(kBusyTimeouts * timeout, drain + duration_cast<milliseconds>(kBusyRtts * rtt));
}

std::vector<StallDecision> stalled_streams(std::span<const StallSample> streams,
                                           std::chrono::milliseconds timeout) {
  std::vector<StallDecision> out;
  if (timeout.count() <= 0) return out;
  bool path_alive = false;
  for (const auto& s : streams) path_alive |= s.open && s.since_ack < timeout;
  std::optional<milliseconds> busy;  // computed once, when a quiet stream on a live path needs it
  for (size_t i = 0; i < streams.size(); ++i) {
    const StallSample& s = streams[i];
    if (!s.open || s.unacked_bytes == 0) continue;
    const milliseconds quiet = std::max(timeout, duration_cast<milliseconds>(8 * s.srtt));
    if (s.waiting < quiet) continue;
    if (!path_alive) {
      out.push_back({i, StallReason::kPathSilent, quiet});
      continue;
    }
    if (!busy) busy = busy_bound(streams, timeout);
    // Never below the quiet bound: a long path's 8 RTTs may exceed the busy floor.
    const milliseconds bound = std::max(*busy, quiet);
    if (s.waiting >= bound) out.push_back({i, StallReason::kStreamStuck, bound});
  }
  return out;
}

bool path_silent(std::span<const StallSample> streams, std::chrono::milliseconds timeout) {
  for (const StallDecision& d : stalled_streams(streams, timeout))
    if (d.reason == StallReason::kPathSilent) return true;
  return false;
}

bool path_down_after(bool was_down, std::span<const StallSample> direct, std::chrono::milliseconds timeout) {
  bool acked = false, waiting = false, open = false;
  for (const auto& d : direct) {
    if (!d.open) continue;
    open = true;
    acked = acked || d.since_ack < timeout;
    waiting = waiting || d.unacked_bytes > 0;
  }
  if (acked || (open && !waiting)) return false;
  return was_down || path_silent(direct, timeout);
}

}  // namespace geoccl::transport::tcp
