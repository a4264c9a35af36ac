// Ring reduce-scatter: n-1 steps. At step s rank r sends its running sum of block r-s-1 and
// receives the running sum of block r-s-2, to which it adds its own contribution; after the last
// step it holds block r, reduced over all ranks, received straight into the output buffer.
// The input is never written: partial sums live in three rotating staging buffers; forwarded
// (every member on one host), they go from ring to ring and wait in staging only where the next
// ring is not ready.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {

void ring_reduce_scatter(OpContext& c, const void* send, void* recv, size_t recv_count, DataType t,
                         ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t es = dtype_size(t);
  const size_t bytes = recv_count * es;
  const auto* in = static_cast<const uint8_t*>(send);
  auto own = [&](int i) {
    i = ((i % n) + n) % n;
    return std::span<const uint8_t>(in + static_cast<size_t>(i) * bytes, bytes);
  };
  if (bytes == 0) return;
  if (n == 1) {
    if (recv != send) std::memcpy(recv, send, bytes);
    if (op == ReduceOp::kAvg) core::finish_avg(recv, recv_count, t, n);
    return;
  }
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const size_t chunk = std::max(es, c.chunk_bytes() / es * es);
  const size_t nchunks = (bytes + chunk - 1) / chunk;
  auto out = std::span<uint8_t>(static_cast<uint8_t*>(recv), bytes);
  // Forwarded, the sums that wait take a block per forwarded step (all of them are in flight at
  // once): with many ranks most of the input, kept by the scratch pool. Past the three blocks the
  // unfused form keeps, and past 64 MiB, that form runs.
  const size_t spill_bytes = static_cast<size_t>(std::max(n - 2, 0)) * bytes;
  if (c.forwards_around() && (n <= 5 || spill_bytes <= (size_t{64} << 20))) {
    // Every step but the last in one pass (ring_allreduce.cc): the running sum from the left goes
    // on to the right with this rank's contribution added as it arrives, in the same operand
    // order (the received sum first); it waits in staging (one block per step: they are all in
    // flight at once) only where the next ring is not ready. Frames go slice by slice: chunk j
    // of every step before chunk j + 1 of any.
    const auto spill = c.scratch(static_cast<size_t>(n - 2) * bytes, 0);
    std::vector<RequestPtr> rs, sends;
    for (size_t j = 0; j < nchunks; ++j) {
      const size_t off = j * chunk, len = std::min(chunk, bytes - off);
      sends.push_back(c.send(right, own(r - 1).subspan(off, len), off));
      for (int step = 0; step < n - 1; ++step) {
        const auto mine = own(r - step - 2).subspan(off, len);
        if (step + 1 == n - 1) {
          rs.push_back(c.recv(left, out.subspan(off, len), off));
          continue;
        }
        const auto wait_here = spill.subspan(static_cast<size_t>(step) * bytes + off, len);
        auto f = c.recv_forward(left, right, wait_here, {true, true, t, op, mine}, off);
        rs.push_back(std::move(f.recv));
        sends.push_back(std::move(f.send));
      }
    }
    for (size_t j = 0; j < rs.size(); ++j) {
      c.wait(rs[j]);
      if ((j + 1) % static_cast<size_t>(n - 1) == 0) {  // the chunk of the output: add ours
        const size_t off = (j / static_cast<size_t>(n - 1)) * chunk, len = std::min(chunk, bytes - off);
        core::reduce_into(out.data() + off, own(r).data() + off, len / es, t, op);
      }
    }
    c.wait_all(sends);
    if (op == ReduceOp::kAvg) core::finish_avg(recv, recv_count, t, n);
    return;
  }
  std::span<uint8_t> staging[3] = {c.scratch(bytes, 0), c.scratch(bytes, 1), c.scratch(bytes, 2)};
  // The buffer step s receives into: staging, or the output at the last step.
  auto dst_of = [&](int step) { return step == n - 2 ? out : staging[step % 3]; };
  // Sends sourced from each staging buffer, to be finished before it is received into again.
  std::vector<RequestPtr> sends_from[3], first_sends, recvs_of[3];
  auto post_recvs = [&](int step) {
    auto& slot = sends_from[step % 3];
    if (step != n - 2) c.wait_all(slot);
    c.recv_chunked(left, dst_of(step), &recvs_of[step % 3]);
  };

  c.send_chunked(right, own(r - 1), &first_sends);
  post_recvs(0);
  for (int step = 0; step < n - 1; ++step) {
    if (step + 1 < n - 1) post_recvs(step + 1);
    auto dst = dst_of(step);
    auto mine = own(r - step - 2);
    auto& rs = recvs_of[step % 3];
    for (size_t j = 0; j < nchunks; ++j) {
      const size_t off = j * chunk, len = std::min(chunk, bytes - off);
      c.wait(rs[j]);
      core::reduce_into(dst.data() + off, mine.data() + off, len / es, t, op);
      if (step + 1 < n - 1) sends_from[step % 3].push_back(c.send(right, dst.subspan(off, len), off));
    }
    rs.clear();
  }
  c.wait_all(first_sends);
  for (auto& s : sends_from) c.wait_all(s);
  if (op == ReduceOp::kAvg) core::finish_avg(recv, recv_count, t, n);
}

}  // namespace geoccl::collectives
