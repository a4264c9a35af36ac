// Start-up step "carry_paths" (startup.h).
#include "api/startup/leader_pairs.h"
#include "api/startup/path_memory.h"
#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "core/logging.h"

namespace geoccl::api::startup {

std::optional<collectives::WanPaths> carry_paths(const Context& c, const topology::Topology& topo) {
  const auto uk = static_cast<size_t>(topo.domains()), kk = uk * uk;
  // [0]: 1 when rank 0 remembers every pair; then one-way delays and rates, k*k each.
  std::vector<double> shared(1 + 2 * kk, 0.0);
  if (c.cfg.rank == 0)
    if (const auto p = process_paths().recall(topo)) {
      shared[0] = 1;
      std::copy(p->one_way_ms.begin(), p->one_way_ms.end(), shared.begin() + 1);
      std::copy(p->rate_mbps.begin(), p->rate_mbps.end(), shared.begin() + 1 + static_cast<std::ptrdiff_t>(kk));
    }
  c.collective(figures_header(0x43415259 /* "CARY" */), [&](collectives::OpContext& ctx) {
    collectives::tree_broadcast(ctx, shared.data(), shared.size() * sizeof(double), 0);
  });
  if (shared[0] == 0) return std::nullopt;
  collectives::WanPaths p;
  p.k = topo.domains();
  p.one_way_ms.assign(shared.begin() + 1, shared.begin() + 1 + static_cast<std::ptrdiff_t>(kk));
  p.rate_mbps.assign(shared.begin() + 1 + static_cast<std::ptrdiff_t>(kk), shared.end());
  if (c.cfg.rank == 0) GEOCCL_LOG(kInfo, "paths between the domains carried from the previous epoch (not probed again)");
  return p;
}

}  // namespace geoccl::api::startup
