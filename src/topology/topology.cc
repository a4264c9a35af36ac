#include "topology/topology.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "geoccl/error.h"

namespace geoccl::topology {
namespace {

// Numbers groups by their lowest rank so domain indices are the same on every rank.
Topology from_groups(const std::vector<int>& group_of, std::vector<std::string> names_by_group,
                     std::string source) {
  Topology t;
  t.source = std::move(source);
  t.domain_of.assign(group_of.size(), -1);
  t.ring_order.clear();
  std::map<int, int> index;
  for (size_t r = 0; r < group_of.size(); ++r) {
    auto [it, fresh] = index.emplace(group_of[r], static_cast<int>(t.members.size()));
    if (fresh) {
      t.members.emplace_back();
      t.names.push_back(names_by_group.empty() ? "" : names_by_group[static_cast<size_t>(group_of[r])]);
    }
    t.domain_of[r] = it->second;
    t.members[static_cast<size_t>(it->second)].push_back(static_cast<int>(r));
  }
  for (int d = 0; d < t.domains(); ++d) t.ring_order.push_back(d);
  return t;
}

}  // namespace

int Topology::local_index(int rank) const {
  const auto& m = members[static_cast<size_t>(domain_of[static_cast<size_t>(rank)])];
  return static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
}

std::string Topology::describe() const {
  // Appends only: g++ 12 at -O3 flags `"literal" + std::string` with a false -Wrestrict.
  std::string s = std::to_string(domains());
  s += domains() == 1 ? " domain (" : " domains (";
  s += source;
  s += "):";
  for (int d = 0; d < domains(); ++d) {
    const auto& name = names[static_cast<size_t>(d)];
    s += ' ';
    if (name.empty()) {
      s += 'd';
      s += std::to_string(d);
    } else {
      s += name;
    }
    s += "=[";
    for (size_t i = 0; i < members[static_cast<size_t>(d)].size(); ++i) {
      if (i) s += ',';
      s += std::to_string(members[static_cast<size_t>(d)][i]);
    }
    s += ']';
  }
  return s;
}

void choose_ring_order(Topology* t, const std::vector<double>& rtt_ms) {
  const int k = t->domains();
  const size_t n = t->domain_of.size();
  if (k <= 3 || k > 9 || rtt_ms.size() != n * n) return;
  // Mean RTT between every two domains.
  std::vector<double> d(static_cast<size_t>(k * k), 0.0), cnt(static_cast<size_t>(k * k), 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const auto a = static_cast<size_t>(t->domain_of[i]), b = static_cast<size_t>(t->domain_of[j]);
      if (a == b) continue;
      d[a * static_cast<size_t>(k) + b] += std::max(rtt_ms[i * n + j], rtt_ms[j * n + i]);
      cnt[a * static_cast<size_t>(k) + b] += 1;
    }
  for (size_t x = 0; x < d.size(); ++x)
    if (cnt[x] > 0) d[x] /= cnt[x];
  choose_ring_order_by_cost(t, d);
}

void choose_ring_order_by_cost(Topology* t, const std::vector<double>& cost) {
  const int k = t->domains();
  if (k <= 3 || k > 9 || cost.size() != static_cast<size_t>(k * k)) return;
  auto d = [&](int a, int b) {
    return std::max(cost[static_cast<size_t>(a * k + b)], cost[static_cast<size_t>(b * k + a)]);
  };
  std::vector<int> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> best = perm;
  double best_max = std::numeric_limits<double>::infinity(), best_sum = best_max;
  do {  // domain 0 stays first: rotations of a ring are the same ring
    double mx = 0, sum = 0;
    for (int i = 0; i < k; ++i) {
      const double hop = d(perm[static_cast<size_t>(i)], perm[static_cast<size_t>((i + 1) % k)]);
      mx = std::max(mx, hop);
      sum += hop;
    }
    if (mx < best_max - 1e-9 || (mx < best_max + 1e-9 && sum < best_sum - 1e-9)) {
      best_max = mx;
      best_sum = sum;
      best = perm;
    }
  } while (std::next_permutation(perm.begin() + 1, perm.end()));
  t->ring_order = best;
}

Topology single_domain(int world) {
  return from_groups(std::vector<int>(static_cast<size_t>(world), 0), {}, "single");
}

Topology from_labels(const std::vector<std::string>& labels) {
  const size_t empty = static_cast<size_t>(std::count(labels.begin(), labels.end(), std::string()));
  if (empty == labels.size()) return single_domain(static_cast<int>(labels.size()));
  if (empty != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "GEOCCL_DOMAIN is set on some ranks but not on others (" + std::to_string(empty) +
                    " of " + std::to_string(labels.size()) + " have none)");
  std::map<std::string, int> ids;
  std::vector<std::string> names;
  std::vector<int> group(labels.size());
  for (size_t r = 0; r < labels.size(); ++r) {
    auto [it, fresh] = ids.emplace(labels[r], static_cast<int>(names.size()));
    if (fresh) names.push_back(labels[r]);
    group[r] = it->second;
  }
  return from_groups(group, names, "labels");
}

Topology from_rtt(const std::vector<double>& rtt_ms, int n, double floor_ms, double gap_factor) {
  const auto un = static_cast<size_t>(n);
  auto at = [&](int i, int j) {
    return std::max(rtt_ms[static_cast<size_t>(i) * un + static_cast<size_t>(j)],
                    rtt_ms[static_cast<size_t>(j) * un + static_cast<size_t>(i)]);
  };
  std::vector<double> v;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) v.push_back(std::max(at(i, j), 1e-3));
  std::sort(v.begin(), v.end());
  double threshold = std::numeric_limits<double>::infinity(), best = gap_factor;
  for (size_t k = 0; k + 1 < v.size(); ++k) {
    const double ratio = v[k + 1] / v[k];
    if (v[k + 1] >= floor_ms && ratio >= best) {
      best = ratio;
      threshold = std::sqrt(v[k] * v[k + 1]);
    }
  }
  // Union-find over "close" pairs.
  std::vector<int> parent(un);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[static_cast<size_t>(x)] != x)
      x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (at(i, j) < threshold) parent[static_cast<size_t>(find(j))] = find(i);
  std::vector<int> group(un);
  for (int i = 0; i < n; ++i) group[static_cast<size_t>(i)] = find(i);
  auto t = from_groups(group, {}, "rtt");
  choose_ring_order(&t, rtt_ms);
  return t;
}

}  // namespace geoccl::topology
