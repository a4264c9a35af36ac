// The algorithms, one per file. Each runs on the worker thread inside an OpContext, takes raw
// buffers already validated by the API layer, and throws Error on failure.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/op_context.h"
#include "geoccl/types.h"

namespace geoccl::collectives {

// allreduce, in place. Ring: pipelined reduce-scatter + allgather, bandwidth-optimal for large
// buffers. Recursive doubling: log2(n) rounds for small ones (non powers of two fold the extra
// ranks in first). Both give bit-identical results on every rank.
void ring_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op);
void recursive_doubling_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op);

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

// Element range [begin, end) of segment i when `count` elements are split into n segments.
inline size_t segment_begin(size_t count, int n, int i) {
  const size_t q = count / static_cast<size_t>(n), r = count % static_cast<size_t>(n);
  return q * static_cast<size_t>(i) + r * static_cast<size_t>(i) / static_cast<size_t>(n);
}

}  // namespace geoccl::collectives
