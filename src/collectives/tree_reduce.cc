// Binomial-tree reduce to a root, chunk-pipelined: a rank reduces chunk j of all its children and
// passes it up while chunk j+1 is still arriving. Non-root buffers are never written: inner ranks
// accumulate in scratch memory.
#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "core/reduce.h"

namespace geoccl::collectives {

void tree_reduce(OpContext& c, void* buf, size_t count, DataType t, ReduceOp op, int root) {
  const int n = c.size(), r = c.rank();
  const size_t es = dtype_size(t);
  const size_t bytes = count * es;
  if (bytes == 0) return;
  if (n == 1) {
    if (op == ReduceOp::kAvg) core::finish_avg(buf, count, t, n);
    return;
  }
  const int vr = (r - root + n) % n;
  int mask = 1;
  while (mask < n && !(vr & mask)) mask <<= 1;
  const int parent = vr == 0 ? -1 : (vr - mask + root) % n;
  std::vector<int> children;
  for (int m = mask >> 1; m > 0; m >>= 1)
    if (vr + m < n) children.push_back((vr + m + root) % n);

  auto user = std::span<uint8_t>(static_cast<uint8_t*>(buf), bytes);
  std::vector<RequestPtr> sends;
  if (children.empty()) {  // a leaf sends its buffer as it is
    c.send_chunked(parent, user, &sends);
    c.wait_all(sends);
    return;
  }
  std::span<uint8_t> acc = user;
  if (parent >= 0) {
    acc = c.scratch(bytes, 0);
    std::memcpy(acc.data(), user.data(), bytes);
  }
  const size_t chunk = std::max(es, c.chunk_bytes() / es * es);
  const size_t nchunks = (bytes + chunk - 1) / chunk;
  // Two chunk-sized landing slots per child.
  std::vector<std::span<uint8_t>> land;
  for (size_t i = 0; i < children.size(); ++i) land.push_back(c.scratch(2 * chunk, static_cast<int>(i) + 1));
  std::vector<std::vector<RequestPtr>> recvs(children.size(), std::vector<RequestPtr>(nchunks));
  auto post = [&](size_t j) {
    const size_t off = j * chunk, len = std::min(chunk, bytes - off);
    for (size_t i = 0; i < children.size(); ++i)
      recvs[i][j] = c.recv(children[i], land[i].subspan((j % 2) * chunk, len), off);
  };
  post(0);
  for (size_t j = 0; j < nchunks; ++j) {
    if (j + 1 < nchunks) post(j + 1);
    const size_t off = j * chunk, len = std::min(chunk, bytes - off);
    for (size_t i = 0; i < children.size(); ++i) {
      c.wait(recvs[i][j]);
      core::reduce_into(acc.data() + off, land[i].data() + (j % 2) * chunk, len / es, t, op);
    }
    if (parent >= 0) sends.push_back(c.send(parent, acc.subspan(off, len), off));
  }
  c.wait_all(sends);
  if (parent < 0 && op == ReduceOp::kAvg) core::finish_avg(buf, count, t, n);
}

}  // namespace geoccl::collectives
