// Hierarchical allreduce across domains (regions) joined by slow links.
//
// Large buffers: (1) reduce-scatter inside each domain, so every rank of a domain holds the
// domain's partial sum of its own segment; (2) for each piece of the buffer, the ranks that own it
// in the k domains run a ring allreduce among themselves, so every rank of a domain carries an
// equal part of the WAN traffic in parallel and each domain's uplink carries 2(k-1)/k of the
// buffer (the minimum); (3) allgather inside each domain. Domains of different sizes split the
// buffer differently; step 2 then works on the pieces between all domains' segment boundaries.
//
// Overlap. Done one after another, steps 1 and 3 add to the WAN time although they use other
// links (and, on hosts with few cores, mostly CPU). So a large buffer is cut into blocks, and two
// lanes run at once (two_lanes.h). The domain lane reduce-scatters block 0, 1, ..., then
// allgathers each block as soon as it is final. The WAN lane runs step 2 as ONE ring per set of
// owners over that set's pieces of all blocks (a RingLayout whose segment q holds the q-th part
// of each block's piece): its reduce-scatter reads block b only once the domain lane has reduced
// it, and its allgather's last step finalizes the blocks in order. One ring per set of owners,
// not one per block, because every ring drains the WAN pipe at its end and between its halves
// (each drain costs some one-way latencies; measured: ~150 ms per extra ring at 40 ms RTT), while
// a ring's chunks flow without a gap. Only the first block's step 1 and the last block's step 3
// stay exposed (on a host whose cores the WAN traffic keeps busy, the overlapped work still slows
// the WAN ring somewhat). The lanes talk to disjoint peers (same domain / other domains), so frame
// order per peer is fixed on every rank.
//
// Small buffers: reduce to a leader per domain, leaders exchange their partial sums directly (one
// one-way WAN latency, all in parallel), each combines them in domain order, broadcast inside
// the domain.
//
// Every final value is computed identically (same operands, same order) wherever it is computed,
// so all ranks hold bit-identical results. Blocks keep that: every rank cuts the buffer at the
// same places (from the element count and the chunk size, equal on every rank), and each element
// goes through the same three steps with the same groups as it would without blocks, only over
// its block instead of the whole buffer.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/cost_model.h"
#include "collectives/two_lanes.h"
#include "collectives/wan_codec.h"
#include "core/logging.h"
#include "core/reduce.h"
#include "metrics/trace.h"

