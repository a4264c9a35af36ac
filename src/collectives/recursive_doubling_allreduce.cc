// Recursive-doubling allreduce for small buffers: log2(p) exchange rounds, each with the whole
// buffer. With n not a power of two, the first 2*(n-p) ranks pair up: odd ones absorb their even
// neighbour's data before the rounds and hand the result back after them.
//
// In every exchange both partners compute op(lower rank's data, higher rank's data) in that
// order, so all ranks end with bit-identical buffers even for min/max of signed zeros and NaNs.
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {

void recursive_doubling_allreduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  if (n == 1 || count == 0) return;
  const size_t bytes = count * dtype_size(t);
  auto data = std::span<uint8_t>(static_cast<uint8_t*>(buf), bytes);
  auto tmp = c.scratch(bytes, 0);

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;

  int vrank;  // rank among the p participants, -1 for folded-out ranks
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      c.wait(c.send(r + 1, data));
      vrank = -1;
    } else {
      c.wait(c.recv(r - 1, tmp));
      core::reduce_into(data.data(), tmp.data(), count, t, op, core::Operands::kSrcFirst);
      vrank = r / 2;
    }
  } else {
    vrank = r - extra;
  }

  if (vrank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < extra ? vpeer * 2 + 1 : vpeer + extra;
      auto s = c.send(peer, data);
      auto rv = c.recv(peer, tmp);
      c.wait(s);  // the buffer is about to change
      c.wait(rv);
      core::reduce_into(data.data(), tmp.data(), count, t, op,
                        peer < r ? core::Operands::kSrcFirst : core::Operands::kDstFirst);
    }
  }

  if (r < 2 * extra) {
    if (r % 2 == 0)
      c.wait(c.recv(r + 1, data));
    else
      c.wait(c.send(r - 1, data));
  }
  if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, n);
}

}  // namespace geoccl::collectives
