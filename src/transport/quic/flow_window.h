// Flow-control windows of a QUIC connection, sized from the path's bandwidth-delay product.
//
// The receiver's windows must cover what the sender has in flight: one round trip's worth of the
// path's rate (the BDP), and more while the window update travels back. ngtcp2 0.12 sends
// MAX_DATA once half the window is consumed, and auto-tunes: a window consumed within two round
// trips doubles, up to the ceiling given at creation (ngtcp2_settings::max_window and
// max_stream_window). So a connection starts at twice the BDP and may grow to four times it,
// within fixed bounds (the staged frames of a receiver that has not posted its receives live in
// that memory). A path not measured yet (the first connection to a peer: its transport parameters
// leave before any RTT sample) starts at QuicOptions::window_bytes and may grow to twice that.
//
// The measurement: the lowest RTT ngtcp2 has seen (min_rtt; its first sample is the handshake's;
// the smoothed RTT would add the queue the windows let build up) and the highest rate seen on the
// path (the sender's delivery rate, or the bytes received per interval),
// both kept per peer (QuicDevice::measure, every 250 ms). The established connection is widened
// to the sized windows when they are larger (ngtcp2_conn_extend_max_offset, and each new frame
// stream's offset; credit given cannot be taken back, so it never narrows), and a re-dialled
// connection starts at them, larger or smaller.
#pragma once

#include <cstdint>

namespace geoccl::transport::quic {

struct WindowLimits {
  uint64_t unmeasured = 32u << 20;  // QuicOptions::window_bytes: a path not measured yet
  uint64_t floor = 4u << 20;        // never less, however short the path: a frame of the default
  uint64_t stream_floor = 4u << 20; // chunk (1 MiB) never waits for a window update
  uint64_t ceiling = 512u << 20;    // never more (memory a receiver may have to stage)
};

struct FlowWindows {
  bool measured = false;       // sized from a measured path (else WindowLimits::unmeasured)
  uint64_t bdp = 0;            // bytes: rtt x rate (0 when not measured)
  uint64_t connection = 0;     // initial connection window (initial_max_data)
  uint64_t stream = 0;         // initial window of a data frame's stream
  uint64_t max_connection = 0; // ngtcp2's auto-tuning ceiling for the connection
  uint64_t max_stream = 0;     // and for a stream
  bool operator==(const FlowWindows&) const = default;
};

// The windows for a path of round-trip time `rtt_ns` and rate `rate_bps` (bit/s); either 0 means
// not measured. Pure; every result lies within `limits` (floor <= stream <= connection <=
// max_connection <= ceiling, stream_floor capped by the connection window), whatever the
// inputs (a limits object whose floor exceeds its ceiling is read as floor = ceiling).
FlowWindows size_windows(uint64_t rtt_ns, uint64_t rate_bps, const WindowLimits& limits = {});

}  // namespace geoccl::transport::quic
