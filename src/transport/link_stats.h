// What a device reports about its link to one peer: the counters every device keeps, and the
// figures of the transport that carries the link (its streams, its congestion controller). This
// is the transport's own record; the api layer chooses what of it the public PeerStats shows, so
// a figure added here changes no public type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace geoccl::transport {

// One connection of a stream device (TCP): the kernel's view (TCP_INFO, zero where the kernel
// does not report a field) and the connection's own counters.
struct StreamStats {
  int index = 0;  // data stream 1..S (0 is the control stream, not listed)
  std::string congestion_control;
  double rtt_ms = 0, min_rtt_ms = 0;
  uint32_t cwnd_segments = 0, mss = 0;
  uint64_t retransmits = 0, bytes_retransmitted = 0;
  uint64_t delivery_rate_bps = 0, pacing_rate_bps = 0;
  uint64_t send_buffer = 0, receive_buffer = 0;
  uint64_t frames_sent = 0, frames_received = 0, bytes_sent = 0;
  uint64_t reconnects = 0, frames_resent = 0;  // breaks re-established, frames sent again
  int via = -1;                                // the relaying rank; -1: direct
};

struct LinkStats {
  int peer = -1;
  std::string device;  // Device::name() of the device that carries the link
  std::string choice;  // why the transport decider chose that device ("" when it did not decide)
  uint64_t bytes_sent = 0, bytes_received = 0, frames_sent = 0, frames_received = 0;
  double rtt_ms = 0;  // smoothed, where the device measures one
  int relay = -1;     // the rank relaying the peer's connections; -1: direct
  uint64_t relayed_bytes = 0;
  uint64_t forwarded_bytes = 0;  // of bytes_sent: sent on as they arrived (ForwardOnReceive)
  int two_hop = -1;  // the rank relaying bulk data streams over a two-hop path; -1: none
  uint64_t two_hop_min_bytes = 0;
  uint64_t bulk_bytes_sent = 0, bulk_bytes_received = 0;  // the bulk class's link
  double bulk_rtt_ms = 0;

  // Stream devices: the data streams open, the stripe width, aggregates (least min RTT, the
  // rest sums) and each stream.
  struct Streams {
    int open = 0, width = 0;
    uint64_t width_changes = 0;
    std::string congestion_control;  // of the first data stream
    double min_rtt_ms = 0;
    uint64_t cwnd_segments = 0, retransmits = 0, bytes_retransmitted = 0;
    uint64_t delivery_rate_bps = 0, pacing_rate_bps = 0;
    std::vector<StreamStats> each;
  } streams;

  // QUIC: ngtcp2's view of the connection, its replacements and its receive windows.
  struct Quic {
    std::string congestion_control;
    double min_rtt_ms = 0;
    uint64_t cwnd_bytes = 0, bytes_in_flight = 0, delivery_rate_bps = 0, pacing_rate_bps = 0;
    uint64_t streams_opened = 0, frames_duplicated = 0;
    uint64_t reconnects = 0, frames_resent = 0, zero_rtt = 0, zero_rtt_refused = 0;
    double reconnect_ms = 0;
    bool gso = false;
    uint64_t window_bytes = 0, stream_window_bytes = 0, max_window_bytes = 0;
    uint64_t window_rtt_ns = 0, window_rate_bps = 0;
  } quic;
};

}  // namespace geoccl::transport
