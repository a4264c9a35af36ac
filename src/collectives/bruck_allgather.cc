// Bruck's allgather: ceil(log2 n) steps for any n. At the step of distance d a rank holds the
// blocks of ranks r .. r+d-1 (in that order, from its own) and sends the first min(d, n-d) of
// them to rank r-d while it receives those of ranks r+d .. from rank r+d; the last step puts
// every block in its place. Each block crosses log2 n links instead of n-1 hops of a ring, so a
// gather of small blocks costs log2 n latencies; it is for those (the start-up's labels), where
// the ring's n-1 steps dominate at a few hundred ranks.
#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/collectives.h"

namespace geoccl::collectives {

void bruck_allgather(OpContext& c, const void* send, void* recv, size_t block_bytes) {
  const int n = c.size(), r = c.rank();
  if (block_bytes == 0) return;
  auto* out = static_cast<uint8_t*>(recv);
  if (n == 1) {
    if (out != send) std::memcpy(out, send, block_bytes);
    return;
  }
  // held[j]: the block of rank (r + j) mod n.
  std::vector<uint8_t> held(static_cast<size_t>(n) * block_bytes);
  std::memcpy(held.data(), send, block_bytes);
  int have = 1;
  for (int d = 1; d < n; d *= 2) {
    const int count = std::min(d, n - have);
    const auto bytes = static_cast<size_t>(count) * block_bytes;
    std::vector<RequestPtr> reqs;
    c.send_chunked((r - d + n) % n, std::span<const uint8_t>(held.data(), bytes), &reqs);
    c.recv_chunked((r + d) % n, std::span<uint8_t>(held.data() + static_cast<size_t>(have) * block_bytes, bytes),
                   &reqs);
    c.wait_all(reqs);
    have += count;
  }
  for (int j = 0; j < n; ++j)
    std::memcpy(out + static_cast<size_t>((r + j) % n) * block_bytes, held.data() + static_cast<size_t>(j) * block_bytes,
                block_bytes);
}

}  // namespace geoccl::collectives
