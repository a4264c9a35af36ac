// Start-up step "discover_domains" (startup.h).
#include <algorithm>

#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "topology/hosts.h"
#include "transport/router.h"
#include "transport/shm/address.h"

namespace geoccl::api::startup {

using protocol::FrameHeader;
using protocol::OpKind;

namespace {

// Labels, or RTTs: the domains before the router hears of them.
Domains find(const Context& c) {
  // Each rank's label and host identity (NUL-terminated, in fixed fields).
  constexpr size_t kLabel = 64, kHost = 96, kBlock = kLabel + kHost;
  const Config& cfg = c.cfg;
  const auto n = static_cast<size_t>(cfg.world_size);
  Domains d{topology::single_domain(cfg.world_size), {}};
  std::vector<uint8_t> mine(kBlock, 0), all(kBlock * n, 0);
  std::copy_n(cfg.domain.begin(), std::min(kLabel - 1, cfg.domain.size()), mine.begin());
  const std::string host = transport::shm::HostId::current().key();
  std::copy_n(host.begin(), std::min(kHost - 1, host.size()), mine.begin() + kLabel);
  FrameHeader h;
  h.kind = OpKind::kAllgather;
  h.dtype = static_cast<uint8_t>(DataType::kUInt8);
  h.op_bytes = kBlock * n;
  c.collective(h, [&](collectives::OpContext& ctx) { collectives::bruck_allgather(ctx, mine.data(), all.data(), kBlock); });
  std::vector<std::string> labels, hosts;
  for (size_t r = 0; r < n; ++r) {
    labels.emplace_back(reinterpret_cast<const char*>(all.data() + r * kBlock));
    hosts.emplace_back(reinterpret_cast<const char*>(all.data() + r * kBlock + kLabel));
  }
  const bool labelled = std::any_of(labels.begin(), labels.end(), [](auto& l) { return !l.empty(); });
  if (cfg.topology == "flat") return d;
  if (cfg.topology == "labels" || (cfg.topology == "auto" && labelled)) {
    d.topo = topology::from_labels(labels);
    // From 4 domains on, the inter-domain ring order matters: measure the paths to choose it.
    if (d.topo.domains() <= 3) return d;
  }
  // Measure, between one rank per host (the ranks of a host share its domain): on one host there is
  // nothing to measure. The probe is a collective of its own so that every rank runs it.
  const auto host_of = topology::group_hosts(hosts);
  const auto leaders = topology::host_leaders(host_of);
  FrameHeader p;
  p.kind = OpKind::kBarrier;
  p.dtype = static_cast<uint8_t>(DataType::kFloat64);
  p.tag = 0x50524f42;  // "PROB"
  p.op_bytes = n * n * sizeof(double);
  std::vector<double> measured;
  c.collective(p, [&](collectives::OpContext& ctx) { measured = collectives::measure_rtt_matrix(ctx, 5, leaders); });
  d.rtt_ms = topology::rank_rtts_from_leaders(measured, host_of);
  if (d.topo.source == "labels")
    topology::choose_ring_order(&d.topo, d.rtt_ms);
  else
    d.topo = topology::from_rtt(d.rtt_ms, cfg.world_size);
  return d;
}

}  // namespace

Domains discover_domains(const Context& c) {
  Domains d = find(c);
  // The WAN treatment of a peer (striping, stream recovery, WAN socket options) follows the
  // domains, however they were found. On one site every peer is a LAN peer (which also drops the
  // copies kept until now).
  const auto& dom = d.topo.domain_of;
  std::vector<char> wan(static_cast<size_t>(c.cfg.world_size), 0);
  for (int r = 0; r < c.cfg.world_size; ++r) wan[static_cast<size_t>(r)] = dom[static_cast<size_t>(r)] != dom[static_cast<size_t>(c.cfg.rank)];
  c.router.set_wan_peers(wan);
  // A WAN peer's striped data streams open now (connect() opened one data stream per peer): the
  // path measurements and the first operations spread over them. Bounded: a stream that cannot be
  // opened leaves the pair on fewer (the stream width controller tries again later).
  c.router.await_wan_streams(std::chrono::steady_clock::now() +
                             std::min<std::chrono::steady_clock::duration>(c.cfg.connect_timeout, std::chrono::seconds(10)));
  c.router.set_domains(d.topo.domain_of, d.topo.names);
  return d;
}

}  // namespace geoccl::api::startup
