// Gather and scatter: the root exchanges one block with every other rank directly; all transfers
// are posted at once so they proceed in parallel over the per-peer connections.
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {

void direct_gather(OpContext& c, const void* send, void* recv, size_t block_bytes, int root) {
  const int n = c.size(), r = c.rank();
  if (block_bytes == 0) return;
  auto mine = std::span<const uint8_t>(static_cast<const uint8_t*>(send), block_bytes);
  std::vector<RequestPtr> reqs;
  if (r != root) {
    c.send_chunked(root, mine, &reqs);
  } else {
    auto* out = static_cast<uint8_t*>(recv);
    if (out + static_cast<size_t>(r) * block_bytes != send)
      std::memcpy(out + static_cast<size_t>(r) * block_bytes, send, block_bytes);
    for (int p = 0; p < n; ++p)
      if (p != r) c.recv_chunked(p, {out + static_cast<size_t>(p) * block_bytes, block_bytes}, &reqs);
  }
  c.wait_all(reqs);
}

void direct_scatter(OpContext& c, const void* send, void* recv, size_t block_bytes, int root) {
  const int n = c.size(), r = c.rank();
  if (block_bytes == 0) return;
  auto out = std::span<uint8_t>(static_cast<uint8_t*>(recv), block_bytes);
  std::vector<RequestPtr> reqs;
  if (r != root) {
    c.recv_chunked(root, out, &reqs);
  } else {
    const auto* in = static_cast<const uint8_t*>(send);
    for (int p = 0; p < n; ++p)
      if (p != r) c.send_chunked(p, {in + static_cast<size_t>(p) * block_bytes, block_bytes}, &reqs);
    if (in + static_cast<size_t>(r) * block_bytes != out.data())
      std::memcpy(out.data(), in + static_cast<size_t>(r) * block_bytes, block_bytes);
  }
  c.wait_all(reqs);
}

}  // namespace geoccl::collectives
