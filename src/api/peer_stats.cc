#include "api/peer_stats.h"

namespace geoccl::api {

PeerStats to_peer_stats(const transport::LinkStats& l) {
  PeerStats ps;
  ps.peer = l.peer;
  ps.transport = l.device;
  ps.transport_choice = l.choice;
  ps.bytes_sent = l.bytes_sent;
  ps.bytes_received = l.bytes_received;
  ps.frames_sent = l.frames_sent;
  ps.frames_received = l.frames_received;
  ps.rtt_ms = l.rtt_ms;
  ps.relay = l.relay;
  ps.relayed_bytes = l.relayed_bytes;
  ps.forwarded_bytes = l.forwarded_bytes;
  ps.two_hop = l.two_hop;
  ps.two_hop_min_bytes = l.two_hop_min_bytes;
  ps.bulk_bytes_sent = l.bulk_bytes_sent;
  ps.bulk_bytes_received = l.bulk_bytes_received;
  ps.bulk_rtt_ms = l.bulk_rtt_ms;

  const auto& s = l.streams;
  PeerStats::Tcp& t = ps.tcp;
  t.data_streams = s.open;
  t.width = s.width;
  t.width_changes = s.width_changes;
  t.congestion_control = s.congestion_control;
  t.min_rtt_ms = s.min_rtt_ms;
  t.cwnd_segments = s.cwnd_segments;
  t.retransmits = s.retransmits;
  t.bytes_retransmitted = s.bytes_retransmitted;
  t.delivery_rate_bps = s.delivery_rate_bps;
  t.pacing_rate_bps = s.pacing_rate_bps;
  t.streams.reserve(s.each.size());
  for (const auto& e : s.each) {
    PeerStats::TcpStream o;
    o.index = e.index;
    o.congestion_control = e.congestion_control;
    o.rtt_ms = e.rtt_ms;
    o.min_rtt_ms = e.min_rtt_ms;
    o.cwnd_segments = e.cwnd_segments;
    o.mss = e.mss;
    o.retransmits = e.retransmits;
    o.bytes_retransmitted = e.bytes_retransmitted;
    o.delivery_rate_bps = e.delivery_rate_bps;
    o.pacing_rate_bps = e.pacing_rate_bps;
    o.send_buffer = e.send_buffer;
    o.receive_buffer = e.receive_buffer;
    o.frames_sent = e.frames_sent;
    o.frames_received = e.frames_received;
    o.bytes_sent = e.bytes_sent;
    o.reconnects = e.reconnects;
    o.frames_resent = e.frames_resent;
    o.via = e.via;
    t.streams.push_back(std::move(o));
  }

  const auto& qi = l.quic;
  PeerStats::Quic& q = ps.quic;
  q.congestion_control = qi.congestion_control;
  q.min_rtt_ms = qi.min_rtt_ms;
  q.cwnd_bytes = qi.cwnd_bytes;
  q.bytes_in_flight = qi.bytes_in_flight;
  q.delivery_rate_bps = qi.delivery_rate_bps;
  q.pacing_rate_bps = qi.pacing_rate_bps;
  q.streams_opened = qi.streams_opened;
  q.frames_duplicated = qi.frames_duplicated;
  q.reconnects = qi.reconnects;
  q.frames_resent = qi.frames_resent;
  q.zero_rtt = qi.zero_rtt;
  q.zero_rtt_refused = qi.zero_rtt_refused;
  q.reconnect_ms = qi.reconnect_ms;
  q.gso = qi.gso;
  q.window_bytes = qi.window_bytes;
  q.stream_window_bytes = qi.stream_window_bytes;
  q.max_window_bytes = qi.max_window_bytes;
  q.window_rtt_ns = qi.window_rtt_ns;
  q.window_rate_bps = qi.window_rate_bps;
  return ps;
}

metrics::PeerFigures to_peer_figures(const transport::LinkStats& l) {
  metrics::PeerFigures f;
  f.peer = l.peer;
  f.transport = l.device;
  f.rtt_ms = l.rtt_ms;
  f.min_rtt_ms = l.streams.min_rtt_ms;
  f.bytes_sent = l.bytes_sent + l.bulk_bytes_sent;
  f.bytes_received = l.bytes_received + l.bulk_bytes_received;
  f.retransmits = l.streams.retransmits;
  for (const auto& s : l.streams.each) f.reconnects += s.reconnects;
  f.reconnects += l.quic.reconnects;
  f.delivery_rate_bps = l.streams.delivery_rate_bps;
  return f;
}

}  // namespace geoccl::api
