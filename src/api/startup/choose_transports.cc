// Start-up step "choose_transports" (startup.h; the rule: topology/transport_choice.h).
#include "api/startup/leader_pairs.h"
#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "core/logging.h"
#include "topology/transport_choice.h"
#include "transport/router.h"

namespace geoccl::api::startup {

std::vector<std::string> choose_transports(const Context& c, const topology::Topology& topo) {
  const auto names = c.router.candidates();
  const int n = c.cfg.world_size, me = c.cfg.rank, k = topo.domains();
  const auto un = static_cast<size_t>(n), uk = static_cast<size_t>(k), nc = names.size();
  constexpr size_t kFields = 5;  // ok, rtt, burst, mbps, cpu
  auto slot = [&](int da, int db, size_t cand) {
    return ((static_cast<size_t>(da) * uk + static_cast<size_t>(db)) * nc + cand) * kFields;
  };
  // Figures of every pair of domains, then which peers each rank reaches over each candidate.
  std::vector<double> shared(uk * uk * nc * kFields + un * un * nc, 0.0);
  double* reach = shared.data() + uk * uk * nc * kFields;
  for (int r = 0; r < n; ++r)
    if (r != me)
      for (size_t i = 0; i < nc; ++i)
        reach[(static_cast<size_t>(me) * un + static_cast<size_t>(r)) * nc + i] = c.router.connected(r, names[i]) ? 1 : 0;
  c.collective(figures_header(0x5450524f /* "TPRO" */), [&](collectives::OpContext& ctx) {
    // The probes move leader pairs between devices one pair at a time, so until every rank has
    // switched, ranks of one host can see its members on different devices.
    ctx.forbid_forwarding();
    for_leader_pairs(topo, me, [&](int da, int db, int la, int lb) {
      const int peer = me == la ? lb : la;
      std::vector<char> available(nc);
      for (size_t i = 0; i < nc; ++i) available[i] = c.router.connected(peer, names[i]);
      const auto figs = collectives::probe_path(
          ctx, peer, names, available, [&](size_t i) { c.router.use(peer, names[i]); },
          c.cfg.transport_probe_bytes, 5);
      if (me > peer) return;  // the lower rank measured
      for (size_t i = 0; i < nc; ++i) {
        double* f = shared.data() + slot(da, db, i);
        f[0] = figs[i].ok ? 1 : 0;
        f[1] = figs[i].rtt_ms;
        f[2] = figs[i].burst_ms;
        f[3] = figs[i].mbps;
        f[4] = figs[i].cpu_s_per_gbit;
      }
    });
    collectives::ring_allreduce(ctx, shared.data(), shared.size(), DataType::kFloat64, ReduceOp::kMax);
  });
  // Every rank decides from the same figures.
  std::vector<topology::TransportDecision> decision(uk * uk);
  std::vector<std::string> lines;
  for (int da = 0; da < k; ++da)
    for (int db = da + 1; db < k; ++db) {
      std::vector<topology::PathFigures> figs(nc);
      for (size_t i = 0; i < nc; ++i) {
        const double* f = shared.data() + slot(da, db, i);
        figs[i].transport = names[i];
        figs[i].ok = f[0] > 0;
        figs[i].rtt_ms = f[1];
        figs[i].burst_ms = f[2];
        figs[i].mbps = f[3];
        figs[i].cpu_s_per_gbit = f[4];
      }
      auto& d = decision[static_cast<size_t>(da) * uk + static_cast<size_t>(db)];
      d = topology::choose_transport(figs);
      auto label = [&](int x) {
        const auto& name = topo.names[static_cast<size_t>(x)];
        return name.empty() ? std::to_string(x) : name;
      };
      d.why = "domains " + label(da) + "-" + label(db) + ": " + d.why;
      lines.push_back(d.why);
      if (me == 0) GEOCCL_LOG(kInfo, "transport " << d.why);
    }
  const int dm = topo.domain_of[static_cast<size_t>(me)];
  for (int r = 0; r < n; ++r) {
    const int dr = topo.domain_of[static_cast<size_t>(r)];
    if (r == me || dr == dm) continue;
    const auto& d = decision[static_cast<size_t>(std::min(dm, dr)) * uk + static_cast<size_t>(std::max(dm, dr))];
    size_t pick = static_cast<size_t>(d.chosen);
    std::string why = d.why;
    // The pair's own link: both ends must have it (both read the same matrix).
    auto reaches = [&](int a, int b) {
      return reach[(static_cast<size_t>(a) * un + static_cast<size_t>(b)) * nc + pick] > 0;
    };
    if (pick != 0 && !(reaches(me, r) && reaches(r, me))) {
      why = names[0] + ": " + names[pick] + " was chosen for the domains but does not connect ranks " +
            std::to_string(std::min(me, r)) + " and " + std::to_string(std::max(me, r)) + " (" + d.why + ")";
      pick = 0;
    }
    c.router.use(r, names[pick], why);
  }
  return lines;
}

}  // namespace geoccl::api::startup
