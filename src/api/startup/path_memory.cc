#include "api/startup/path_memory.h"

namespace geoccl::api::startup {

namespace {

bool all_named(const topology::Topology& topo) {
  if (static_cast<int>(topo.names.size()) != topo.domains()) return false;
  for (const auto& n : topo.names)
    if (n.empty()) return false;
  return true;
}

}  // namespace

void PathMemory::record(const topology::Topology& topo, const collectives::WanPaths& paths, Clock::time_point now) {
  if (paths.k != topo.domains() || !all_named(topo)) return;
  const auto k = static_cast<size_t>(paths.k);
  if (paths.one_way_ms.size() != k * k || paths.rate_mbps.size() != k * k) return;
  for (int a = 0; a < paths.k; ++a)
    for (int b = 0; b < paths.k; ++b) {
      if (a == b || paths.delay(a, b) <= 0 || paths.rate(a, b) <= 0) continue;  // not measured
      by_pair_[{topo.names[static_cast<size_t>(a)], topo.names[static_cast<size_t>(b)]}] = {
          paths.delay(a, b), paths.rate(a, b), now};
    }
}

std::optional<collectives::WanPaths> PathMemory::recall(const topology::Topology& topo, Clock::time_point now) const {
  if (topo.domains() < 2 || !all_named(topo)) return std::nullopt;
  collectives::WanPaths p;
  p.k = topo.domains();
  const auto k = static_cast<size_t>(p.k);
  p.one_way_ms.assign(k * k, 0.0);
  p.rate_mbps.assign(k * k, 0.0);
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < k; ++b) {
      if (a == b) continue;
      const auto it = by_pair_.find({topo.names[a], topo.names[b]});
      if (it == by_pair_.end() || now - it->second.when > kMaxAge) return std::nullopt;
      p.one_way_ms[a * k + b] = it->second.one_way_ms;
      p.rate_mbps[a * k + b] = it->second.rate_mbps;
    }
  return p;
}

void ProcessPaths::record(const topology::Topology& topo, const collectives::WanPaths& paths) {
  std::lock_guard lk(mu_);
  memory_.record(topo, paths, PathMemory::Clock::now());
}

std::optional<collectives::WanPaths> ProcessPaths::recall(const topology::Topology& topo) const {
  std::lock_guard lk(mu_);
  return memory_.recall(topo, PathMemory::Clock::now());
}

ProcessPaths& process_paths() {
  static ProcessPaths p;
  return p;
}

}  // namespace geoccl::api::startup
