// Hierarchical allreduce across domains (regions) joined by slow links.
//
// Large buffers: (1) reduce-scatter inside each domain, so every rank of a domain holds the
// domain's partial sum of its own segment; (2) for each piece of the buffer, the ranks that own it
// in the k domains run a ring allreduce among themselves, so every rank of a domain carries an
// equal part of the WAN traffic in parallel and each domain's uplink carries 2(k-1)/k of the
// buffer (the minimum); (3) allgather inside each domain. Domains of different sizes split the
// buffer differently; step 2 then works on the pieces between all domains' segment boundaries.
//
// Small buffers: reduce to a leader per domain, leaders exchange their partial sums directly (one
// one-way WAN latency, all in parallel), each combines them in domain order, broadcast inside
// the domain.
//
// Every final value is computed identically (same operands, same order) wherever it is computed,
// so all ranks hold bit-identical results.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "collectives/collectives.h"
#include "core/logging.h"
#include "core/reduce.h"

namespace geoccl::collectives {
namespace {

ReduceOp combine_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

// Global rank that owns element `pos` after a ring reduce-scatter inside domain `d`.
int owner_of(const topology::Topology& topo, int d, size_t count, size_t pos) {
  const auto& m = topo.members[static_cast<size_t>(d)];
  const int n = static_cast<int>(m.size());
  // Segment s holds pos; rank with local index (s - 1) mod n owns segment s.
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segment_begin(count, n, mid) <= pos) lo = mid; else hi = mid - 1;
  }
  return m[static_cast<size_t>((lo - 1 + n) % n)];
}

}  // namespace

void hierarchical_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                            DataType t, ReduceOp op) {
  if (topo.domains() <= 1) return ring_allreduce(c, buf, count, t, op);
  if (count == 0) return;
  const int me = c.rank();
  const ReduceOp inner = combine_op(op);
  const size_t es = dtype_size(t);
  auto* base = static_cast<uint8_t*>(buf);
  const auto& local = topo.members[static_cast<size_t>(topo.domain_of[static_cast<size_t>(me)])];

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<RequestPtr> sends;
  {
    OpContext dom = c.sub(local);
    ring_reduce_scatter_inplace(dom, buf, count, t, inner, &sends);
    dom.wait_all(sends);
  }
  const auto t1 = Clock::now();

  // Cut points: every domain's segment boundaries.
  std::set<size_t> cuts = {0, count};
  for (const auto& m : topo.members)
    for (int i = 1; i < static_cast<int>(m.size()); ++i)
      cuts.insert(segment_begin(count, static_cast<int>(m.size()), i));
  for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
    const size_t a = *it, b = *std::next(it);
    std::vector<int> owners;  // one per domain, in the chosen inter-domain ring order
    for (int d : topo.ring_order) owners.push_back(owner_of(topo, d, count, a));
    if (std::find(owners.begin(), owners.end(), me) == owners.end()) continue;
    OpContext wan = c.sub(owners);
    ring_reduce_scatter_inplace(wan, base + a * es, b - a, t, inner, &sends);
    ring_allgather_inplace(wan, base + a * es, b - a, t, &sends);
    wan.wait_all(sends);
  }

  const auto t2 = Clock::now();
  {
    OpContext dom = c.sub(local);
    ring_allgather_inplace(dom, buf, count, t, &sends);
    dom.wait_all(sends);
  }
  const auto t3 = Clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  GEOCCL_LOG(kDebug, "hierarchical allreduce phases (ms): domain reduce-scatter " << ms(t1 - t0)
                         << ", across domains " << ms(t2 - t1) << ", domain allgather " << ms(t3 - t2));
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

void hierarchical_small_allreduce(OpContext& c, const topology::Topology& topo, void* buf,
                                  size_t count, DataType t, ReduceOp op) {
  if (topo.domains() <= 1) return recursive_doubling_allreduce(c, buf, count, t, op);
  if (count == 0) return;
  const int me = c.rank();
  const ReduceOp inner = combine_op(op);
  const size_t bytes = count * dtype_size(t);
  const int my_domain = topo.domain_of[static_cast<size_t>(me)];
  const auto& local = topo.members[static_cast<size_t>(my_domain)];
  {
    OpContext dom = c.sub(local);
    tree_reduce(dom, buf, count, t, inner, 0);
  }
  if (me == local.front()) {
    std::vector<int> leaders;
    for (const auto& m : topo.members) leaders.push_back(m.front());
    OpContext wan = c.sub(leaders);
    const int k = wan.size();
    auto all = c.scratch(bytes * static_cast<size_t>(k), 0);
    auto slot = [&](int d) { return all.subspan(static_cast<size_t>(d) * bytes, bytes); };
    auto mine = std::span<const uint8_t>(static_cast<const uint8_t*>(buf), bytes);
    std::memcpy(slot(wan.rank()).data(), buf, bytes);
    std::vector<RequestPtr> reqs;
    for (int d = 0; d < k; ++d) {
      if (d == wan.rank()) continue;
      reqs.push_back(wan.send(d, mine));
      reqs.push_back(wan.recv(d, slot(d)));
    }
    wan.wait_all(reqs);
    for (int d = 1; d < k; ++d) core::reduce_into(slot(0).data(), slot(d).data(), count, t, inner);
    std::memcpy(buf, slot(0).data(), bytes);
  }
  {
    OpContext dom = c.sub(local);
    tree_broadcast(dom, buf, bytes, 0);
  }
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

}  // namespace geoccl::collectives
