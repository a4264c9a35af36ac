// Start-up step "measure_paths" (startup.h).
#include "api/startup/leader_pairs.h"
#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "core/logging.h"

namespace geoccl::api::startup {

collectives::WanPaths measure_paths(const Context& c, const topology::Topology& topo) {
  const int k = topo.domains(), me = c.cfg.rank;
  const auto uk = static_cast<size_t>(k);
  // [0, k*k): one-way delay, [k*k, 2k*k): rate, filled by the sending leader; max over ranks.
  std::vector<double> shared(2 * uk * uk, 0.0);
  c.collective(figures_header(0x504c414e /* "PLAN" */), [&](collectives::OpContext& ctx) {
    // The RTT from pings; the rate of each direction from two bursts (probe_rate, timed by the
    // receiver), the faster kept: the first warms the connection. The lower rank of a probe's
    // context sends.
    for_leader_pairs(topo, me, [&](int da, int db, int, int) {
      for (const auto& [from, to] : {std::pair{da, db}, std::pair{db, da}}) {
        const int sender = topo.members[static_cast<size_t>(from)][0];
        const int receiver = topo.members[static_cast<size_t>(to)][0];
        collectives::OpContext pair = ctx.sub({sender, receiver});
        const int other = me == sender ? 1 : 0;
        const auto figs = collectives::probe_path(pair, other, {"current"}, {1}, [](size_t) {}, 4096, 5);
        double mbps = 0;
        const double rtt = figs.empty() || !figs[0].ok ? 0 : figs[0].rtt_ms;
        for (int round = 0; round < 2; ++round)
          mbps = std::max(mbps, collectives::probe_rate(pair, other, c.cfg.plan_probe_bytes, rtt));
        if (me != sender || figs.empty() || !figs[0].ok || mbps <= 0) continue;
        const size_t ij = static_cast<size_t>(from) * uk + static_cast<size_t>(to);
        const size_t ji = static_cast<size_t>(to) * uk + static_cast<size_t>(from);
        shared[ij] = shared[ji] = figs[0].rtt_ms / 2;
        shared[uk * uk + ij] = mbps;
      }
    });
    collectives::ring_allreduce(ctx, shared.data(), shared.size(), DataType::kFloat64, ReduceOp::kMax);
  });
  // Both directions measured a delay: the max-reduction kept the larger (the same everywhere).
  collectives::WanPaths paths;
  paths.k = k;
  paths.one_way_ms.assign(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(uk * uk));
  paths.rate_mbps.assign(shared.begin() + static_cast<std::ptrdiff_t>(uk * uk), shared.end());
  if (me == 0)
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b)
        if (a != b)
          GEOCCL_LOG(kDebug, "path " << a << "->" << b << ": one-way " << paths.delay(a, b) << " ms, "
                                     << paths.rate(a, b) << " Mbit/s");
  return paths;
}

}  // namespace geoccl::api::startup
