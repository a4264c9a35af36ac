#include "geoccl/config.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/logging.h"
#include "geoccl/compression.h"
#include "geoccl/error.h"

namespace geoccl {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

template <class T>
T parse_int(const char* name, const char* v) {
  T out{};
  const char* end = v + std::char_traits<char>::length(v);
  auto [p, ec] = std::from_chars(v, end, out);
  if (ec != std::errc() || p != end)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + v + "' is not a valid integer");
  return out;
}

double parse_number(const char* name, const char* v) {
  char* end = nullptr;
  errno = 0;
  const double out = std::strtod(v, &end);
  if (end == v || *end != '\0' || errno != 0 || !std::isfinite(out))
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + v + "' is not a valid number");
  return out;
}

// Sizes accept K/M/G suffixes (powers of 1024).
size_t parse_size(const char* name, const char* v) {
  std::string s(v);
  size_t mult = 1;
  if (!s.empty()) {
    const char c = s.back();
    if (c == 'K' || c == 'k') mult = size_t{1} << 10;
    if (c == 'M' || c == 'm') mult = size_t{1} << 20;
    if (c == 'G' || c == 'g') mult = size_t{1} << 30;
    if (mult != 1) s.pop_back();
  }
  return parse_int<size_t>(name, s.c_str()) * mult;
}

// Rates in bit/s accept decimal k/M/G suffixes and an optional "bit", "bps" or "bit/s".
uint64_t parse_rate(const char* name, const char* v) {
  std::string s(v);
  for (const char* unit : {"bit/s", "bps", "bit"})
    if (s.size() > std::strlen(unit) && s.ends_with(unit)) {
      s.resize(s.size() - std::strlen(unit));
      break;
    }
  uint64_t mult = 1;
  if (!s.empty()) {
    const char c = s.back();
    if (c == 'K' || c == 'k') mult = 1000;
    if (c == 'M' || c == 'm') mult = 1000 * 1000;
    if (c == 'G' || c == 'g') mult = 1000 * 1000 * 1000;
    if (mult != 1) s.pop_back();
  }
  const auto n = parse_int<uint64_t>(name, s.c_str());
  if (n > UINT64_MAX / mult)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + v + "' is too large");
  return n * mult;
}

// Applies the first of `names` that is set (later names override earlier ones).
template <class F>
void apply(std::initializer_list<const char*> names, F&& set) {
  for (const char* n : names)
    if (const char* v = env(n)) set(n, v);
}

// Syntax only (the transport layer knows the names): "name", or "class=name[,class=name...]".
bool valid_transport_choice(const std::string& s) {
  auto word = [](std::string_view w) {
    if (w.empty()) return false;
    for (char c : w)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return false;
    return true;
  };
  if (s.find('=') == std::string::npos) return word(s);
  std::string_view rest(s);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || !word(item.substr(0, eq)) || !word(item.substr(eq + 1)))
      return false;
    if (comma == std::string_view::npos) return true;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace

