// Ring allgather: n-1 steps; at step s each rank forwards the block it received at step s-1.
// Blocks are received straight into their place in the output and forwarded chunk by chunk as
// they arrive; over a device that forwards, from the ring they arrive in (ring_allreduce.cc).
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {

void ring_allgather(OpContext& c, const void* send, void* recv, size_t block_bytes) {
  const int n = c.size(), r = c.rank();
  auto* out = static_cast<uint8_t*>(recv);
  auto block = [&](int i) {
    i = ((i % n) + n) % n;
    return std::span<uint8_t>(out + static_cast<size_t>(i) * block_bytes, block_bytes);
  };
  if (block_bytes == 0) return;
  if (block(r).data() != send) std::memcpy(block(r).data(), send, block_bytes);
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const size_t chunk = c.chunk_bytes();
  std::vector<RequestPtr> sends;
  if (c.forwards_around()) {
    // Every step but the last in one pass (ring_allreduce.cc): a chunk from the left lands in its
    // place and goes on to the right from where it arrived. Frames go slice by slice: chunk j of
    // every block before chunk j + 1 of any.
    std::vector<RequestPtr> rs;
    for (size_t off = 0; off < block_bytes; off += chunk) {
      const size_t len = std::min(chunk, block_bytes - off);
      sends.push_back(c.send(right, block(r).subspan(off, len), off));
      for (int step = 0; step < n - 1; ++step) {
        const auto b = block(r - step - 1).subspan(off, len);
        if (step + 1 == n - 1) {
          rs.push_back(c.recv(left, b, off));
        } else {
          auto f = c.recv_forward(left, right, b, {}, off);
          rs.push_back(std::move(f.recv));
          sends.push_back(std::move(f.send));
        }
      }
    }
    c.wait_all(rs);
    c.wait_all(sends);
    return;
  }
  c.send_chunked(right, block(r), &sends);
  for (int step = 0; step < n - 1; ++step) {
    auto b = block(r - step - 1);
    std::vector<RequestPtr> rs;
    c.recv_chunked(left, b, &rs);
    for (size_t j = 0, off = 0; off < block_bytes; ++j, off += chunk) {
      c.wait(rs[j]);
      if (step + 1 < n - 1)
        sends.push_back(c.send(right, b.subspan(off, std::min(chunk, block_bytes - off)), off));
    }
  }
  c.wait_all(sends);
}

}  // namespace geoccl::collectives
