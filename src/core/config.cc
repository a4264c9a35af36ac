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

// Sizes accept K/M/G suffixes (powers of 1024). The error quotes the value as given.
size_t parse_size(const char* name, const char* v) {
  std::string_view s(v);
  size_t mult = 1;
  if (!s.empty()) {
    const char c = s.back();
    if (c == 'K' || c == 'k') mult = size_t{1} << 10;
    if (c == 'M' || c == 'm') mult = size_t{1} << 20;
    if (c == 'G' || c == 'g') mult = size_t{1} << 30;
    if (mult != 1) s.remove_suffix(1);
  }
  size_t n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p != s.data() + s.size() || n > SIZE_MAX / mult)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + "='" + v + "' is not a valid size");
  return n * mult;
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

bool parse_flag(const char* name, const char* v) { return parse_int<int>(name, v) != 0; }

std::chrono::milliseconds parse_ms(const char* name, const char* v) {
  return std::chrono::milliseconds(parse_int<int64_t>(name, v));
}

// A size, or "auto" (-1): the transport picks by path.
int64_t parse_size_or_auto(const char* name, const char* v) {
  return std::string_view(v) == "auto" ? int64_t{-1} : static_cast<int64_t>(parse_size(name, v));
}

// One GEOCCL_EXPERIMENT key: its name, the variable that set it before the experiments were
// gathered into one (so a job that still sets that variable is told, not silently ignored;
// nullptr for keys that never had one), and how its value sets the Config. These settings exist
// to compare variants and to diagnose, not for a user to tune: a benchmark that needs one to win
// shows what to fix in the default. A new experiment is one row.
struct ExperimentKey {
  const char* key;
  const char* replaces;
  void (*set)(Config& c, const char* name, const char* v);
};

// clang-format off
const ExperimentKey kExperimentKeys[] = {
  {"chunk", "GEOCCL_CHUNK_BYTES", [](Config& c, auto n, auto v) { c.chunk_bytes = parse_size(n, v); }},
  {"small_msg", "GEOCCL_SMALL_MSG_BYTES", [](Config& c, auto n, auto v) { c.small_msg_bytes = parse_size(n, v); }},
  {"wan_small_msg", "GEOCCL_WAN_SMALL_MSG_BYTES", [](Config& c, auto n, auto v) { c.wan_small_msg_bytes = parse_size(n, v); }},
  {"plan_probe", "GEOCCL_PLAN_PROBE_BYTES", [](Config& c, auto n, auto v) { c.plan_probe_bytes = parse_size(n, v); }},
  {"replan_ops", "GEOCCL_REPLAN_OPS", [](Config& c, auto n, auto v) { c.replan_ops = parse_int<int>(n, v); }},
  {"replan_persist", "GEOCCL_REPLAN_PERSIST", [](Config& c, auto n, auto v) { c.replan_persist = parse_int<int>(n, v); }},
  {"two_hop_gain", "GEOCCL_TWO_HOP_GAIN", [](Config& c, auto n, auto v) { c.two_hop_gain = parse_number(n, v); }},
  {"compression_min", "GEOCCL_WAN_COMPRESSION_MIN_BYTES", [](Config& c, auto n, auto v) { c.wan_compression_min_bytes = parse_size(n, v); }},
  {"stripe", "GEOCCL_TCP_STRIPE", [](Config& c, auto, auto v) { c.tcp_stripe = v; }},
  {"resume", "GEOCCL_TCP_RESUME", [](Config& c, auto, auto v) { c.tcp_resume = v; }},
  {"lazy_connect", nullptr, [](Config& c, auto, auto v) { c.lazy_connect = v; }},
  {"stall_ms", "GEOCCL_TCP_STALL_MS", [](Config& c, auto n, auto v) { c.tcp_stall_timeout = parse_ms(n, v); }},
  {"relay_after_ms", "GEOCCL_RELAY_AFTER_MS", [](Config& c, auto n, auto v) { c.relay_after = parse_ms(n, v); }},
  {"tcp_cc", "GEOCCL_TCP_CC", [](Config& c, auto, auto v) { c.tcp_cc = v; }},
  {"tcp_buf", "GEOCCL_TCP_BUF_BYTES", [](Config& c, auto n, auto v) { c.tcp_buf_bytes = parse_size_or_auto(n, v); }},
  {"notsent_lowat", "GEOCCL_TCP_NOTSENT_LOWAT", [](Config& c, auto n, auto v) { c.tcp_notsent_lowat = parse_size_or_auto(n, v); }},
  {"zerocopy", "GEOCCL_TCP_ZEROCOPY", [](Config& c, auto n, auto v) { c.tcp_zerocopy = parse_flag(n, v); }},
  {"zerocopy_min", "GEOCCL_TCP_ZEROCOPY_MIN", [](Config& c, auto n, auto v) { c.tcp_zerocopy_min_bytes = parse_size(n, v); }},
  {"bulk_delay_ms", "GEOCCL_BULK_TARGET_DELAY_MS", [](Config& c, auto n, auto v) { c.bulk_target_delay = parse_ms(n, v); }},
  {"shm_ring", "GEOCCL_SHM_RING_BYTES", [](Config& c, auto n, auto v) { c.shm_ring_bytes = parse_size(n, v); }},
  {"quic_cc", "GEOCCL_QUIC_CC", [](Config& c, auto, auto v) { c.quic_cc = v; }},
  {"quic_window", "GEOCCL_QUIC_WINDOW_BYTES", [](Config& c, auto n, auto v) { c.quic_window_bytes = parse_size(n, v); }},
  {"quic_duplicate", "GEOCCL_QUIC_DUPLICATE_BYTES", [](Config& c, auto n, auto v) { c.quic_duplicate_bytes = parse_size(n, v); }},
  {"quic_0rtt", "GEOCCL_QUIC_0RTT", [](Config& c, auto n, auto v) { c.quic_zero_rtt = parse_flag(n, v); }},
  {"quic_redial_ms", "GEOCCL_QUIC_REDIAL_MS", [](Config& c, auto n, auto v) { c.quic_redial_after = parse_ms(n, v); }},
  {"quic_connect_ms", "GEOCCL_QUIC_CONNECT_MS", [](Config& c, auto n, auto v) { c.quic_connect_budget = parse_ms(n, v); }},
  {"transport_probe", "GEOCCL_TRANSPORT_PROBE_BYTES", [](Config& c, auto n, auto v) { c.transport_probe_bytes = parse_size(n, v); }},
};
// clang-format on

