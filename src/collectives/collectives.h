// The algorithms, one per file. Each runs on the worker thread inside an OpContext, takes raw
// buffers already validated by the API layer, and throws Error on failure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/op_context.h"
#include "geoccl/types.h"
#include "topology/topology.h"

namespace geoccl::collectives {

// allreduce, in place. Ring: pipelined reduce-scatter + allgather, bandwidth-optimal for large
// buffers. Recursive doubling: log2(n) rounds for small ones (non powers of two fold the extra
// ranks in first). Both give bit-identical results on every rank.
void ring_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op);
void recursive_doubling_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op);

// The ring's halves, in place, for algorithms that compose them. After the reduce-scatter, rank r
// holds the reduction of segment r+1 (bounds from segment_begin); sends still in flight are added to
// `sends` (the caller waits for them before reusing the buffer).
void ring_reduce_scatter_inplace(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op,
                                 std::vector<RequestPtr>* sends);
void ring_allgather_inplace(OpContext& c, void* buf, size_t count, DataType t,
                            std::vector<RequestPtr>* sends);

// Across domains: reduce-scatter inside each domain, ring allreduce of each piece among its
// owners in the k domains, allgather inside each domain (large buffers); or reduce to a leader
// per domain, direct exchange among leaders, broadcast inside (small buffers).
void hierarchical_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                            DataType t, ReduceOp op);
void hierarchical_small_allreduce(OpContext& c, const topology::Topology& topo, void* buf,
                                  size_t count, DataType t, ReduceOp op);

// broadcast from root. Binomial tree for small buffers, pipelined chain for large ones.
void tree_broadcast(OpContext& c, void* buf, size_t bytes, int root);
void chain_broadcast(OpContext& c, void* buf, size_t bytes, int root);

void ring_allgather(OpContext& c, const void* send, void* recv, size_t block_bytes);
void ring_reduce_scatter(OpContext& c, const void* send, void* recv, size_t recv_count, DataType t,
                         ReduceOp op);
void tree_reduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op, int root);
void direct_gather(OpContext& c, const void* send, void* recv, size_t block_bytes, int root);
void direct_scatter(OpContext& c, const void* send, void* recv, size_t block_bytes, int root);
void pairwise_alltoall(OpContext& c, const void* send, void* recv, size_t block_bytes);
void dissemination_barrier(OpContext& c);

// Broadcast and allgather across domains, crossing each WAN path once (see the .cc file).
void hierarchical_broadcast(OpContext& c, const topology::Topology& topo, void* buf, size_t bytes,
                            int root, size_t small_bytes);
void hierarchical_allgather(OpContext& c, const topology::Topology& topo, const void* send,
                            void* recv, size_t block_bytes, size_t small_bytes);

// Round-trip times between every pair of ranks, in ms (row-major n*n, same on every rank).
std::vector<double> measure_rtt_matrix(OpContext& c, int pings);

// Element range [begin, end) of segment i when `count` elements are split into n segments.
inline size_t segment_begin(size_t count, int n, int i) {
  const size_t q = count / static_cast<size_t>(n), r = count % static_cast<size_t>(n);
  return q * static_cast<size_t>(i) + r * static_cast<size_t>(i) / static_cast<size_t>(n);
}

}  // namespace geoccl::collectives
