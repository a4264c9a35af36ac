// Broadcast. Small buffers: binomial tree (log2 n hops). Large buffers: a pipelined chain
// root -> root+1 -> ... in chunks, so every link carries the buffer once and all links are busy
// at the same time after the pipeline fills.
#include <algorithm>

#include "collectives/collectives.h"

namespace geoccl::collectives {

void tree_broadcast(OpContext& c, void* buf, size_t bytes, int root) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || bytes == 0) return;
  auto data = std::span<uint8_t>(static_cast<uint8_t*>(buf), bytes);
  const int vr = (r - root + n) % n;
  int mask = 1;
  // Receive from the parent: the rank that differs in our lowest set bit.
  while (mask < n) {
    if (vr & mask) {
      std::vector<RequestPtr> rs;
      c.recv_chunked((vr - mask + root) % n, data, &rs);
      c.wait_all(rs);
      break;
    }
    mask <<= 1;
  }
  // Send to children below that bit, farthest first.
  std::vector<RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) c.send_chunked((vr + mask + root) % n, data, &sends);
  c.wait_all(sends);
}

void chain_broadcast(OpContext& c, void* buf, size_t bytes, int root) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || bytes == 0) return;
  auto data = std::span<uint8_t>(static_cast<uint8_t*>(buf), bytes);
  const int vr = (r - root + n) % n;
  const int next = vr + 1 < n ? (r + 1) % n : -1;
  const int prev = vr > 0 ? (r - 1 + n) % n : -1;
  const size_t chunk = c.chunk_bytes();
  std::vector<RequestPtr> recvs, sends;
  if (prev >= 0) c.recv_chunked(prev, data, &recvs);
  for (size_t j = 0, off = 0; off < bytes; ++j, off += chunk) {
    if (prev >= 0) c.wait(recvs[j]);
    if (next >= 0) sends.push_back(c.send(next, data.subspan(off, std::min(chunk, bytes - off)), off));
  }
  c.wait_all(sends);
}

}  // namespace geoccl::collectives
