// Pairwise alltoall: at round i rank r sends block r+i to rank r+i and receives block r-i from
// rank r-i. All rounds are posted at once; each peer connection carries exactly its own block.
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {

void pairwise_alltoall(OpContext& c, const void* send, void* recv, size_t block_bytes) {
  const int n = c.size(), r = c.rank();
  if (block_bytes == 0) return;
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  auto at = [&](auto* base, int i) { return base + static_cast<size_t>(i) * block_bytes; };
  std::memmove(at(out, r), at(in, r), block_bytes);
  std::vector<RequestPtr> reqs;
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n, from = (r - i + n) % n;
    c.recv_chunked(from, {at(out, from), block_bytes}, &reqs);
    c.send_chunked(to, {at(in, to), block_bytes}, &reqs);
  }
  c.wait_all(reqs);
}

}  // namespace geoccl::collectives
