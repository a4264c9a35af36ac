// Start-up step "take_detours" (startup.h; the rule: collectives/detour.h).
#include <algorithm>
#include <thread>

#include "api/startup/leader_pairs.h"
#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "collectives/detour.h"
#include "core/logging.h"
#include "transport/router.h"

namespace geoccl::api::startup {

using Clock = std::chrono::steady_clock;

Detours take_detours(const Context& c, const topology::Topology& topo, const collectives::WanPaths& paths) {
  Detours out{paths, {}};
  const auto detours = collectives::choose_detours(paths, c.cfg.two_hop_gain, c.cfg.plan_probe_bytes);
  if (detours.empty()) return out;
  const int me = c.cfg.rank, dm = topo.domain_of[static_cast<size_t>(me)];
  auto leader = [&](int d) { return topo.members[static_cast<size_t>(d)][0]; };
  std::vector<std::pair<int, int>> moving;  // (peer, relay) asked to move
  // Whether the leaders' pair of each detour took it (their transport may be one that does not:
  // QUIC), filled by those leaders and agreed below: the plan follows the leaders.
  std::vector<double> taken(detours.size(), 0.0);
  for (size_t i = 0; i < detours.size(); ++i) {
    const auto& d = detours[i];
    // The middle domain's leader relays: its paths to both ends are the ones measured.
    const int via = leader(d.via);
    if (dm != d.a && dm != d.c) continue;
    for (int r : topo.members[static_cast<size_t>(dm == d.a ? d.c : d.a)]) {
      const bool ok = c.router.set_two_hop(r, via, d.min_frame_bytes);
      if (ok) moving.emplace_back(r, via);
      else GEOCCL_LOG(kInfo, "the path to rank " << r << " stays direct: its transport takes no two-hop path");
      if (me == leader(dm) && r == leader(dm == d.a ? d.c : d.a)) taken[i] = ok ? 1 : 0;
    }
  }
  c.collective(figures_header(0x32484f50 /* "2HOP" */), [&](collectives::OpContext& ctx) {
    collectives::ring_allreduce(ctx, taken.data(), taken.size(), DataType::kFloat64, ReduceOp::kMax);
  });
  std::vector<collectives::Detour> used;
  for (size_t i = 0; i < detours.size(); ++i) {
    const int via = leader(detours[i].via);
    const std::string line = detours[i].describe(topo.names) + "; relay rank " + std::to_string(via);
    if (taken[i] > 0) {
      used.push_back(detours[i]);
      out.lines.push_back(line);
    }
    if (me == 0)
      GEOCCL_LOG(kInfo, (taken[i] > 0 ? "two-hop path for bulk data: "
                                      : "two-hop path not taken (the transport of the leaders' pair takes none): ")
                            << line);
  }
  // The first collectives find the streams moved: wait (bounded) until they are, on both ends.
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!moving.empty()) {
    const auto stats = c.router.stats();
    std::erase_if(moving, [&](const std::pair<int, int>& m) {
      return std::any_of(stats.begin(), stats.end(),
                         [&](const transport::LinkStats& ps) { return ps.peer == m.first && ps.two_hop == m.second; });
    });
    if (moving.empty()) break;
    if (Clock::now() > until) {
      GEOCCL_LOG(kInfo, "the two-hop path to rank " << moving[0].first
                                                    << " is not up after 10 s; its bulk data go direct until it is");
      break;
    }
    if (const auto f = c.router.failure()) throw Error(f->code, f->message, f->ranks);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every rank plans with the same figures.
  out.paths = collectives::with_detours(paths, used);
  return out;
}

}  // namespace geoccl::api::startup
