// Dissemination barrier: ceil(log2 n) rounds; in round k rank r signals r+2^k and waits for
// r-2^k. After the last round every rank has transitively heard from every other.
#include "collectives/collectives.h"

namespace geoccl::collectives {

void dissemination_barrier(OpContext& c) {
  const int n = c.size(), r = c.rank();
  for (int dist = 1, round = 0; dist < n; dist <<= 1, ++round) {
    auto s = c.send((r + dist) % n, {}, static_cast<uint64_t>(round));
    auto rv = c.recv((r - dist + n) % n, {}, static_cast<uint64_t>(round));
    c.wait(rv);
    c.wait(s);
  }
}

}  // namespace geoccl::collectives