namespace geoccl::collectives {

int hierarchical_owner(const topology::Topology& topo, int d, size_t count, size_t pos) {
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

namespace {

ReduceOp combine_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

// Scratch slots: the domain lane's rings use 0-1, the WAN lane's 2-3 (they run at the same time).
constexpr int kDomainScratch = 0;
constexpr int kWanScratch = 2;

// Blocks (hierarchical_blocks, cost_model.cc). Only the first block's step 1 and the last
// block's step 3 stay exposed, so more blocks hide more; but each block is a ring of its own
// inside the domain, and each WAN part is a 1/(domain size * k) share of a block: a block holds
// at least 16 chunks (16 MiB by default) so that these stay a few chunks long. On the 3 x 2 test
// bed 8 blocks did no better than 4. Below two blocks' worth, the buffer goes through the steps
// in one piece, on one thread.

// Milliseconds spent in each part of one call, for the debug log. With two lanes, the domain
// work left exposed is the first block's reduce-scatter (the WAN lane waits for it) and what
// follows the WAN lane's end; the WAN lane's later waits for blocks may overlap its sends.
struct PhaseTimes {
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  }
  double reduce_scatter = 0, first_reduce_scatter = 0;  // step 1: all blocks, the first block
  double across = 0, across_waiting = 0;                // step 2; waiting for step-1 blocks
  double allgather = 0, allgather_waiting = 0;          // step 3; waiting for step-2 blocks
  double after_across = 0;                              // from the end of step 2 to the end
};

// Step 2 for one set of owners: its pieces of every block, in buffer order.
struct WanRing {
  struct Piece {
    int block;
    size_t begin, end;  // elements of the buffer
  };
  std::vector<int> owners;  // one per domain, in the chosen inter-domain ring order
  std::vector<Piece> pieces;
};

// One call of the large algorithm.
class Hierarchical {
 public:
  Hierarchical(OpContext& c, const topology::Topology& topo, void* buf, size_t count, DataType t,
               ReduceOp op, const WanCompression* z, bool direct)
      : c_(c), topo_(topo), base_(static_cast<uint8_t*>(buf)), count_(count), es_(dtype_size(t)),
        t_(t), inner_(combine_op(op)),
        local_(topo.members[static_cast<size_t>(topo.domain_of[static_cast<size_t>(c.rank())])]),
        blocks_(hierarchical_blocks(count * es_, c.chunk_bytes())), z_(z), direct_(direct && !z) {}

  void run() {
    const auto t0 = PhaseTimes::Clock::now();
    rings_ = wan_rings();
    if (z_) take_residual();
    if (blocks_ == 1) {
      run_in_sequence();
      GEOCCL_LOG(kDebug, (direct_ ? "hierarchical direct allreduce phases (ms), 1 block: total " : "hierarchical allreduce phases (ms), 1 block: total ")
                             << PhaseTimes::since(t0) << "; domain reduce-scatter "
                             << ms_.reduce_scatter << ", across domains " << ms_.across
                             << ", domain allgather " << ms_.allgather);
    } else {
      run_in_lanes();
      GEOCCL_LOG(kDebug, "hierarchical allreduce phases (ms), "
                             << blocks_ << " blocks on two lanes: total " << PhaseTimes::since(t0)
                             << "; domain reduce-scatter " << ms_.reduce_scatter << " (first block "
                             << ms_.first_reduce_scatter << "); across domains " << ms_.across
                             << " (waiting for domain blocks " << ms_.across_waiting
                             << "); domain allgather " << ms_.allgather << " (waiting for WAN blocks "
                             << ms_.allgather_waiting << ", after the WAN lane ended "
                             << ms_.after_across << ")");
    }
  }

 private:
  // Elements [begin(i), begin(i + 1)) form block i.
  size_t begin(int i) const { return segment_begin(count_, blocks_, i); }
  uint8_t* at(size_t elem) const { return base_ + elem * es_; }

  // Step 1 on block i. Waits for its sends: the WAN lane changes the block next.
  void reduce_scatter(OpContext& dom, int i) {
    std::vector<RequestPtr> sends;
    ring_reduce_scatter_inplace(dom, at(begin(i)), begin(i + 1) - begin(i), t_, inner_, &sends);
    dom.wait_all(sends);
  }

  // Step 3 on block i; its sends are added to `sends`.
  void allgather(OpContext& dom, int i, std::vector<RequestPtr>* sends) {
    ring_allgather_inplace(dom, at(begin(i)), begin(i + 1) - begin(i), t_, sends);
  }

  // The step-2 rings this rank takes part in, in the same order on every rank (by first piece),
  // so that ranks sharing two rings run them in the same order.
  std::vector<WanRing> wan_rings() const {
    std::vector<WanRing> rings;
    for (int i = 0; i < blocks_; ++i) {
      const size_t b0 = begin(i), n = begin(i + 1) - b0;
      // Cut points: every domain's segment boundaries within the block.
      std::set<size_t> cuts = {0, n};
      for (const auto& m : topo_.members)
        for (int s = 1; s < static_cast<int>(m.size()); ++s)
          cuts.insert(segment_begin(n, static_cast<int>(m.size()), s));
      for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
        std::vector<int> owners;
        for (int d : topo_.ring_order) owners.push_back(hierarchical_owner(topo_, d, n, *it));
        if (std::find(owners.begin(), owners.end(), c_.rank()) == owners.end()) continue;
        auto r = std::find_if(rings.begin(), rings.end(), [&](auto& w) { return w.owners == owners; });
        if (r == rings.end()) r = rings.insert(rings.end(), WanRing{owners, {}});
        r->pieces.push_back({i, b0 + *it, b0 + *std::next(it)});
      }
    }
    return rings;
  }

  // Step 2 over one ring's pieces: part p of the ring's segment q is the q-th of k parts of
  // piece p (so the ring reads the pieces, and thus the blocks, in order). The hooks get the
  // piece's block.
  void across(size_t ring_index, const std::function<void(int)>& before_block,
              const std::function<void(int)>& block_final) {
    const WanRing& ring = rings_[ring_index];
    OpContext wan = c_.sub(ring.owners, kWanScratch);
    const int k = wan.size();
    if (z_) return across_compressed(wan, ring_index, before_block, block_final);
    RingLayout layout(static_cast<size_t>(k));
    for (int q = 0; q < k; ++q)
      for (const auto& p : ring.pieces) {
        const size_t len = p.end - p.begin;
        const size_t a = p.begin + segment_begin(len, k, q), b = p.begin + segment_begin(len, k, q + 1);
        layout[static_cast<size_t>(q)].push_back({at(a), (b - a) * es_});
      }
    auto block_of = [&](size_t part) { return ring.pieces[part].block; };
    std::vector<RequestPtr> sends;
    ring_reduce_scatter(wan, layout, t_, inner_, &sends, [&](size_t part) {
      if (before_block) before_block(block_of(part));
    });
    ring_allgather(wan, layout, t_, &sends, [&](size_t part) {
      // The block is final once its last piece in this ring is (earlier rings have ended).
      if (block_final && (part + 1 == ring.pieces.size() || block_of(part + 1) != block_of(part)))
        block_final(block_of(part));
    });
    wan.wait_all(sends);
  }

  // Step 2 as a direct reduce-scatter + allgather among each ring's owners, over all rings at
  // once. Part q of a piece is the q-th of k parts; owner q reduces it. Block by block, as each
  // is ready (before_block), every part of it goes to its owner; then, block by block, each
  // owner reduces its parts (its own data, then the others' in owner order: one place computes
  // each value) and sends them to the other owners; block_final(b) once block b's parts have all
  // arrived. Frames to one peer are posted in the same order on both ends: the reduce-scatter's
  // by block, ring (the same order on every rank) and piece, then the allgather's alike.
  void across_direct(const std::function<void(int)>& before_block,
                     const std::function<void(int)>& block_final) {
    std::vector<OpContext> wans;
    wans.reserve(rings_.size());
    for (const auto& r : rings_) wans.push_back(c_.sub(r.owners, kWanScratch));
    // This thread's own context for waiting on requests of any ring (c_ may be the other
    // lane's), and for the staging memory (the WAN lane's slot).
    OpContext self = c_.sub({c_.rank()}, kWanScratch);
    struct Item {
      size_t ring, piece, staged;  // staged: byte offset of its k-1 incoming parts in the staging
    };
    std::vector<std::vector<Item>> by_block(static_cast<size_t>(blocks_));
    size_t staging_bytes = 0;
    auto part = [&](const Item& it, int q) {
      const auto& p = rings_[it.ring].pieces[it.piece];
      const int k = wans[it.ring].size();
      const size_t len = p.end - p.begin;
      const size_t a = p.begin + segment_begin(len, k, q), b = p.begin + segment_begin(len, k, q + 1);
      return std::span<uint8_t>(at(a), (b - a) * es_);
    };
    for (size_t r = 0; r < rings_.size(); ++r)
      for (size_t i = 0; i < rings_[r].pieces.size(); ++i) {
        Item it{r, i, staging_bytes};
        by_block[static_cast<size_t>(rings_[r].pieces[i].block)].push_back(it);
        staging_bytes += part(it, wans[r].rank()).size() * static_cast<size_t>(wans[r].size() - 1);
      }
    auto staging = self.scratch(staging_bytes);
    // The incoming part from owner q (q != me) of an item.
    auto staged = [&](const Item& it, int q) {
      const int me = wans[it.ring].rank();
      const size_t len = part(it, me).size();
      return staging.subspan(it.staged + len * static_cast<size_t>(q < me ? q : q - 1), len);
    };
    const auto ub = static_cast<size_t>(blocks_);
    std::vector<std::vector<RequestPtr>> rs_sends(ub), rs_recvs(ub), ag_recvs(ub);
    std::vector<RequestPtr> ag_sends;
    for (size_t b = 0; b < ub; ++b) {
      if (before_block) before_block(static_cast<int>(b));
      for (const Item& it : by_block[b]) {
        OpContext& w = wans[it.ring];
        for (int q = 0; q < w.size(); ++q) {
          if (q == w.rank()) continue;
          w.send_chunked(q, part(it, q), &rs_sends[b]);
          w.recv_chunked(q, staged(it, q), &rs_recvs[b]);
        }
      }
    }
    for (size_t b = 0; b < ub; ++b) {
      self.wait_all(rs_recvs[b]);
      // The allgather writes where these sends read.
      self.wait_all(rs_sends[b]);
      for (const Item& it : by_block[b]) {
        OpContext& w = wans[it.ring];
        auto mine = part(it, w.rank());
        for (int q = 0; q < w.size(); ++q)
          if (q != w.rank()) core::reduce_into(mine.data(), staged(it, q).data(), mine.size() / es_, t_, inner_);
        for (int q = 0; q < w.size(); ++q) {
          if (q == w.rank()) continue;
          w.send_chunked(q, mine, &ag_sends);
          w.recv_chunked(q, part(it, q), &ag_recvs[b]);
        }
      }
    }
    for (size_t b = 0; b < ub; ++b) {
      self.wait_all(ag_recvs[b]);
      if (block_final) block_final(static_cast<int>(b));
    }
    self.wait_all(ag_sends);
  }

  // Error feedback: one residual over every piece this rank encodes (all its rings' pieces, in
  // ring order), named by the pieces' bounds so that a call cut otherwise starts afresh.
  void take_residual() {
    if (!z_->feedback || z_->key.empty()) return;
    size_t n = 0;
    uint64_t shape = 1469598103934665603ull;  // FNV-1a over the pieces and the form
    auto mix = [&](uint64_t v) { shape = (shape ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(z_->resolve(topo_.domains())));
    for (const auto& r : rings_) {
      ring_residual_.push_back(n);
      for (const auto& p : r.pieces) {
        n += p.end - p.begin;
        mix(p.begin);
        mix(p.end);
      }
    }
    residual_ = z_->feedback->get(z_->key, n, shape);
  }

  // Step 2 of one ring with the WAN codec (wan_codec.h).
  void across_compressed(OpContext& wan, size_t ring_index, const std::function<void(int)>& before_block,
                         const std::function<void(int)>& block_final) {
    const WanRing& ring = rings_[ring_index];
    std::vector<FloatPiece> pieces;
    size_t off = residual_.empty() ? 0 : ring_residual_[ring_index];
    for (const auto& p : ring.pieces) {
      const size_t len = p.end - p.begin;
      FloatPiece fp{{reinterpret_cast<float*>(at(p.begin)), len}, {}};
      if (!residual_.empty()) fp.residual = residual_.subspan(off, len);
      off += len;
      pieces.push_back(fp);
    }
    auto block_of = [&](size_t piece) { return ring.pieces[piece].block; };
    PieceHook before = [&](size_t piece) {
      if (before_block) before_block(block_of(piece));
    };
    PieceHook final = [&](size_t piece) {
      if (block_final && (piece + 1 == ring.pieces.size() || block_of(piece + 1) != block_of(piece)))
        block_final(block_of(piece));
    };
    if (z_->resolve(wan.size()) == CompressedAlgo::kRing)
      compressed_ring_allreduce(wan, z_->spec, pieces, z_->counters, before, final);
    else
      compressed_allgather_allreduce(wan, z_->spec, pieces, z_->counters, before, final);
  }

  // One block: the three steps in turn on this thread.
  void run_in_sequence() {
    auto t = PhaseTimes::Clock::now();
    OpContext dom = c_.sub(local_, kDomainScratch);
    {
      metrics::TraceSpan span(c_.trace(), "domain reduce-scatter");
      reduce_scatter(dom, 0);
    }
    ms_.reduce_scatter = PhaseTimes::since(t);
    t = PhaseTimes::Clock::now();
    {
      metrics::TraceSpan span(c_.trace(), "inter-domain allreduce");
      if (direct_) across_direct({}, {});
      else for (size_t r = 0; r < rings_.size(); ++r) across(r, {}, {});
    }
    ms_.across = PhaseTimes::since(t);
    t = PhaseTimes::Clock::now();
    {
      metrics::TraceSpan span(c_.trace(), "domain allgather");
      std::vector<RequestPtr> sends;
      allgather(dom, 0, &sends);
      dom.wait_all(sends);
    }
    ms_.allgather = PhaseTimes::since(t);
  }

  // Several blocks: the domain lane on this thread, the WAN lane on another (see the top).
  void run_in_lanes() {
    enum Counter { kReduced, kFinal };  // blocks done with step 1, with steps 1 and 2
    TwoLanes lanes(c_, 2);
    PhaseTimes::Clock::time_point across_end;
    auto domain_lane = [&] {
      OpContext dom = c_.sub(local_, kDomainScratch);
      auto t = PhaseTimes::Clock::now();
      std::optional<metrics::TraceSpan> span(std::in_place, c_.trace(), "domain reduce-scatter (blocks)");
      for (int i = 0; i < blocks_; ++i) {
        reduce_scatter(dom, i);
        lanes.advance_to(kReduced, i + 1);
        if (i == 0) ms_.first_reduce_scatter = PhaseTimes::since(t);
      }
      ms_.reduce_scatter = PhaseTimes::since(t);
      span.reset();
      span.emplace(c_.trace(), "domain allgather (blocks)");
      std::vector<RequestPtr> sends;
      for (int i = 0; i < blocks_; ++i) {
        t = PhaseTimes::Clock::now();
        lanes.wait(kFinal, i + 1);
        ms_.allgather_waiting += PhaseTimes::since(t);
        t = PhaseTimes::Clock::now();
        allgather(dom, i, &sends);
        if (i + 1 == blocks_) dom.wait_all(sends);
        ms_.allgather += PhaseTimes::since(t);
      }
    };
    auto wan_lane = [&] {
      const auto start = PhaseTimes::Clock::now();
      metrics::TraceSpan span(c_.trace(), "inter-domain ring (WAN lane)", metrics::kTraceTrackPhases + 1);
      const auto& rings = rings_;
      auto wait_reduced = [&](int block) {
        const auto t = PhaseTimes::Clock::now();
        lanes.wait(kReduced, block + 1);
        ms_.across_waiting += PhaseTimes::since(t);
      };
      auto finalized = [&](int block) { lanes.advance_to(kFinal, block + 1); };
      if (direct_) across_direct(wait_reduced, finalized);
      // Only the last ring finalizes blocks; the ones before it have ended by then.
      else for (size_t r = 0; r < rings.size(); ++r)
        across(r, wait_reduced, r + 1 == rings.size() ? finalized : std::function<void(int)>{});
      lanes.advance_to(kFinal, blocks_);  // blocks where this rank owns nothing, or no ring at all
      across_end = PhaseTimes::Clock::now();
      ms_.across = std::chrono::duration<double, std::milli>(across_end - start).count();
    };
    lanes.run(domain_lane, wan_lane);
    ms_.after_across = PhaseTimes::since(across_end);
  }

  OpContext& c_;
  const topology::Topology& topo_;
  uint8_t* base_;
  size_t count_, es_;
  DataType t_;
  ReduceOp inner_;
  const std::vector<int>& local_;
  int blocks_;
  const WanCompression* z_;
  bool direct_;  // step 2: direct exchange among owners instead of rings
  std::vector<WanRing> rings_;        // this rank's step-2 rings
  std::span<float> residual_;         // error feedback (empty: none)
  std::vector<size_t> ring_residual_;  // where each ring's pieces start in it
  PhaseTimes ms_;
};

}  // namespace

namespace {

void run_hierarchical(OpContext& c, const topology::Topology& topo, void* buf, size_t count, DataType t,
                      ReduceOp op, const WanCompression* z, bool direct) {
  if (topo.domains() <= 1) return ring_allreduce(c, buf, count, t, op);
  if (count == 0) return;
  if (z && z->counters) z->counters->calls.fetch_add(1, std::memory_order_relaxed);
  Hierarchical(c, topo, buf, count, t, op, z, direct).run();
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

}  // namespace

void hierarchical_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                            DataType t, ReduceOp op, const WanCompression* z) {
  run_hierarchical(c, topo, buf, count, t, op, z, false);
}

void hierarchical_direct_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                                   DataType t, ReduceOp op, const WanCompression* z) {
  run_hierarchical(c, topo, buf, count, t, op, z, true);
}

