#include "metrics/comm_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace geoccl::metrics {

const char* size_class(uint64_t bytes) {
  if (bytes <= (4u << 10)) return "4K";
  if (bytes <= (64u << 10)) return "64K";
  if (bytes <= (1u << 20)) return "1M";
  if (bytes <= (16u << 20)) return "16M";
  return "inf";
}

namespace {
size_t size_class_index(uint64_t bytes) {
  if (bytes <= (4u << 10)) return 0;
  if (bytes <= (64u << 10)) return 1;
  if (bytes <= (1u << 20)) return 2;
  if (bytes <= (16u << 20)) return 3;
  return 4;
}
}  // namespace

const std::vector<double>& op_duration_bounds() {
  static const std::vector<double> b = {1e-5,   2.5e-5, 5e-5, 1e-4,  2.5e-4, 5e-4, 1e-3,
                                        2.5e-3, 5e-3,   0.01, 0.025, 0.05,   0.1,  0.25,
                                        0.5,    1,      2.5,  5,     10,     30,   100};
  return b;
}

double allreduce_limit_s(uint64_t bytes, int domains, double bps, double rtt_s) {
  if (domains < 2 || bps <= 0) return 0;
  const double k = domains;
  return 2 * (k - 1) / k * 8.0 * static_cast<double>(bytes) / bps + rtt_s;
}

uint64_t process_resident_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

CommMetrics::CommMetrics(Registry& r, int rank, int world_size, std::string domain, double link_bps)
    : rank_(rank),
      domain_(std::move(domain)),
      link_bps_(link_bps),
      duration_(r.histogram("geoccl_op_duration_seconds",
                            "Time from an operation's start on its worker to its completion",
                            {"op", "algo", "size_class"}, op_duration_bounds())),
      bytes_(r.counter("geoccl_op_bytes_total", "Bytes of the user buffers of completed operations",
                       {"op"})),
      errors_(r.counter("geoccl_op_errors_total",
                        "Operations that ended with an error, by error code", {"op", "code"})),
      codec_calls_(r.counter("geoccl_wan_codec_calls_total",
                             "Allreduces issued with this codec on their hops across domains", {"codec"})),
      codec_bytes_(r.counter("geoccl_wan_codec_bytes_total",
                             "User bytes of the allreduces issued with this codec across domains", {"codec"})),
      rtt_(r.gauge("geoccl_peer_rtt_seconds",
                   "Smoothed RTT to the peer where its transport measures one",
                   {"peer", "transport"})),
      min_rtt_(
          r.gauge("geoccl_peer_min_rtt_seconds", "Least RTT seen to the peer (TCP)", {"peer"})),
      sent_(r.counter("geoccl_peer_bytes_sent_total",
                      "Bytes sent to the peer, all priority classes", {"peer"})),
      received_(r.counter("geoccl_peer_bytes_received_total",
                          "Bytes received from the peer, all priority classes", {"peer"})),
      retransmits_(r.counter("geoccl_peer_retransmits_total",
                             "TCP segments retransmitted to the peer over the connections' lives",
                             {"peer"})),
      reconnects_(r.counter("geoccl_stream_reconnects_total",
                            "Data streams to the peer that broke and were re-established",
                            {"peer"})),
      utilization_(
          r.gauge("geoccl_link_utilization_ratio",
                  "This rank's send rate to a domain over the link's known or measured capacity",
                  {"from", "to"})),
      limit_ratio_(r.gauge(
          "geoccl_op_limit_ratio",
          "Time of the last operation over its physical limit on the measured links", {"op"})),
      resident_(r.gauge("geoccl_process_resident_bytes", "Resident set size of the process")) {
  r.gauge("geoccl_rank_info", "1 per rank: its rank, world size and domain label",
          {"rank", "world_size", "domain"})
      .with({std::to_string(rank), std::to_string(world_size), domain_})
      .set(1);
  r.add_collector([this] { collect(); });
}

void CommMetrics::record_codec(const std::string& codec, uint64_t bytes) {
  codec_calls_.with({codec}).inc();
  codec_bytes_.with({codec}).inc(bytes);
}

void CommMetrics::set_peer_source(std::function<std::vector<PeerFigures>()> peers) {
  std::lock_guard lk(mu_);
  peers_ = std::move(peers);
}

void CommMetrics::set_topology(std::vector<int> domain_of, std::vector<std::string> names) {
  std::lock_guard lk(mu_);
  domain_of_ = std::move(domain_of);
  domain_names_ = std::move(names);
  // Domains found from RTTs have no label: d0, d1, ...
  for (size_t d = 0; d < domain_names_.size(); ++d)
    if (domain_names_[d].empty()) domain_names_[d] = "d" + std::to_string(d);
  links_.assign(domain_names_.size(), {});
}

size_t CommMetrics::algo_index(const char* algo) {
  for (size_t i = 0; i < kAlgos; ++i) {
    const char* a = algos_[i].load(std::memory_order_acquire);
    if (a == algo || (a && std::strcmp(a, algo) == 0)) return i;
    if (!a) {
      std::lock_guard lk(mu_);
      a = algos_[i].load(std::memory_order_relaxed);
      if (!a) {
        algos_[i].store(algo, std::memory_order_release);
        return i;
      }
      if (std::strcmp(a, algo) == 0) return i;
    }
  }
  return kAlgos - 1;  // more names than slots: the last slot's series (never reached in practice)
}

