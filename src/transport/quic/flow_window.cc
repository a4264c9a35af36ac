#include "transport/quic/flow_window.h"

#include <algorithm>

namespace geoccl::transport::quic {

namespace {

// `x` (bytes, possibly huge or fractional) within [lo, hi].
uint64_t clamp_bytes(long double x, uint64_t lo, uint64_t hi) {
  if (!(x >= static_cast<long double>(lo))) return lo;  // also NaN
  if (x >= static_cast<long double>(hi)) return hi;
  return static_cast<uint64_t>(x);
}

}  // namespace

FlowWindows size_windows(uint64_t rtt_ns, uint64_t rate_bps, const WindowLimits& limits) {
  const uint64_t hi = limits.ceiling;
  const uint64_t lo = std::min(limits.floor, hi);
  FlowWindows w;
  w.measured = rtt_ns > 0 && rate_bps > 0;
  if (!w.measured) {
    w.connection = clamp_bytes(static_cast<long double>(limits.unmeasured), lo, hi);
    w.max_connection = clamp_bytes(2.0L * static_cast<long double>(limits.unmeasured), w.connection, hi);
  } else {
    const long double bdp = static_cast<long double>(rate_bps) / 8.0L * static_cast<long double>(rtt_ns) / 1e9L;
    w.bdp = clamp_bytes(bdp, 0, UINT64_MAX / 4);
    w.connection = clamp_bytes(2.0L * bdp, lo, hi);
    w.max_connection = clamp_bytes(4.0L * bdp, w.connection, hi);
  }
  // A frame's stream: a BDP (the most one stream can use), at least the stream floor, never more
  // than the connection allows.
  const uint64_t stream_lo = std::min(std::max(limits.stream_floor, lo), w.connection);
  w.stream = clamp_bytes(static_cast<long double>(w.bdp), stream_lo, w.connection);
  w.max_stream = w.max_connection;
  return w;
}

}  // namespace geoccl::transport::quic