void Config::apply_env() {
  apply({"RANK", "GEOCCL_RANK"}, [&](auto n, auto v) { rank = parse_int<int>(n, v); });
  apply({"WORLD_SIZE", "GEOCCL_WORLD_SIZE"},
        [&](auto n, auto v) { world_size = parse_int<int>(n, v); });
  apply({"LOCAL_RANK", "GEOCCL_LOCAL_RANK"},
        [&](auto n, auto v) { local_rank = parse_int<int>(n, v); });
  apply({"MASTER_ADDR", "GEOCCL_MASTER_ADDR"}, [&](auto, auto v) { master_addr = v; });
  apply({"MASTER_PORT", "GEOCCL_MASTER_PORT"},
        [&](auto n, auto v) { master_port = parse_int<uint16_t>(n, v); });
  apply({"GEOCCL_DOMAIN"}, [&](auto, auto v) { domain = v; });
  apply({"GEOCCL_SESSION"}, [&](auto, auto v) { session = v; });
  apply({"GEOCCL_STORE"}, [&](auto, auto v) { store = v; });
  apply({"GEOCCL_SECRET"}, [&](auto, auto v) { secret = v; });
  apply({"GEOCCL_SECRET_FILE"}, [&](auto, auto v) { secret_file = v; });
  apply({"GEOCCL_CIPHER"}, [&](auto, auto v) { cipher = v; });
  apply({"GEOCCL_ALLOW_INSECURE"}, [&](auto n, auto v) { allow_insecure = parse_int<int>(n, v) != 0; });
  apply({"GEOCCL_SHM_TRUST_HOST"}, [&](auto n, auto v) { shm_trust_host = parse_int<int>(n, v) != 0; });
  apply({"GEOCCL_BIND_ADDR"}, [&](auto, auto v) { bind_addr = v; });
  apply({"GEOCCL_TRANSPORT"}, [&](auto, auto v) { transport = v; });
  apply({"GEOCCL_SHM_RING_BYTES"}, [&](auto n, auto v) { shm_ring_bytes = parse_size(n, v); });
  apply({"GEOCCL_QUIC_CC"}, [&](auto, auto v) { quic_cc = v; });
  apply({"GEOCCL_QUIC_WINDOW_BYTES"}, [&](auto n, auto v) { quic_window_bytes = parse_size(n, v); });
  apply({"GEOCCL_QUIC_DUPLICATE_BYTES"}, [&](auto n, auto v) { quic_duplicate_bytes = parse_size(n, v); });
  apply({"GEOCCL_QUIC_0RTT"}, [&](auto n, auto v) { quic_zero_rtt = parse_int<int>(n, v) != 0; });
  apply({"GEOCCL_QUIC_REDIAL_MS"}, [&](auto n, auto v) { quic_redial_after = std::chrono::milliseconds(parse_int<int64_t>(n, v)); });
  apply({"GEOCCL_QUIC_CONNECT_MS"}, [&](auto n, auto v) { quic_connect_budget = std::chrono::milliseconds(parse_int<int64_t>(n, v)); });
  apply({"GEOCCL_TRANSPORT_PROBE_BYTES"}, [&](auto n, auto v) { transport_probe_bytes = parse_size(n, v); });
  apply({"GEOCCL_TCP_CC"}, [&](auto, auto v) { tcp_cc = v; });
  apply({"GEOCCL_TCP_STREAMS"}, [&](auto n, auto v) { tcp_streams = parse_int<int>(n, v); });
  auto size_or_auto = [](const char* n, const char* v) {
    return std::string(v) == "auto" ? int64_t{-1} : static_cast<int64_t>(parse_size(n, v));
  };
  apply({"GEOCCL_TCP_BUF_BYTES"}, [&](auto n, auto v) { tcp_buf_bytes = size_or_auto(n, v); });
  apply({"GEOCCL_TCP_NOTSENT_LOWAT"}, [&](auto n, auto v) { tcp_notsent_lowat = size_or_auto(n, v); });
  apply({"GEOCCL_TCP_ZEROCOPY"}, [&](auto n, auto v) { tcp_zerocopy = parse_int<int>(n, v) != 0; });
  apply({"GEOCCL_TCP_ZEROCOPY_MIN"}, [&](auto n, auto v) { tcp_zerocopy_min_bytes = parse_size(n, v); });
  apply({"GEOCCL_TCP_STRIPE"}, [&](auto, auto v) { tcp_stripe = v; });
  apply({"GEOCCL_TCP_RESUME"}, [&](auto, auto v) { tcp_resume = v; });
  apply({"GEOCCL_TCP_RESUME_TIMEOUT_MS"}, [&](auto n, auto v) {
    tcp_resume_timeout = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_TCP_STALL_MS"}, [&](auto n, auto v) {
    tcp_stall_timeout = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_RELAY_AFTER_MS"}, [&](auto n, auto v) {
    relay_after = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_HEARTBEAT_MS"}, [&](auto n, auto v) {
    heartbeat_interval = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_LIVENESS_WINDOW_MS"}, [&](auto n, auto v) {
    liveness_window = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_BULK_RATE"}, [&](auto n, auto v) { bulk_rate_bps = parse_rate(n, v); });
  apply({"GEOCCL_BULK_TARGET_DELAY_MS"}, [&](auto n, auto v) {
    bulk_target_delay = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_TIMEOUT_MS"},
        [&](auto n, auto v) { op_timeout = std::chrono::milliseconds(parse_int<int64_t>(n, v)); });
  apply({"GEOCCL_CONNECT_TIMEOUT_MS"}, [&](auto n, auto v) {
    connect_timeout = std::chrono::milliseconds(parse_int<int64_t>(n, v));
  });
  apply({"GEOCCL_ALGO"}, [&](auto, auto v) { algo = v; });
  apply({"GEOCCL_TOPOLOGY"}, [&](auto, auto v) { topology = v; });
  apply({"GEOCCL_SMALL_MSG_BYTES"}, [&](auto n, auto v) { small_msg_bytes = parse_size(n, v); });
  apply({"GEOCCL_WAN_SMALL_MSG_BYTES"},
        [&](auto n, auto v) { wan_small_msg_bytes = parse_size(n, v); });
  apply({"GEOCCL_PLAN_PROBE_BYTES"}, [&](auto n, auto v) { plan_probe_bytes = parse_size(n, v); });
  apply({"GEOCCL_REPLAN_OPS"}, [&](auto n, auto v) { replan_ops = parse_int<int>(n, v); });
  apply({"GEOCCL_REPLAN_PERSIST"}, [&](auto n, auto v) { replan_persist = parse_int<int>(n, v); });
  apply({"GEOCCL_TWO_HOP_GAIN"}, [&](auto n, auto v) { two_hop_gain = parse_number(n, v); });
  apply({"GEOCCL_CHUNK_BYTES"}, [&](auto n, auto v) { chunk_bytes = parse_size(n, v); });
  apply({"GEOCCL_WAN_COMPRESSION"}, [&](auto, auto v) { wan_compression = v; });
  apply({"GEOCCL_WAN_COMPRESSION_MIN_BYTES"},
        [&](auto n, auto v) { wan_compression_min_bytes = parse_size(n, v); });
  apply({"GEOCCL_METRICS_PORT"}, [&](auto n, auto v) { metrics_port = parse_int<int>(n, v); });
  apply({"GEOCCL_METRICS_BIND"}, [&](auto, auto v) { metrics_bind = v; });
  apply({"GEOCCL_METRICS_LINK_BPS"}, [&](auto n, auto v) { metrics_link_bps = parse_rate(n, v); });
  apply({"GEOCCL_TRACE"}, [&](auto, auto v) { trace_dir = v; });
  apply({"GEOCCL_LOG_LEVEL"}, [&](auto, auto v) { log_level = v; });
}

Config Config::from_env() {
  Config c;
  c.apply_env();
  return c;
}

void Config::validate() const {
  auto bad = [](const std::string& m) { throw Error(ErrorCode::kInvalidArgument, m); };
  if (world_size < 1) bad("world size must be >= 1 (set WORLD_SIZE), got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    bad("rank " + std::to_string(rank) + " out of range for world size " + std::to_string(world_size));
  if (op_timeout.count() <= 0) bad("GEOCCL_TIMEOUT_MS must be > 0");
  if (connect_timeout.count() <= 0) bad("GEOCCL_CONNECT_TIMEOUT_MS must be > 0");
  if (replan_ops < 0) bad("GEOCCL_REPLAN_OPS must be >= 0 (0 = off)");
  if (replan_persist < 1) bad("GEOCCL_REPLAN_PERSIST must be >= 1");
  if (!(two_hop_gain == 0 || two_hop_gain > 1)) bad("GEOCCL_TWO_HOP_GAIN must be 0 (off) or > 1");
  if (tcp_streams < 0 || tcp_streams > 64) bad("GEOCCL_TCP_STREAMS must be in 0..64");
  if (tcp_buf_bytes > (int64_t{1} << 30)) bad("GEOCCL_TCP_BUF_BYTES must be at most 1G");
  if (tcp_stripe != "backlog" && tcp_stripe != "wide" && tcp_stripe != "rr")
    bad("GEOCCL_TCP_STRIPE must be backlog, wide or rr, got '" + tcp_stripe + "'");
  if (tcp_resume != "auto" && tcp_resume != "on" && tcp_resume != "off")
    bad("GEOCCL_TCP_RESUME must be auto, on or off, got '" + tcp_resume + "'");
  if (tcp_resume_timeout.count() <= 0) bad("GEOCCL_TCP_RESUME_TIMEOUT_MS must be > 0");
  if (relay_after.count() < 0) bad("GEOCCL_RELAY_AFTER_MS must be >= 0 (0: never relay)");
  if (tcp_stall_timeout.count() < 0) bad("GEOCCL_TCP_STALL_MS must be >= 0 (0: never replace a stalled connection)");
  if (heartbeat_interval.count() < 0) bad("GEOCCL_HEARTBEAT_MS must be >= 0 (0: no heartbeats)");
  if (heartbeat_interval.count() > 0 && liveness_window < 3 * heartbeat_interval)
    bad("GEOCCL_LIVENESS_WINDOW_MS must be at least 3 heartbeat intervals (GEOCCL_HEARTBEAT_MS)");
  if (!valid_transport_choice(transport))
    bad("GEOCCL_TRANSPORT must be auto, tcp, quic or a list of class=name "
        "(host=shm,remote=quic), got '" + transport + "'");
  if (quic_cc != "cubic" && quic_cc != "bbr" && quic_cc != "bbr2" && quic_cc != "reno")
    bad("GEOCCL_QUIC_CC must be cubic, bbr, bbr2 or reno, got '" + quic_cc + "'");
  if (quic_window_bytes < (64 << 10) || quic_window_bytes > (uint64_t{1} << 32))
    bad("GEOCCL_QUIC_WINDOW_BYTES must be between 64K and 4G");
  if (quic_duplicate_bytes > (1u << 20)) bad("GEOCCL_QUIC_DUPLICATE_BYTES must be at most 1M");
  if (quic_redial_after.count() != 0 && (quic_redial_after.count() < 100 || quic_redial_after.count() > 600000))
    bad("GEOCCL_QUIC_REDIAL_MS must be 0 or in 100..600000");
  if (quic_connect_budget.count() < 100) bad("GEOCCL_QUIC_CONNECT_MS must be >= 100");
  if (transport_probe_bytes < 4096 || transport_probe_bytes > (uint64_t{1} << 30))
    bad("GEOCCL_TRANSPORT_PROBE_BYTES must be between 4K and 1G");
  if (bulk_target_delay.count() < 1 || bulk_target_delay.count() > 10000)
    bad("GEOCCL_BULK_TARGET_DELAY_MS must be in 1..10000");
  if (chunk_bytes < 4096) bad("GEOCCL_CHUNK_BYTES must be >= 4096");
  if (shm_ring_bytes < (64 << 10) || shm_ring_bytes > (size_t{1} << 30))
    bad("GEOCCL_SHM_RING_BYTES must be between 64K and 1G");
  if (algo != "auto" && algo != "ring" && algo != "rd" && algo != "tree" && algo != "hier" &&
      algo != "hier-ring" && algo != "hier-small" && algo != "hier-direct" &&
      algo != "hier-leaders" && algo != "flat")
    bad("GEOCCL_ALGO must be auto, ring, rd, tree, hier (hier-ring, hier-small, hier-direct, hier-leaders) or flat, got '" +
        algo + "'");
  try {
    (void)Compression::parse(wan_compression);
  } catch (const Error& e) {
    bad(std::string("GEOCCL_WAN_COMPRESSION: ") + e.what());
  }
  if (topology != "auto" && topology != "labels" && topology != "probe" && topology != "flat")
    bad("GEOCCL_TOPOLOGY must be auto, labels, probe or flat, got '" + topology + "'");
  if (metrics_port < 0 || metrics_port > 65535)
    bad("GEOCCL_METRICS_PORT must be in 0..65535 (0: no /metrics), got " + std::to_string(metrics_port));
  core::LogLevel l;
  if (!core::parse_log_level(log_level, &l)) bad("GEOCCL_LOG_LEVEL '" + log_level + "' is unknown");
}

}  // namespace geoccl
