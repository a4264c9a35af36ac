#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "collectives/collectives.h"

namespace geoccl::collectives {
namespace {

using Bytes = std::vector<double>;  // k*k: bytes from domain i to domain j, sent at once

double bits_ms(double bytes, double mbps) { return bytes * 8.0 / (std::max(mbps, 1e-3) * 1e3); }

// Transfers that start together: the slowest pair's delay plus the busiest egress (see the
// header).
struct Exchange {
  double delay = 0, push = 0;
  double ms() const { return delay + push; }
};
Exchange wan_exchange(const WanPaths& p, const Bytes& b) {
  double delay = 0, push = 0;
  for (int i = 0; i < p.k; ++i) {
    double egress = 0, total = 0, slowest = 0;
    for (int j = 0; j < p.k; ++j) {
      if (i == j) continue;
      egress = std::max(egress, p.rate(i, j));
      const double x = b[static_cast<size_t>(i * p.k + j)];
      if (x <= 0) continue;
      total += x;
      delay = std::max(delay, p.delay(i, j));
      slowest = std::max(slowest, bits_ms(x, p.rate(i, j)));
    }
    push = std::max(push, std::max(slowest, total > 0 ? bits_ms(total, egress) : 0.0));
  }
  return {delay, push};
}

double lan_ms(double bytes) { return bits_ms(bytes, kLanGbitPerS * 1e3); }

// Ring reduce-scatter + allgather inside a domain of n ranks.
double domain_ring_ms(int n, double bytes) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * kLanAlphaMs + lan_ms(2.0 * (n - 1) / n * bytes);
}

// Tree reduce to the leader, then tree broadcast.
double domain_tree_ms(int n, double bytes) {
  if (n <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2.0 * depth * (kLanAlphaMs + lan_ms(bytes));
}

int largest_domain(const topology::Topology& t) {
  size_t m = 1;
  for (const auto& d : t.members) m = std::max(m, d.size());
  return static_cast<int>(m);
}

// Sets of owners (one rank per domain) of the pieces the hierarchical allreduce cuts `count`
// elements into; the most any rank belongs to is the number of WAN rings it runs in turn.
int rings_per_rank(const topology::Topology& t, size_t count) {
  std::set<size_t> cuts = {0};
  for (const auto& m : t.members)
    for (int s = 1; s < static_cast<int>(m.size()); ++s) cuts.insert(segment_begin(count, static_cast<int>(m.size()), s));
  std::set<std::vector<int>> sets;
  for (size_t c : cuts) {
    if (c >= count) continue;
    std::vector<int> owners;
    for (int d = 0; d < t.domains(); ++d) owners.push_back(hierarchical_owner(t, d, count, c));
    sets.insert(owners);
  }
  std::map<int, int> per_rank;
  int most = 1;
  for (const auto& s : sets)
    for (int r : s) most = std::max(most, ++per_rank[r]);
  return most;
}

// The delay a chunk accumulates through `hops` consecutive hops of a ring whose hop i costs
// hop[i], from the worst starting point.
double ring_path_ms(const std::vector<double>& hop, int hops) {
  double worst = 0;
  const int n = static_cast<int>(hop.size());
  for (int s = 0; s < n; ++s) {
    double d = 0;
    for (int h = 0; h < hops; ++h) d += hop[static_cast<size_t>((s + h) % n)];
    worst = std::max(worst, d);
  }
  return worst;
}

double flat_ring_ms(const topology::Topology& t, const WanPaths& p, double bytes) {
  const int n = static_cast<int>(t.domain_of.size());
  if (n < 2) return 0;
  Bytes b(static_cast<size_t>(p.k * p.k), 0.0);
  std::vector<double> hop;
  for (int r = 0; r < n; ++r) {
    const int a = t.domain_of[static_cast<size_t>(r)], z = t.domain_of[static_cast<size_t>((r + 1) % n)];
    if (a == z) {
      hop.push_back(kLanAlphaMs);
      continue;
    }
    hop.push_back(p.delay(a, z));
    b[static_cast<size_t>(a * p.k + z)] += 2.0 * (n - 1) / n * bytes;
  }
  // The ring's path carries the delays; the exchange gives the wire term.
  return ring_path_ms(hop, 2 * (n - 1)) + wan_exchange(p, b).push + lan_ms(2.0 * (n - 1) / n * bytes);
}

double hier_ring_ms(const topology::Topology& t, const WanPaths& p, double bytes, size_t count, int blocks) {
  const int k = p.k;
  Bytes b(static_cast<size_t>(k * k), 0.0);
  std::vector<double> hop;
  for (int i = 0; i < k; ++i) {
    const int a = t.ring_order[static_cast<size_t>(i)], z = t.ring_order[static_cast<size_t>((i + 1) % k)];
    hop.push_back(p.delay(a, z));
    b[static_cast<size_t>(a * k + z)] = 2.0 * (k - 1) / k * bytes;
  }
  const double wan = rings_per_rank(t, count) * ring_path_ms(hop, 2 * (k - 1)) + wan_exchange(p, b).push;
  return wan + domain_ring_ms(largest_domain(t), bytes) / blocks;
}

// Every domain sends `per_pair` bytes to every other one, at once.
Bytes all_to_all(int k, double per_pair) {
  Bytes b(static_cast<size_t>(k * k), 0.0);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      if (i != j) b[static_cast<size_t>(i * k + j)] = per_pair;
  return b;
}

// A direct reduce-scatter + allgather over the WAN: each pair carries 2S/k; the reduce-scatter's
// and the allgather's exchanges follow each other (per block, but the blocks' exchanges overlap:
// the pipe carries both halves' bytes and drains twice).
double direct_rs_ag_ms(const WanPaths& p, double bytes) {
  const Exchange e = wan_exchange(p, all_to_all(p.k, 2 * bytes / p.k));
  return 2 * e.delay + e.push;
}

double hier_direct_ms(const topology::Topology& t, const WanPaths& p, double bytes, int blocks) {
  return direct_rs_ag_ms(p, bytes) + domain_ring_ms(largest_domain(t), bytes) / blocks;
}

// Reduce to the leaders, the leaders' direct reduce-scatter + allgather, broadcast; in blocks
// the domain steps overlap the WAN but the first block's reduce and the last one's broadcast.
double hier_leaders_ms(const topology::Topology& t, const WanPaths& p, double bytes, int blocks) {
  return direct_rs_ag_ms(p, bytes) + domain_tree_ms(largest_domain(t), bytes) / blocks;
}

double hier_small_ms(const topology::Topology& t, const WanPaths& p, double bytes) {
  return wan_exchange(p, all_to_all(p.k, bytes)).ms() + domain_tree_ms(largest_domain(t), bytes);
}

}  // namespace

double WanPaths::largest_delay() const {
  double d = 0;
  for (double x : one_way_ms) d = std::max(d, x);
  return d;
}

int hierarchical_blocks(size_t bytes, size_t chunk_bytes) {
  // A block holds at least 16 chunks, and there are at most 4 (hierarchical_allreduce.cc).
  const size_t fit = bytes / (16 * std::max<size_t>(chunk_bytes, 1));
  return static_cast<int>(std::clamp<size_t>(fit, 1, 4));
}

std::vector<Estimate> estimate_allreduce(const topology::Topology& topo, const WanPaths& paths, size_t bytes,
                                         size_t elem_size, size_t chunk_bytes) {
  std::vector<Estimate> out;
  if (paths.k < 2 || paths.k != topo.domains() || bytes == 0) return out;
  const double s = static_cast<double>(bytes);
  const size_t count = bytes / std::max<size_t>(elem_size, 1);
  const int blocks = hierarchical_blocks(bytes, chunk_bytes);
  out.push_back({Algo::kHierarchicalSmall, hier_small_ms(topo, paths, s)});
  out.push_back({Algo::kHierarchicalLeaders, hier_leaders_ms(topo, paths, s, blocks)});
  out.push_back({Algo::kHierarchicalDirect, hier_direct_ms(topo, paths, s, blocks)});
  out.push_back({Algo::kHierarchical, hier_ring_ms(topo, paths, s, count, blocks)});
  out.push_back({Algo::kRing, flat_ring_ms(topo, paths, s)});
  return out;
}

double predicted_ms(const topology::Topology& topo, const WanPaths& paths, Algo algo, size_t bytes,
                    size_t elem_size, size_t chunk_bytes) {
  for (const auto& e : estimate_allreduce(topo, paths, bytes, elem_size, chunk_bytes))
    if (e.algo == algo) return e.ms;
  return -1;
}

Plan plan_by_cost(const topology::Topology& topo, const WanPaths& paths, size_t bytes, size_t elem_size,
                  size_t chunk_bytes, Forms forms) {
  auto all = estimate_allreduce(topo, paths, bytes, elem_size, chunk_bytes);
  // The owners' direct exchange is estimated (for GEOCCL_ALGO=hier-direct) but not chosen: its
  // WAN terms are the leaders' ones, yet each domain's uplink then carries a flow per owner and
  // remote owner, and on the test bed the drop-tail queues lose more of them (four-uneven,
  // 16 MiB: 1.70 s against the leaders' 1.61 s; 96 MiB: 21.4 s against 5.5 s).
  std::erase_if(all, [&](const Estimate& e) {
    switch (forms) {
      case Forms::kAny: return e.algo == Algo::kHierarchicalDirect;
      case Forms::kHierarchical: return e.algo == Algo::kHierarchicalDirect || e.algo == Algo::kRing;
      case Forms::kCompressed: return e.algo != Algo::kHierarchicalSmall && e.algo != Algo::kHierarchical;
    }
    return true;
  });
  if (all.empty()) return {Algo::kHierarchical, "no cost model (no measured paths)", -1};
  const auto best = std::min_element(all.begin(), all.end(), [](auto& a, auto& b) { return a.ms < b.ms; });
  std::string why = "cost model, " + std::to_string(bytes) + " B:";
  char buf[64];
  for (const auto& e : all) {
    std::snprintf(buf, sizeof buf, " %s %.1f ms", algo_name(e.algo), e.ms);
    why += buf;
  }
  return {best->algo, why, best->ms};
}

}  // namespace geoccl::collectives
