// Pipelined ring allreduce.
//
// The buffer is split into n segments; segment s is fully reduced on rank s-1 after n-1
// reduce-scatter steps and then travels once around the ring (allgather). Each segment is further
// cut into chunks so that, within a step, receiving chunk j+1 overlaps reducing chunk j and
// forwarding it. Every segment's final value is computed on exactly one rank and copied to the
// others, so all ranks hold bit-identical results.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {

void ring_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || count == 0) {
    return;
  }
  const size_t es = dtype_size(t);
  auto* base = static_cast<uint8_t*>(buf);
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  auto seg = [&](int i) {
    i = ((i % n) + n) % n;
    const size_t b = segment_begin(count, n, i), e = segment_begin(count, n, i + 1);
    return std::span<uint8_t>(base + b * es, (e - b) * es);
  };
  // Chunk boundaries in bytes, aligned to elements.
  const size_t chunk = std::max(es, c.chunk_bytes() / es * es);
  size_t max_seg = 0;
  for (int i = 0; i < n; ++i) max_seg = std::max(max_seg, seg(i).size());
  std::span<uint8_t> staging[2] = {c.scratch(max_seg, 0), c.scratch(max_seg, 1)};

  std::vector<RequestPtr> sends;
  auto post_recvs = [&](int step, std::vector<RequestPtr>* out) {
    auto s = seg(r - step - 1);
    auto dst = staging[step % 2].first(s.size());
    for (size_t off = 0; off < s.size(); off += chunk)
      out->push_back(c.recv(left, dst.subspan(off, std::min(chunk, s.size() - off)), off));
  };

  // Reduce-scatter.
  {
    auto s0 = seg(r);
    for (size_t off = 0; off < s0.size(); off += chunk)
      sends.push_back(c.send(right, s0.subspan(off, std::min(chunk, s0.size() - off)), off));
  }
  std::vector<RequestPtr> recvs[2];
  post_recvs(0, &recvs[0]);
  for (int step = 0; step < n - 1; ++step) {
    if (step + 1 < n - 1) post_recvs(step + 1, &recvs[(step + 1) % 2]);
    auto s = seg(r - step - 1);
    auto& rs = recvs[step % 2];
    for (size_t j = 0, off = 0; off < s.size(); ++j, off += chunk) {
      const size_t len = std::min(chunk, s.size() - off);
      c.wait(rs[j]);
      core::reduce_into(s.data() + off, staging[step % 2].data() + off, len / es, t, op);
      // At the last step this segment is final: its first allgather hop leaves right away.
      sends.push_back(c.send(right, s.subspan(off, len), off));
    }
    rs.clear();
  }

  // Allgather: receive each final segment straight into place and forward it.
  for (int step = 0; step < n - 1; ++step) {
    auto s = seg(r - step);
    std::vector<RequestPtr> rs;
    for (size_t off = 0; off < s.size(); off += chunk)
      rs.push_back(c.recv(left, s.subspan(off, std::min(chunk, s.size() - off)), off));
    for (size_t j = 0, off = 0; off < s.size(); ++j, off += chunk) {
      c.wait(rs[j]);
      if (step + 1 < n - 1) sends.push_back(c.send(right, s.subspan(off, std::min(chunk, s.size() - off)), off));
    }
  }
  c.wait_all(sends);
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, n);
}

}  // namespace geoccl::collectives
