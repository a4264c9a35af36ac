// Pipelined ring allreduce, and its two halves for algorithms that compose them.
//
// The buffer is split into n segments; after n-1 reduce-scatter steps segment r+1 is fully
// reduced on rank r, and n-1 allgather steps send every final segment once around the ring.
// Each segment is further cut into chunks so that, within a step, receiving chunk j+1 overlaps
// reducing chunk j and forwarding it. Every segment's final value is computed on exactly one rank
// and copied to the others, so all ranks hold bit-identical results.
//
// Over a device that forwards (shared memory, every member on one host), a step's receive and its
// send to the next rank are one pass from ring to ring (OpContext::recv_forward): no write to the
// buffer and re-read. Those rings order their frames slice by slice (Ring::for_each_slice).
//
// The halves also work on a RingLayout, where each segment is a list of parts (byte ranges
// anywhere in memory): the hierarchical allreduce runs one ring over pieces of several blocks, so
// that its WAN pipe never drains between blocks, and uses the hooks to wait until a block's data
// is ready and to learn when a block is final. Chunks never span two parts.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {
namespace {

struct Ring {
  OpContext& c;
  const RingLayout& layout;
  DataType dtype;
  size_t es, chunk;
  int n, r, right, left;

  Ring(OpContext& ctx, const RingLayout& l, DataType t)
      : c(ctx), layout(l), dtype(t), es(dtype_size(t)), chunk(std::max(es, ctx.chunk_bytes() / es * es)),
        n(ctx.size()), r(ctx.rank()), right((r + 1) % n), left((r - 1 + n) % n) {}

  const std::vector<std::span<uint8_t>>& seg(int i) const {
    return layout[static_cast<size_t>(((i % n) + n) % n)];
  }
  size_t max_segment_bytes() const {
    size_t m = 0;
    for (const auto& s : layout) {
      size_t b = 0;
      for (const auto& p : s) b += p.size();
      m = std::max(m, b);
    }
    return m;
  }
  // Calls f(part, chunk, pos) for every chunk of segment s in order; pos: the chunk's byte
  // position in the segment (its offset in the staging buffer, and the frame's offset field).
  template <class F>
  void for_each_chunk(const std::vector<std::span<uint8_t>>& s, F&& f) const {
    size_t pos = 0;
    for (size_t p = 0; p < s.size(); ++p) {
      for (size_t off = 0; off < s[p].size(); off += chunk)
        f(p, s[p].subspan(off, std::min(chunk, s[p].size() - off)), pos + off);
      pos += s[p].size();
    }
  }
  struct Chunk {
    size_t part;
    std::span<uint8_t> bytes;
    size_t pos;
  };
  std::vector<Chunk> chunks(const std::vector<std::span<uint8_t>>& s) const {
    std::vector<Chunk> v;
    for_each_chunk(s, [&](size_t p, std::span<uint8_t> ch, size_t pos) { v.push_back({p, ch, pos}); });
    return v;
  }
  // Fused, the frames of the steps go slice by slice: chunk j of every step before chunk j + 1
  // of any (as NCCL's ring orders them), so a chunk arrives just after its turn to go on came and
  // the forward finds the next ring ready for it. f(step, chunk) for step -1 (this rank's own
  // segment `first`) and the steps 0 .. n - 2 (segment seg_of(step)).
  template <class SegOf, class F>
  void for_each_slice(const std::vector<std::span<uint8_t>>& first, SegOf&& seg_of, F&& f) const {
    std::vector<std::vector<Chunk>> all;
    all.push_back(chunks(first));
    for (int step = 0; step < n - 1; ++step) all.push_back(chunks(seg_of(step)));
    size_t slices = 0;
    for (const auto& v : all) slices = std::max(slices, v.size());
    for (size_t j = 0; j < slices; ++j)
      for (size_t i = 0; i < all.size(); ++i)
        if (j < all[i].size()) f(static_cast<int>(i) - 1, all[i][j]);
  }
  // A fused half, all posted at once in the order the frames travel, then waited for: `first`
  // goes to the right, every step but the last is forwarded (`reduce`: reduced with this rank's
  // chunk, else copied to it as well), and the last step's chunk is received by `last`.
  template <class SegOf, class Last>
  void run_fused(const std::vector<std::span<uint8_t>>& first, SegOf&& seg_of, bool reduce, ReduceOp op,
                 std::vector<RequestPtr>* sends, Last&& last) const {
    std::vector<RequestPtr> rs;
    for_each_slice(first, seg_of, [&](int step, const Chunk& ch) {
      if (step < 0) {
        sends->push_back(c.send(right, ch.bytes, ch.pos));
      } else if (step + 1 < n - 1) {
        const transport::Transport::Forwarding how{reduce, false, dtype, op, reduce ? ch.bytes : std::span<uint8_t>{}};
        auto f = c.recv_forward(left, right, ch.bytes, how, ch.pos);
        rs.push_back(std::move(f.recv));
        sends->push_back(std::move(f.send));
      } else {
        rs.push_back(last(ch));
      }
    });
    for (auto& q : rs) c.wait(q);
  }
};

RingLayout contiguous_layout(void* buf, size_t count, DataType t, int n) {
  auto* base = static_cast<uint8_t*>(buf);
  const size_t es = dtype_size(t);
  RingLayout l(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const size_t b = segment_begin(count, n, i), e = segment_begin(count, n, i + 1);
    l[static_cast<size_t>(i)].push_back({base + b * es, (e - b) * es});
  }
  return l;
}

}  // namespace

