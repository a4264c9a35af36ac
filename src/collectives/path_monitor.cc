#include "collectives/path_monitor.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace geoccl::collectives {

void PathWindow::add(int from, const std::vector<double>& srtt_ms, const std::vector<double>& delivery_mbps) {
  double total = 0;
  int active = 0;
  for (int d = 0; d < k_; ++d)
    if (d != from && delivery_mbps[static_cast<size_t>(d)] > 0) total += delivery_mbps[static_cast<size_t>(d)], ++active;
  for (int d = 0; d < k_; ++d) {
    if (d == from) continue;
    const auto x = static_cast<size_t>(from * k_ + d);
    const double srtt = srtt_ms[static_cast<size_t>(d)], rate = delivery_mbps[static_cast<size_t>(d)];
    if (srtt > 0 && (delay_[x] == 0 || srtt / 2 < delay_[x])) delay_[x] = srtt / 2;
    if (rate <= 0) continue;
    const bool shared = active > 1 && rate >= total / active / 2 && total >= uplink_[static_cast<size_t>(from)] / 2;
    rate_[x] = std::max(rate_[x], shared ? total : rate);
  }
}

std::vector<double> PathWindow::take() {
  std::vector<double> out(delay_);
  out.insert(out.end(), rate_.begin(), rate_.end());
  std::fill(delay_.begin(), delay_.end(), 0.0);
  std::fill(rate_.begin(), rate_.end(), 0.0);
  return out;
}

std::vector<double> best_rate_per_domain(const WanPaths& paths) {
  const auto k = static_cast<size_t>(paths.k);
  std::vector<double> best(k, 0.0);
  for (size_t x = 0; x < k * k && x < paths.rate_mbps.size(); ++x)
    if (x / k != x % k) best[x / k] = std::max(best[x / k], paths.rate_mbps[x]);
  return best;
}

PathMonitor::PathMonitor(WanPaths plan, PathMonitorOptions options) : plan_(std::move(plan)), options_(options) {
  const auto n = static_cast<size_t>(plan_.k) * static_cast<size_t>(plan_.k);
  delay_streak_.assign(n, 0);
  rate_streak_.assign(n, 0);
  delay_seen_.assign(n, 0);
  rate_seen_.assign(n, 0);
}

std::optional<WanPaths> PathMonitor::on_check(const std::vector<double>& one_way_ms,
                                              const std::vector<double>& rate_mbps) {
  const int k = plan_.k;
  const auto n = static_cast<size_t>(k) * static_cast<size_t>(k);
  if (one_way_ms.size() != n || rate_mbps.size() != n) return std::nullopt;
  auto track = [&](double seen, double planned, bool changed, int& streak, double& latest) {
    if (seen <= 0) return;  // no sample: no evidence either way
    if (changed && planned > 0) {
      ++streak;
      latest = seen;
    } else {
      streak = 0;
    }
  };
  // A leader's best planned rate: what its uplink carries. Readings of a path overshoot (each
  // stream's latest sample, summed), so a rise counts only on a path planned well below it (one
  // that had dropped), where it means the path came back.
  const std::vector<double> row_best = best_rate_per_domain(plan_);
  for (size_t x = 0; x < n; ++x) {
    if (x / static_cast<size_t>(k) == x % static_cast<size_t>(k)) continue;
    const double d = one_way_ms[x], pd = plan_.one_way_ms[x];
    const double r = rate_mbps[x], pr = plan_.rate_mbps[x];
    track(d, pd, std::abs(d - pd) > std::max(pd * (options_.delay_factor - 1), options_.delay_floor_ms),
          delay_streak_[x], delay_seen_[x]);
    const bool rose = r > pr * options_.rate_factor && pr * options_.rate_factor < row_best[x / static_cast<size_t>(k)];
    track(r, pr, r < pr / options_.rate_factor || rose, rate_streak_[x], rate_seen_[x]);
  }
  WanPaths next = plan_;
  std::ostringstream why;
  bool changed = false;
  for (size_t x = 0; x < n; ++x) {
    const int from = static_cast<int>(x / static_cast<size_t>(k)), to = static_cast<int>(x % static_cast<size_t>(k));
    // A run that persisted: its latest figure replaces the plan's.
    auto apply = [&](int& streak, double seen, double& figure, const char* what, const char* unit) {
      if (streak < options_.persist) return;
      why << (changed ? "; " : "") << from << "->" << to << " " << what << " " << figure << " -> " << seen << " " << unit;
      figure = seen;
      streak = 0;
      changed = true;
    };
    apply(delay_streak_[x], delay_seen_[x], next.one_way_ms[x], "one-way delay", "ms");
    apply(rate_streak_[x], rate_seen_[x], next.rate_mbps[x], "rate", "Mbit/s");
  }
  if (!changed) return std::nullopt;
  // The delay is one figure per pair of domains: a change seen in one direction holds for both.
  for (int a = 0; a < k; ++a)
    for (int b = a + 1; b < k; ++b) {
      const auto ab = static_cast<size_t>(a * k + b), ba = static_cast<size_t>(b * k + a);
      const bool changed_ab = next.one_way_ms[ab] != plan_.one_way_ms[ab];
      const bool changed_ba = next.one_way_ms[ba] != plan_.one_way_ms[ba];
      if (changed_ab && !changed_ba) next.one_way_ms[ba] = next.one_way_ms[ab];
      else if (changed_ba && !changed_ab) next.one_way_ms[ab] = next.one_way_ms[ba];
      else if (changed_ab) next.one_way_ms[ab] = next.one_way_ms[ba] = std::max(next.one_way_ms[ab], next.one_way_ms[ba]);
    }
  plan_ = next;
  last_change_ = why.str();
  ++changes_;
  return next;
}

std::vector<std::pair<int, int>> PathMonitor::to_probe(uint64_t check) const {
  std::vector<std::pair<int, int>> out;
  const int k = plan_.k;
  if (options_.probe_every <= 0 || check % static_cast<uint64_t>(options_.probe_every) >=
                                        static_cast<uint64_t>(std::max(options_.persist, 1)))
    return out;
  const std::vector<double> best = best_rate_per_domain(plan_);
  auto dropped = [&](int from, int to) {
    return plan_.rate(from, to) * options_.rate_factor < best[static_cast<size_t>(from)];
  };
  for (int a = 0; a < k; ++a)
    for (int b = a + 1; b < k; ++b)
      if (dropped(a, b) || dropped(b, a)) out.emplace_back(a, b);
  return out;
}

}  // namespace geoccl::collectives