namespace {

// The leaders' direct reduce-scatter + allgather (uncompressed) of `count` elements cut into
// `blocks` blocks: leader q reduces part q (the q-th of k) of each block from its own data and the
// others' in leader order, then sends it to every other leader. One place computes each value.
// Each block's reduce-scatter is posted once `before_block(i)` returns (chunk j to every leader
// before chunk j + 1), then block by block its parts are reduced and allgathered;
// `block_final(i)` once block i's parts have all arrived. Frames to one peer go in the same order
// on every leader: the blocks' reduce-scatters, then their allgathers.
void leaders_exchange(OpContext& wan, void* buf, size_t count, DataType t, ReduceOp inner, int blocks,
                      const std::function<void(int)>& before_block, const std::function<void(int)>& block_final) {
  const int k = wan.size(), w = wan.rank();
  const size_t es = dtype_size(t);
  auto* base = static_cast<uint8_t*>(buf);
  const auto ub = static_cast<size_t>(blocks);
  auto first = [&](int i) { return segment_begin(count, blocks, i); };
  auto part = [&](int i, int q) {
    const size_t n = first(i + 1) - first(i);
    const size_t a = first(i) + segment_begin(n, k, q), b = first(i) + segment_begin(n, k, q + 1);
    return std::span<uint8_t>(base + a * es, (b - a) * es);
  };
  std::vector<size_t> staged_at(ub + 1, 0);  // where block i's k-1 incoming parts start
  for (size_t i = 0; i < ub; ++i) staged_at[i + 1] = staged_at[i] + part(static_cast<int>(i), w).size() * static_cast<size_t>(k - 1);
  auto staging = wan.scratch(staged_at[ub], 0);
  auto staged = [&](int i, int q) {
    const size_t len = part(i, w).size();
    return staging.subspan(staged_at[static_cast<size_t>(i)] + len * static_cast<size_t>(q < w ? q : q - 1), len);
  };
  std::vector<std::vector<RequestPtr>> rs_sends(ub), rs_recvs(ub), ag_recvs(ub);
  std::vector<RequestPtr> ag_sends;
  std::vector<OpContext::PeerBytes> out;
  for (int i = 0; i < blocks; ++i) {
    if (before_block) before_block(i);
    out.clear();
    for (int q = 0; q < k; ++q) {
      if (q == w) continue;
      out.emplace_back(q, part(i, q));
      wan.recv_chunked(q, staged(i, q), &rs_recvs[static_cast<size_t>(i)]);
    }
    wan.send_chunked_to_each(out, &rs_sends[static_cast<size_t>(i)]);
  }
  for (int i = 0; i < blocks; ++i) {
    wan.wait_all(rs_recvs[static_cast<size_t>(i)]);
    wan.wait_all(rs_sends[static_cast<size_t>(i)]);  // the allgather writes where these read
    const auto mine = part(i, w);
    for (int q = 0; q < k; ++q)
      if (q != w) core::reduce_into(mine.data(), staged(i, q).data(), mine.size() / es, t, inner);
    out.clear();
    for (int q = 0; q < k; ++q) {
      if (q == w) continue;
      out.emplace_back(q, mine);
      wan.recv_chunked(q, part(i, q), &ag_recvs[static_cast<size_t>(i)]);
    }
    wan.send_chunked_to_each(out, &ag_sends);
  }
  for (int i = 0; i < blocks; ++i) {
    wan.wait_all(ag_recvs[static_cast<size_t>(i)]);
    if (block_final) block_final(i);
  }
  wan.wait_all(ag_sends);
}

std::vector<int> leaders_of(const topology::Topology& topo) {
  std::vector<int> leaders;
  for (const auto& m : topo.members) leaders.push_back(m.front());
  return leaders;
}

// hier-leaders in blocks (hierarchical_blocks > 1, uncompressed) on two lanes, so that the
// domain steps overlap the WAN: the domain lane reduces block 0, 1, ... to the leader, then
// broadcasts each block once it is final; the leaders' WAN lane runs leaders_exchange over the
// blocks as each is reduced. Domain ranks run the blocks' reduces, then their broadcasts, in the
// same order. Only the first block's reduce and the last block's broadcast stay exposed.
void leaders_in_lanes(OpContext& c, const topology::Topology& topo, void* buf, size_t count, DataType t,
                      ReduceOp inner, int blocks) {
  const int me = c.rank();
  const size_t es = dtype_size(t);
  const auto& local = topo.members[static_cast<size_t>(topo.domain_of[static_cast<size_t>(me)])];
  auto* base = static_cast<uint8_t*>(buf);
  auto first = [&](int i) { return segment_begin(count, blocks, i); };
  enum Counter { kReduced, kFinal };
  TwoLanes lanes(c, 2);
  auto domain_lane = [&] {
    OpContext dom = c.sub(local, kDomainScratch);
    for (int i = 0; i < blocks; ++i) {
      tree_reduce(dom, base + first(i) * es, first(i + 1) - first(i), t, inner, 0);
      lanes.advance_to(kReduced, i + 1);
    }
    for (int i = 0; i < blocks; ++i) {
      lanes.wait(kFinal, i + 1);
      tree_broadcast(dom, base + first(i) * es, (first(i + 1) - first(i)) * es, 0);
    }
  };
  auto wan_lane = [&] {
    if (me != local.front()) return lanes.advance_to(kFinal, blocks);  // its blocks come from the broadcasts
    // Above every slot the domain lane's trees use (tree_reduce: 0 and one per child, up to
    // log2 of the domain's size).
    constexpr int kLeadersWanScratch = 64;
    OpContext wan = c.sub(leaders_of(topo), kLeadersWanScratch);
    leaders_exchange(wan, buf, count, t, inner, blocks, [&](int i) { lanes.wait(kReduced, i + 1); },
                     [&](int i) { lanes.advance_to(kFinal, i + 1); });
  };
  lanes.run(domain_lane, wan_lane);
}

// Reduce to a leader per domain, the leaders' WAN step, broadcast inside each domain.
void through_leaders(OpContext& c, const topology::Topology& topo, void* buf, size_t count, DataType t,
                     ReduceOp op, const WanCompression* z, double settle_ms, bool split) {
  if (topo.domains() <= 1) return recursive_doubling_allreduce(c, buf, count, t, op);
  if (count == 0) return;
  if (z && z->counters) z->counters->calls.fetch_add(1, std::memory_order_relaxed);
  const int me = c.rank();
  const ReduceOp inner = combine_op(op);
  const size_t bytes = count * dtype_size(t);
  if (split && !z) {
    if (const int blocks = hierarchical_blocks(bytes, c.chunk_bytes()); blocks > 1) {
      metrics::TraceSpan span(c.trace(), "leaders in lanes");
      leaders_in_lanes(c, topo, buf, count, t, inner, blocks);
      if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
      return;
    }
  }
  const int my_domain = topo.domain_of[static_cast<size_t>(me)];
  const auto& local = topo.members[static_cast<size_t>(my_domain)];
  {
    metrics::TraceSpan span(c.trace(), "domain reduce to leader");
    OpContext dom = c.sub(local);
    tree_reduce(dom, buf, count, t, inner, 0);
  }
  if (me == local.front()) {
    const auto began = std::chrono::steady_clock::now();
    metrics::TraceSpan span(c.trace(), "leaders exchange");
    OpContext wan = c.sub(leaders_of(topo));
    if (z) {
      // Compressed, the leaders' exchange is the allgather form of the WAN step.
      FloatPiece whole{{static_cast<float*>(buf), count}, {}};
      if (z->feedback && !z->key.empty()) whole.residual = z->feedback->get(z->key, count, 0x5a11);
      compressed_allgather_allreduce(wan, z->spec, {whole}, z->counters);
    } else if (split) {
      leaders_exchange(wan, buf, count, t, inner, 1, {}, {});
    } else {
      const int k = wan.size();
      auto all = c.scratch(bytes * static_cast<size_t>(k), 0);
      auto slot = [&](int d) { return all.subspan(static_cast<size_t>(d) * bytes, bytes); };
      auto mine = std::span<const uint8_t>(static_cast<const uint8_t*>(buf), bytes);
      std::memcpy(slot(wan.rank()).data(), buf, bytes);
      // In chunks: a large buffer is spread over the transport's streams, where one frame
      // would take one stream (a path that caps each flow held a 16 MiB frame to its one flow).
      std::vector<RequestPtr> reqs;
      for (int d = 0; d < k; ++d) {
        if (d == wan.rank()) continue;
        wan.send_chunked(d, mine, &reqs);
        wan.recv_chunked(d, slot(d), &reqs);
      }
      wan.wait_all(reqs);
      for (int d = 1; d < k; ++d) core::reduce_into(slot(0).data(), slot(d).data(), count, t, inner);
      std::memcpy(buf, slot(0).data(), bytes);
    }
    if (settle_ms > 0)
      std::this_thread::sleep_until(began + std::chrono::microseconds(static_cast<int64_t>(settle_ms * 1e3)));
  }
  {
    metrics::TraceSpan span(c.trace(), "domain broadcast");
    OpContext dom = c.sub(local);
    tree_broadcast(dom, buf, bytes, 0);
  }
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

}  // namespace

void hierarchical_small_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                                  DataType t, ReduceOp op, const WanCompression* z, double settle_ms) {
  through_leaders(c, topo, buf, count, t, op, z, settle_ms, false);
}

void hierarchical_leaders_allreduce(OpContext& c, const topology::Topology& topo, void* buf, size_t count,
                                    DataType t, ReduceOp op, const WanCompression* z) {
  through_leaders(c, topo, buf, count, t, op, z, 0, true);
}

}  // namespace geoccl::collectives