void ring_reduce_scatter(OpContext& c, const RingLayout& layout, DataType t, ReduceOp op,
                         std::vector<RequestPtr>* sends, const PartHook& before_local) {
  Ring g(c, layout, t);
  const size_t max_seg = g.max_segment_bytes();
  if (g.n == 1 || max_seg == 0) return;
  std::span<uint8_t> staging[2] = {c.scratch(max_seg, 0), c.scratch(max_seg, 1)};
  // Without a hook the local data is ready from the start: a receive may reduce into it as soon
  // as the frame arrives (straight from shared memory where the peer's transport can). With a
  // hook, the frame is staged and reduced once the hook has run for its part.
  const bool reduce_on_arrival = !before_local;
  if (reduce_on_arrival && c.forwards_around()) {
    // Every step but the last in one pass: the frame from the left goes on to the right reduced
    // with this rank's data as it arrives, and nothing is written here; the last step reduces
    // into the buffer.
    g.run_fused(g.seg(g.r), [&](int step) { return g.seg(g.r - step - 1); }, true, op, sends, [&](const Ring::Chunk& ch) {
      return c.recv_reduce(g.left, ch.bytes, staging[0].subspan(ch.pos, ch.bytes.size()), t, op, ch.pos);
    });
    return;
  }
  auto post_recvs = [&](int step, std::vector<RequestPtr>* out) {
    g.for_each_chunk(g.seg(g.r - step - 1), [&](size_t, std::span<uint8_t> ch, size_t pos) {
      auto stage = staging[step % 2].subspan(pos, ch.size());
      out->push_back(reduce_on_arrival ? c.recv_reduce(g.left, ch, stage, t, op, pos)
                                       : c.recv(g.left, stage, pos));
    });
  };
  // This rank's data of a part is read (sent or reduced into) only once the hook has returned
  // for it and for every part before it.
  size_t announced = 0;
  auto ready = [&](size_t part) {
    for (; announced <= part; ++announced)
      if (before_local) before_local(announced);
  };
  std::vector<RequestPtr> recvs[2];
  // Receives first: the left neighbour's data lands while this rank waits for its own parts.
  post_recvs(0, &recvs[0]);
  g.for_each_chunk(g.seg(g.r), [&](size_t p, std::span<uint8_t> ch, size_t pos) {
    ready(p);
    sends->push_back(c.send(g.right, ch, pos));
  });
  for (int step = 0; step < g.n - 1; ++step) {
    if (step + 1 < g.n - 1) post_recvs(step + 1, &recvs[(step + 1) % 2]);
    auto& rs = recvs[step % 2];
    size_t j = 0;
    g.for_each_chunk(g.seg(g.r - step - 1), [&](size_t p, std::span<uint8_t> ch, size_t pos) {
      c.wait(rs[j++]);
      ready(p);
      if (!reduce_on_arrival)
        core::reduce_into(ch.data(), staging[step % 2].data() + pos, ch.size() / g.es, t, op);
      // The next step forwards this partial sum; after the last step nothing more is sent here
      // (the allgather half sends the final segment).
      if (step + 1 < g.n - 1) sends->push_back(c.send(g.right, ch, pos));
    });
    rs.clear();
  }
}

void ring_allgather(OpContext& c, const RingLayout& layout, DataType t,
                    std::vector<RequestPtr>* sends, const PartHook& on_final) {
  Ring g(c, layout, t);
  if (g.n == 1) return;
  if (!on_final && c.forwards_around()) {
    // Every step but the last in one pass: the frame from the left lands here and goes on to the
    // right from where it arrived, not re-read from the buffer.
    g.run_fused(g.seg(g.r + 1), [&](int step) { return g.seg(g.r - step); }, false, ReduceOp::kSum, sends,
                [&](const Ring::Chunk& ch) { return c.recv(g.left, ch.bytes, ch.pos); });
    return;
  }
  g.for_each_chunk(g.seg(g.r + 1), [&](size_t, std::span<uint8_t> ch, size_t pos) {
    sends->push_back(c.send(g.right, ch, pos));
  });
  for (int step = 0; step < g.n - 1; ++step) {
    const bool last = step + 1 == g.n - 1;
    const auto& s = g.seg(g.r - step);
    std::vector<RequestPtr> rs;
    g.for_each_chunk(s, [&](size_t, std::span<uint8_t> ch, size_t pos) {
      rs.push_back(c.recv(g.left, ch, pos));
    });
    size_t j = 0, pos = 0;
    for (size_t p = 0; p < s.size(); pos += s[p].size(), ++p) {
      for (size_t off = 0; off < s[p].size(); off += g.chunk) {
        c.wait(rs[j++]);
        const auto ch = s[p].subspan(off, std::min(g.chunk, s[p].size() - off));
        if (!last) sends->push_back(c.send(g.right, ch, pos + off));
      }
      // The last step brings the last missing segment: part p is now final in every segment.
      if (last && on_final) on_final(p);
    }
  }
}

void ring_reduce_scatter_inplace(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op,
                                 std::vector<RequestPtr>* sends) {
  if (c.size() == 1 || count == 0) return;
  ring_reduce_scatter(c, contiguous_layout(buf, count, t, c.size()), t, op, sends);
}

void ring_allgather_inplace(OpContext& c, void* buf, size_t count, DataType t,
                            std::vector<RequestPtr>* sends) {
  if (c.size() == 1 || count == 0) return;
  ring_allgather(c, contiguous_layout(buf, count, t, c.size()), t, sends);
}

void ring_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op) {
  std::vector<RequestPtr> sends;
  ring_reduce_scatter_inplace(c, buf, count, t, op, &sends);
  ring_allgather_inplace(c, buf, count, t, &sends);
  c.wait_all(sends);
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

}  // namespace geoccl::collectives
