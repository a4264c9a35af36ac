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
    // The RTT from a few pings; the rate of both directions at once from two pairs of bursts
    // (probe_rates), the faster of each kept: the first warms the connections. The pair's lower
    // leader records the figures.
    for_leader_pairs(topo, me, [&](int da, int db, int la, int lb) {
      collectives::OpContext pair = ctx.sub({la, lb});
      const int other = me == la ? 1 : 0;
      const auto figs = collectives::probe_path(pair, other, {"current"}, {1}, [](size_t) {}, 4096, 3);
      const double rtt = figs.empty() || !figs[0].ok ? 0 : figs[0].rtt_ms;
      collectives::RatePair best;
      for (int round = 0; round < 2; ++round) {
        const auto r = collectives::probe_rates(pair, other, c.cfg.plan_probe_bytes, rtt);
        best.out_mbps = std::max(best.out_mbps, r.out_mbps);
        best.in_mbps = std::max(best.in_mbps, r.in_mbps);
      }
      if (me != la || rtt <= 0 || best.out_mbps <= 0 || best.in_mbps <= 0) return;
      const size_t ab = static_cast<size_t>(da) * uk + static_cast<size_t>(db);
      const size_t ba = static_cast<size_t>(db) * uk + static_cast<size_t>(da);
      shared[ab] = shared[ba] = rtt / 2;
      shared[uk * uk + ab] = best.out_mbps;
      shared[uk * uk + ba] = best.in_mbps;
    });
    collectives::ring_allreduce(ctx, shared.data(), shared.size(), DataType::kFloat64, ReduceOp::kMax);
  });
  // Every rank holds the same figures now.
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