CommMetrics::OpSeries* CommMetrics::series(uint8_t kind, const char* op, const char* algo,
                                           uint64_t bytes) {
  const size_t k = std::min<size_t>(kind, kOpKinds - 1);
  const size_t a = algo_index(algo);
  const size_t s = size_class_index(bytes);
  auto& cell = cells_[(k * kAlgos + a) * kSizeClasses + s];
  if (OpSeries* p = cell.load(std::memory_order_acquire)) return p;
  std::lock_guard lk(mu_);
  if (OpSeries* p = cell.load(std::memory_order_relaxed)) return p;
  auto owned = std::make_unique<OpSeries>();
  owned->duration =
      &duration_.with({op, algos_[a].load(std::memory_order_relaxed), size_class(bytes)});
  if (!kinds_[k].bytes) {
    kinds_[k].bytes = &bytes_.with({op});
    kinds_[k].name = op;
  }
  cell.store(owned.get(), std::memory_order_release);
  owned_.push_back(std::move(owned));
  return cell.load(std::memory_order_relaxed);
}

void CommMetrics::record(uint8_t kind, const char* op, const char* algo, uint64_t bytes,
                         double seconds) {
  OpSeries* s = series(kind, op, algo, bytes);
  s->duration->observe(seconds);
  PerKind& pk = kinds_[std::min<size_t>(kind, kOpKinds - 1)];
  pk.bytes->inc(bytes);
  pk.last_bytes.store(bytes, std::memory_order_relaxed);
  pk.last_seconds.store(seconds, std::memory_order_relaxed);
}

void CommMetrics::record_error(uint8_t, const char* op, ErrorCode code) {
  // "peer lost" -> "peer_lost": label values without blanks read better in PromQL.
  std::string name(error_code_name(code));
  for (char& c : name)
    if (c == ' ' || c == '-') c = '_';
  errors_.with({op, name}).inc();
}

void CommMetrics::collect() {
  std::lock_guard lk(mu_);
  resident_.with({}).set(static_cast<double>(process_resident_bytes()));
  if (!peers_) return;
  const auto peers = peers_();
  const int mine =
      static_cast<size_t>(rank_) < domain_of_.size() ? domain_of_[static_cast<size_t>(rank_)] : -1;
  auto domain_of = [&](int p) {
    return static_cast<size_t>(p) < domain_of_.size() ? domain_of_[static_cast<size_t>(p)] : -1;
  };
  // A peer's transport can change (a reconnect over another device): rebuild the RTT series.
  rtt_.clear();
  min_rtt_.clear();
  std::vector<uint64_t> to_domain(domain_names_.size(), 0);
  std::vector<double> delivery(domain_names_.size(), 0);
  double wan_rtt_s = 0;
  for (const auto& ps : peers) {
    const std::string peer = std::to_string(ps.peer);
    if (ps.rtt_ms > 0) rtt_.with({peer, ps.transport}).set(ps.rtt_ms / 1e3);
    if (ps.min_rtt_ms > 0) min_rtt_.with({peer}).set(ps.min_rtt_ms / 1e3);
    sent_.with({peer}).set(ps.bytes_sent);
    received_.with({peer}).set(ps.bytes_received);
    retransmits_.with({peer}).set(ps.retransmits);
    reconnects_.with({peer}).set(ps.reconnects);
    const int d = domain_of(ps.peer);
    if (d >= 0 && d != mine && static_cast<size_t>(d) < to_domain.size()) {
      to_domain[static_cast<size_t>(d)] += ps.bytes_sent;
      delivery[static_cast<size_t>(d)] += static_cast<double>(ps.delivery_rate_bps);
      const double r = ps.min_rtt_ms > 0 ? ps.min_rtt_ms : ps.rtt_ms;
      wan_rtt_s = std::max(wan_rtt_s, r / 1e3);
    }
  }
  // Utilization: the send rate over at least a second (several scrapers see the same figure).
  const auto now = std::chrono::steady_clock::now();
  double bottleneck_bps = link_bps_;
  for (size_t d = 0; d < links_.size(); ++d) {
    if (static_cast<int>(d) == mine) continue;
    LinkSample& l = links_[d];
    l.measured_bps = std::max(l.measured_bps, delivery[d]);
    const double capacity = link_bps_ > 0 ? link_bps_ : l.measured_bps;
    if (link_bps_ <= 0 && capacity > 0)
      bottleneck_bps = bottleneck_bps > 0 ? std::min(bottleneck_bps, capacity) : capacity;
    const double dt = std::chrono::duration<double>(now - l.at).count();
    if (l.at == std::chrono::steady_clock::time_point{}) {
      l.at = now;
      l.bytes = to_domain[d];
    } else if (dt >= 1.0) {
      l.rate_bps = static_cast<double>(to_domain[d] - std::min(to_domain[d], l.bytes)) * 8.0 / dt;
      l.at = now;
      l.bytes = to_domain[d];
    }
    if (capacity > 0 && mine >= 0)
      utilization_.with({domain_names_[static_cast<size_t>(mine)], domain_names_[d]})
          .set(l.rate_bps / capacity);
  }
  // The limit ratio of the last allreduce (bench/compare.py's figure), where the job spans
  // domains and a capacity is known.
  const int domains = static_cast<int>(domain_names_.size());
  for (const auto& pk : kinds_) {
    if (!pk.name || std::strcmp(pk.name, "allreduce") != 0) continue;
    const double lim = allreduce_limit_s(pk.last_bytes.load(std::memory_order_relaxed), domains,
                                         bottleneck_bps, wan_rtt_s);
    const double t = pk.last_seconds.load(std::memory_order_relaxed);
    if (lim > 0 && t > 0) limit_ratio_.with({pk.name}).set(t / lim);
  }
}

}  // namespace geoccl::metrics