std::string known_experiment_keys() {
  std::string out;
  for (const ExperimentKey& k : kExperimentKeys)
    out += (out.empty() ? "" : ", ") + std::string(k.key);
  return out;
}

[[noreturn]] void bad_experiment(const std::string& m) {
  throw Error(ErrorCode::kInvalidArgument,
              "GEOCCL_EXPERIMENT: " + m + " (known keys: " + known_experiment_keys() + ")");
}

// GEOCCL_EXPERIMENT: "key=value[,key=value...]"; a later key overrides an earlier one (a script
// may append to what the caller set). A value takes the syntax of its field's parser.
void apply_experiment(Config& c, std::string_view spec) {
  while (true) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size())
      bad_experiment("'" + std::string(item) + "' is not key=value");
    const std::string key(item.substr(0, eq));
    const std::string value(item.substr(eq + 1));
    const ExperimentKey* found = nullptr;
    for (const ExperimentKey& k : kExperimentKeys)
      if (key == k.key) found = &k;
    if (!found) bad_experiment("unknown key '" + key + "'");
    found->set(c, ("GEOCCL_EXPERIMENT " + key).c_str(), value.c_str());
    if (comma == std::string_view::npos) return;
    spec.remove_prefix(comma + 1);
  }
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
  for (const ExperimentKey& k : kExperimentKeys)
    if (k.replaces && env(k.replaces))
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(k.replaces) + " is no longer read: set GEOCCL_EXPERIMENT=" + k.key +
                      "=" + env(k.replaces) + " instead (docs/configuration.md)");
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
  apply({"GEOCCL_ALLOW_INSECURE"}, [&](auto n, auto v) { allow_insecure = parse_flag(n, v); });
  apply({"GEOCCL_SHM_TRUST_HOST"}, [&](auto n, auto v) { shm_trust_host = parse_flag(n, v); });
  apply({"GEOCCL_BIND_ADDR"}, [&](auto, auto v) { bind_addr = v; });
  apply({"GEOCCL_TRANSPORT"}, [&](auto, auto v) { transport = v; });
  apply({"GEOCCL_TCP_STREAMS"}, [&](auto n, auto v) { tcp_streams = parse_int<int>(n, v); });
  apply({"GEOCCL_TCP_RESUME_TIMEOUT_MS"},
        [&](auto n, auto v) { tcp_resume_timeout = parse_ms(n, v); });
  apply({"GEOCCL_HEARTBEAT_MS"}, [&](auto n, auto v) { heartbeat_interval = parse_ms(n, v); });
  apply({"GEOCCL_LIVENESS_WINDOW_MS"}, [&](auto n, auto v) { liveness_window = parse_ms(n, v); });
  apply({"GEOCCL_BULK_RATE"}, [&](auto n, auto v) { bulk_rate_bps = parse_rate(n, v); });
  apply({"GEOCCL_TIMEOUT_MS"}, [&](auto n, auto v) { op_timeout = parse_ms(n, v); });
  apply({"GEOCCL_CONNECT_TIMEOUT_MS"}, [&](auto n, auto v) { connect_timeout = parse_ms(n, v); });
  apply({"GEOCCL_ALGO"}, [&](auto, auto v) { algo = v; });
  apply({"GEOCCL_TOPOLOGY"}, [&](auto, auto v) { topology = v; });
  apply({"GEOCCL_WAN_COMPRESSION"}, [&](auto, auto v) { wan_compression = v; });
  apply({"GEOCCL_METRICS_PORT"}, [&](auto n, auto v) { metrics_port = parse_int<int>(n, v); });
  apply({"GEOCCL_METRICS_BIND"}, [&](auto, auto v) { metrics_bind = v; });
  apply({"GEOCCL_METRICS_LINK_BPS"}, [&](auto n, auto v) { metrics_link_bps = parse_rate(n, v); });
  apply({"GEOCCL_TRACE"}, [&](auto, auto v) { trace_dir = v; });
  apply({"GEOCCL_LOG_LEVEL"}, [&](auto, auto v) { log_level = v; });
  if (const char* v = env("GEOCCL_EXPERIMENT")) apply_experiment(*this, v);
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
  if (replan_ops < 0) bad("GEOCCL_EXPERIMENT replan_ops must be >= 0 (0 = off)");
  if (replan_persist < 1) bad("GEOCCL_EXPERIMENT replan_persist must be >= 1");
  if (!(two_hop_gain == 0 || two_hop_gain > 1))
    bad("GEOCCL_EXPERIMENT two_hop_gain must be 0 (off) or > 1");
  if (tcp_streams < 0 || tcp_streams > 64) bad("GEOCCL_TCP_STREAMS must be in 0..64");
  if (tcp_buf_bytes > (int64_t{1} << 30)) bad("GEOCCL_EXPERIMENT tcp_buf must be at most 1G");
  if (tcp_stripe != "backlog" && tcp_stripe != "wide" && tcp_stripe != "rr")
    bad("GEOCCL_EXPERIMENT stripe must be backlog, wide or rr, got '" + tcp_stripe + "'");
  if (tcp_resume != "auto" && tcp_resume != "on" && tcp_resume != "off")
    bad("GEOCCL_EXPERIMENT resume must be auto, on or off, got '" + tcp_resume + "'");
  if (lazy_connect != "auto" && lazy_connect != "on" && lazy_connect != "off")
    bad("GEOCCL_EXPERIMENT lazy_connect must be auto, on or off, got '" + lazy_connect + "'");
  if (tcp_resume_timeout.count() < 0)
    bad("GEOCCL_TCP_RESUME_TIMEOUT_MS must be >= 0 (0: the operation deadline, GEOCCL_TIMEOUT_MS)");
  if (relay_after.count() < 0)
    bad("GEOCCL_EXPERIMENT relay_after_ms must be >= 0 (0: never relay)");
  if (tcp_stall_timeout.count() < 0)
    bad("GEOCCL_EXPERIMENT stall_ms must be >= 0 (0: never replace a stalled connection)");
  if (heartbeat_interval.count() < 0) bad("GEOCCL_HEARTBEAT_MS must be >= 0 (0: no heartbeats)");
  if (heartbeat_interval.count() > 0 && liveness_window < 3 * heartbeat_interval)
    bad("GEOCCL_LIVENESS_WINDOW_MS must be at least 3 heartbeat intervals (GEOCCL_HEARTBEAT_MS)");
  if (!valid_transport_choice(transport))
    bad("GEOCCL_TRANSPORT must be auto, tcp, quic or a list of class=name "
        "(host=shm,remote=quic), got '" + transport + "'");
  if (quic_cc != "cubic" && quic_cc != "bbr" && quic_cc != "bbr2" && quic_cc != "reno")
    bad("GEOCCL_EXPERIMENT quic_cc must be cubic, bbr, bbr2 or reno, got '" + quic_cc + "'");
  if (quic_window_bytes < (64 << 10) || quic_window_bytes > (uint64_t{1} << 32))
    bad("GEOCCL_EXPERIMENT quic_window must be between 64K and 4G");
  if (quic_duplicate_bytes > (1u << 20)) bad("GEOCCL_EXPERIMENT quic_duplicate must be at most 1M");
  if (quic_redial_after.count() != 0 && (quic_redial_after.count() < 100 || quic_redial_after.count() > 600000))
    bad("GEOCCL_EXPERIMENT quic_redial_ms must be 0 or in 100..600000");
  if (quic_connect_budget.count() < 100) bad("GEOCCL_EXPERIMENT quic_connect_ms must be >= 100");
  if (transport_probe_bytes < 4096 || transport_probe_bytes > (uint64_t{1} << 30))
    bad("GEOCCL_EXPERIMENT transport_probe must be between 4K and 1G");
  if (bulk_target_delay.count() < 1 || bulk_target_delay.count() > 10000)
    bad("GEOCCL_EXPERIMENT bulk_delay_ms must be in 1..10000");
  if (chunk_bytes < 4096) bad("GEOCCL_EXPERIMENT chunk must be >= 4096");
  if (shm_ring_bytes != 0 && (shm_ring_bytes < (64 << 10) || shm_ring_bytes > (size_t{1} << 30)))
    bad("GEOCCL_EXPERIMENT shm_ring must be 0 (by the ranks on the host) or between 64K and 1G");
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
