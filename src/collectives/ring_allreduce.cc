// Pipelined ring allreduce, and its two halves for algorithms that compose them.
//
// The buffer is split into n segments; after n-1 reduce-scatter steps segment r+1 is fully
// reduced on rank r, and n-1 allgather steps send every final segment once around the ring.
// Each segment is further cut into chunks so that, within a step, receiving chunk j+1 overlaps
// reducing chunk j and forwarding it. Every segment's final value is computed on exactly one rank
// and copied to the others, so all ranks hold bit-identical results.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {
namespace {

struct Ring {
  OpContext& c;
  uint8_t* base;
  size_t count, es, chunk;
  int n, r, right, left;

  Ring(OpContext& ctx, void* buf, size_t cnt, DataType t)
      : c(ctx), base(static_cast<uint8_t*>(buf)), count(cnt), es(dtype_size(t)),
        chunk(std::max(es, ctx.chunk_bytes() / es * es)), n(ctx.size()), r(ctx.rank()),
        right((r + 1) % n), left((r - 1 + n) % n) {}

  std::span<uint8_t> seg(int i) const {
    i = ((i % n) + n) % n;
    const size_t b = segment_begin(count, n, i), e = segment_begin(count, n, i + 1);
    return {base + b * es, (e - b) * es};
  }
  void send_chunks(std::span<uint8_t> s, std::vector<RequestPtr>* out) const {
    for (size_t off = 0; off < s.size(); off += chunk)
      out->push_back(c.send(right, s.subspan(off, std::min(chunk, s.size() - off)), off));
  }
};

}  // namespace

void ring_reduce_scatter_inplace(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op,
                                 std::vector<RequestPtr>* sends) {
  Ring g(c, buf, count, t);
  if (g.n == 1 || count == 0) return;
  size_t max_seg = 0;
  for (int i = 0; i < g.n; ++i) max_seg = std::max(max_seg, g.seg(i).size());
  std::span<uint8_t> staging[2] = {c.scratch(max_seg, 0), c.scratch(max_seg, 1)};
  auto post_recvs = [&](int step, std::vector<RequestPtr>* out) {
    auto s = g.seg(g.r - step - 1);
    auto dst = staging[step % 2].first(s.size());
    for (size_t off = 0; off < s.size(); off += g.chunk)
      out->push_back(c.recv(g.left, dst.subspan(off, std::min(g.chunk, s.size() - off)), off));
  };
  g.send_chunks(g.seg(g.r), sends);
  std::vector<RequestPtr> recvs[2];
  post_recvs(0, &recvs[0]);
  for (int step = 0; step < g.n - 1; ++step) {
    if (step + 1 < g.n - 1) post_recvs(step + 1, &recvs[(step + 1) % 2]);
    auto s = g.seg(g.r - step - 1);
    auto& rs = recvs[step % 2];
    for (size_t j = 0, off = 0; off < s.size(); ++j, off += g.chunk) {
      const size_t len = std::min(g.chunk, s.size() - off);
      c.wait(rs[j]);
      core::reduce_into(s.data() + off, staging[step % 2].data() + off, len / g.es, t, op);
      // The next step forwards this partial sum; after the last step nothing more is sent here
      // (the allgather half sends the final segment).
      if (step + 1 < g.n - 1) sends->push_back(c.send(g.right, s.subspan(off, len), off));
    }
    rs.clear();
  }
}

void ring_allgather_inplace(OpContext& c, void* buf, size_t count, DataType t,
                            std::vector<RequestPtr>* sends) {
  Ring g(c, buf, count, t);
  if (g.n == 1 || count == 0) return;
  g.send_chunks(g.seg(g.r + 1), sends);
  for (int step = 0; step < g.n - 1; ++step) {
    auto s = g.seg(g.r - step);
    std::vector<RequestPtr> rs;
    for (size_t off = 0; off < s.size(); off += g.chunk)
      rs.push_back(c.recv(g.left, s.subspan(off, std::min(g.chunk, s.size() - off)), off));
    for (size_t j = 0, off = 0; off < s.size(); ++j, off += g.chunk) {
      c.wait(rs[j]);
      if (step + 1 < g.n - 1)
        sends->push_back(c.send(g.right, s.subspan(off, std::min(g.chunk, s.size() - off)), off));
    }
  }
}

void ring_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op) {
  std::vector<RequestPtr> sends;
  ring_reduce_scatter_inplace(c, buf, count, t, op, &sends);
  ring_allgather_inplace(c, buf, count, t, &sends);
  c.wait_all(sends);
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, c.size());
}

}  // namespace geoccl::collectives
