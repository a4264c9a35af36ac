// The algorithms, one per file. Each runs on the worker thread inside an OpContext, takes raw
// buffers already validated by the API layer, and throws Error on failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "collectives/op_context.h"
#include "geoccl/types.h"
#include "topology/topology.h"
#include "topology/transport_choice.h"

namespace geoccl::collectives {

struct WanCompression;  // wan_codec.h

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

// The same halves over a layout: segment i (of the ring's n) is the concatenation of
// layout[i][0], layout[i][1], ... (byte ranges, whole elements). Every member must build a layout
// of the same shape (n segments, the same number of parts each, equal part sizes), each over its
// own memory. The hooks are optional and take a part index p, which stands for part p of every
// segment. The reduce-scatter calls before_local(p) once per part, in increasing p, before it
// first reads (sends or reduces into) this rank's data of part p: the caller can wait there
// until that data is ready. The allgather calls on_final(p) once per part, in increasing p, as
// soon as part p of every segment holds its final value on this rank.
using RingLayout = std::vector<std::vector<std::span<uint8_t>>>;
using PartHook = std::function<void(size_t part)>;
void ring_reduce_scatter(OpContext& c, const RingLayout& layout, DataType t, ReduceOp op,
                         std::vector<RequestPtr>* sends, const PartHook& before_local = {});
void ring_allgather(OpContext& c, const RingLayout& layout, DataType t,
                    std::vector<RequestPtr>* sends, const PartHook& on_final = {});

// Across domains: reduce-scatter inside each domain, ring allreduce of each piece among its
// owners in the k domains, allgather inside each domain (large buffers); or reduce to a leader
// per domain, direct exchange among leaders, broadcast inside (small buffers).
// `z` (float32 sum/avg only): the WAN step is compressed (wan_codec.h); the work inside a domain
// stays in full precision.
void hierarchical_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                            DataType t, ReduceOp op, const WanCompression* z = nullptr);
// The same three steps, but step 2 is a direct reduce-scatter + allgather among each piece's k
// owners (every owner sends each other owner its part at once; the part's owner reduces the k
// contributions in domain order and sends the result to all): two one-way delays instead of a
// ring's 2(k-1) hops. Uncompressed only (`z` falls back to the ring's step 2).
void hierarchical_direct_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                                   DataType t, ReduceOp op, const WanCompression* z = nullptr);
// Reduce to a leader per domain, a direct reduce-scatter + allgather among the leaders (leader
// q reduces the q-th of k parts and sends it to the others), broadcast inside each domain: the
// WAN bytes of the direct exchange over one rank per domain (fewer flows on each uplink than
// among owners). With `z`, the compressed leaders' exchange of hierarchical_small_allreduce.
void hierarchical_leaders_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                                    DataType t, ReduceOp op, const WanCompression* z = nullptr);
// Global rank that owns element `pos` after a ring reduce-scatter of `count` elements inside
// domain `d`.
int hierarchical_owner(const topology::Topology& topo, int d, size_t count, size_t pos);
// `settle_ms` (small allreduce): a leader's exchange ends no earlier than this long after the
// leader began it (the largest one-way delay between leaders). Back to back, the leaders of the
// farthest pair would otherwise stay out of step for good: the one that starts later finds the
// other's message waiting and finishes early, so it starts the next call early, and the other
// waits a full round trip every second call; the slowest rank's time per call is then up to two
// one-way delays. Ending together keeps every call at one.
void hierarchical_small_allreduce(OpContext& c, const topology::Topology& topo, void* buf,
                                  size_t count, DataType t, ReduceOp op,
                                  const WanCompression* z = nullptr, double settle_ms = 0);

// The protocol decider's probe between this rank and `peer` (path_probe.cc): figures for each
// candidate transport (names[i]; available[i]: connected on this rank; use(i) switches the pair
// to it here), filled on the lower rank of the two. Ends on candidate 0.
std::vector<topology::PathFigures> probe_path(OpContext& c, int peer, const std::vector<std::string>& names,
                                              const std::vector<char>& available,
                                              const std::function<void(size_t)>& use, size_t bytes, int pings);

// The delivery rates (Mbit/s) of the path between this rank and `peer` in both directions at
// once: each end sends a burst of `bytes` in 16 frames to the other. A receiver times the
// arrivals from the first frame to the last, which overshoots when its thread wakes late for the
// first (a busy CPU); the sender bounds that by its time from its first send to the receiver's
// answer, less the path's round trip `rtt_ms`. Both ranks run it together.
struct RatePair {
  double out_mbps = 0;  // from this rank to `peer`
  double in_mbps = 0;   // from `peer` to this rank
};
RatePair probe_rates(OpContext& c, int peer, size_t bytes, double rtt_ms);

// broadcast from root. Binomial tree for small buffers, pipelined chain for large ones.
void tree_broadcast(OpContext& c, void* buf, size_t bytes, int root);
void chain_broadcast(OpContext& c, void* buf, size_t bytes, int root);

void ring_allgather(OpContext& c, const void* send, void* recv, size_t block_bytes);
// Bruck's allgather (bruck_allgather.cc): ceil(log2 n) steps, for small blocks.
void bruck_allgather(OpContext& c, const void* send, void* recv, size_t block_bytes);
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

// Sparse allgather (sparse_allgather.cc): `mine` is this rank's piece (compression/sparse_piece.h)
// of a dense vector of out.size() elements; every member's piece goes to every other member as
// is, and `out` becomes the sum of all pieces, densified in member order: bit-identical on every
// member. Throws (after failing the group) Error(kProtocol) for a malformed piece or an
// implausible length, Error(kMismatch) for a piece of another dense length. Returns the bytes
// this rank sent and received (lengths and pieces, frame headers not counted).
struct SparseTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};
SparseTraffic sparse_allgather(OpContext& c, std::span<const uint8_t> mine, std::span<float> out);

// Round-trip times between every pair of `players` (ascending ranks; empty: every rank), in ms:
// row-major n*n, the same on every rank, 0 where a rank is not a player. Every rank calls it.
std::vector<double> measure_rtt_matrix(OpContext& c, int pings, const std::vector<int>& players = {});

// This rank's clock (`now_us`, microseconds) minus rank 0's, from the fastest of `pings` round
// trips with rank 0 (clock_offset.cc), and that round trip; rank 0 gets {0, 0}.
struct ClockOffset {
  double offset_us = 0;
  double rtt_us = 0;
};
ClockOffset measure_clock_offset(OpContext& c, int pings, int64_t (*now_us)());

// Element range [begin, end) of segment i when `count` elements are split into n segments.
inline size_t segment_begin(size_t count, int n, int i) {
  const size_t q = count / static_cast<size_t>(n), r = count % static_cast<size_t>(n);
  return q * static_cast<size_t>(i) + r * static_cast<size_t>(i) / static_cast<size_t>(n);
}

}  // namespace geoccl::collectives
