#include "api/startup/device_options.h"

#include "protocol/liveness.h"

namespace geoccl::api::startup {

using transport::tcp::TcpOptions;

TcpOptions tcp_options(const Config& cfg, int data_streams) {
  const bool labelled = !cfg.domain.empty();
  TcpOptions o;
  o.data_streams = data_streams > 0 ? data_streams : TcpOptions::kMostStreams;
  o.initial_streams = data_streams > 0 ? 0 : TcpOptions::kInitialStreams;
  if (cfg.tcp_cc == "auto") {
    o.wan_congestion_control = "bbr";
    o.congestion_control = labelled ? "bbr" : "";
  } else if (cfg.tcp_cc != "system") {
    o.congestion_control = o.wan_congestion_control = cfg.tcp_cc;
  }
  auto resolve = [&](int64_t v, uint64_t wan_default, uint64_t* all, uint64_t* wan) {
    *wan = v >= 0 ? static_cast<uint64_t>(v) : wan_default;
    *all = v >= 0 ? static_cast<uint64_t>(v) : (labelled ? wan_default : 0);
  };
  resolve(cfg.tcp_buf_bytes, TcpOptions::kWanBufferBytes, &o.buffer_bytes, &o.wan_buffer_bytes);
  resolve(cfg.tcp_notsent_lowat, TcpOptions::kWanNotsentLowat, &o.notsent_lowat, &o.wan_notsent_lowat);
  o.zerocopy = cfg.tcp_zerocopy;
  o.zerocopy_min_bytes = cfg.tcp_zerocopy_min_bytes;
  o.round_robin = cfg.tcp_stripe == "rr";
  o.narrow_fan_out = cfg.tcp_stripe == "backlog";
  o.resume = cfg.tcp_resume == "on";
  o.wan_resume = cfg.tcp_resume == "on" || cfg.tcp_resume == "auto";
  o.resume_timeout = cfg.resume_timeout();
  o.stall_timeout = cfg.tcp_stall_timeout;
  o.relay_after = cfg.relay_after;
  o.user_timeout = cfg.resume_timeout();
  o.keepalive_idle = cfg.liveness_window;
  o.keepalive_interval = cfg.heartbeat_interval;
  o.lazy = cfg.lazy_connect == "on" || (cfg.lazy_connect == "auto" && cfg.world_size > protocol::kWatchEveryPeerUpTo);
  return o;
}

transport::quic::QuicOptions quic_options(const Config& cfg) {
  transport::quic::QuicOptions o;
  o.congestion_control = cfg.quic_cc;
  o.window_bytes = cfg.quic_window_bytes;
  o.idle_timeout = cfg.resume_timeout();
  o.duplicate_bytes = cfg.quic_duplicate_bytes;
  o.redial_after = cfg.quic_redial_after;
  o.zero_rtt = cfg.quic_zero_rtt;
  return o;
}

transport::DeviceOptions device_options(const Config& cfg, int data_streams) {
  transport::DeviceOptions o;
  o.choice = transport::PathChoice::parse(cfg.transport);
  o.shm_trust_host = cfg.shm_trust_host;
  o.tcp = tcp_options(cfg, data_streams);
  o.bulk.cap_bps = cfg.bulk_rate_bps;
  o.bulk.target_delay = std::chrono::duration_cast<std::chrono::microseconds>(cfg.bulk_target_delay);
  o.quic = quic_options(cfg);
  o.shm.ring_bytes = cfg.shm_ring_bytes;
  return o;
}

transport::RouterOptions router_options(const Config& cfg) {
  transport::RouterOptions o;
  o.candidate_budget = cfg.quic_connect_budget;
  o.liveness.interval = cfg.heartbeat_interval;
  o.liveness.window = cfg.liveness_window;
  o.liveness.link_bound = cfg.resume_timeout();
  return o;
}

}  // namespace geoccl::api::startup
