// Sparse allgather: every member sends its sparse piece (compression/sparse_piece.h) to every
// other member directly, as a length frame then the piece in chunk_bytes() frames, and every
// member densifies the k pieces in member order (its own from its own bytes). Every member thus
// sums the same bytes in the same order: bit-identical results. The pieces stay sparse on the
// wire; the dense vector exists only at the end, once.
//
// Traffic: each member sends k - 1 copies of its piece, all at once; latency one one-way trip
// for the lengths plus the transfer (a receiver posts a piece's frames once it knows its length).
#include <algorithm>
#include <string>

#include "collectives/collectives.h"
#include "compression/sparse_piece.h"
#include "geoccl/error.h"

namespace geoccl::collectives {

SparseTraffic sparse_allgather(OpContext& c, std::span<const uint8_t> mine, std::span<float> out) {
  const int k = c.size(), me = c.rank();
  const uint64_t n = out.size();
  // A piece of n elements is at most its header, a 10-byte varint and 4 value bytes per element
  // (quantized blocks are smaller): a length beyond that is refused before anything is allocated.
  const uint64_t most = compression::kSparseHeaderSize + 14 * n;
  SparseTraffic traffic;
  std::vector<uint8_t> my_len(8);
  for (int i = 0; i < 8; ++i)
    my_len[static_cast<size_t>(i)] = static_cast<uint8_t>(uint64_t{mine.size()} >> (8 * i));
  auto lens = c.scratch(8 * static_cast<size_t>(k), 0);
  std::vector<RequestPtr> len_recvs(static_cast<size_t>(k)), sends;
  for (int m = 0; m < k; ++m)
    if (m != me)
      len_recvs[static_cast<size_t>(m)] = c.recv(m, lens.subspan(8 * static_cast<size_t>(m), 8));
  std::vector<OpContext::PeerBytes> to_each;
  for (int i = 1; i < k; ++i) {
    const int m = (me + i) % k;  // each member starts with its right-hand neighbour
    sends.push_back(c.send(m, my_len));
    to_each.emplace_back(m, mine);
    traffic.bytes_sent += 8 + mine.size();
  }
  c.send_chunked_to_each(to_each, &sends);

  std::vector<uint64_t> len(static_cast<size_t>(k));
  len[static_cast<size_t>(me)] = mine.size();
  uint64_t total = 0;
  for (int m = 0; m < k; ++m) {
    if (m == me) continue;
    c.wait(len_recvs[static_cast<size_t>(m)]);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t{lens[8 * static_cast<size_t>(m) + static_cast<size_t>(i)]} << (8 * i);
    if (v < compression::kSparseHeaderSize || v > most) {
      const std::string why = "sparse allgather: rank " + std::to_string(c.global(m)) +
                              " announced a piece of " + std::to_string(v) + " bytes for " +
                              std::to_string(n) + " elements";
      c.abort(ErrorCode::kProtocol, why);
      throw Error(ErrorCode::kProtocol, why);
    }
    len[static_cast<size_t>(m)] = v;
    total += v;
  }
  auto body = c.scratch(static_cast<size_t>(total), 1);
  std::vector<std::span<const uint8_t>> pieces(static_cast<size_t>(k));
  std::vector<RequestPtr> recvs;
  size_t at = 0;
  for (int m = 0; m < k; ++m) {
    if (m == me) {
      pieces[static_cast<size_t>(m)] = mine;
      continue;
    }
    auto dst = body.subspan(at, static_cast<size_t>(len[static_cast<size_t>(m)]));
    at += dst.size();
    c.recv_chunked(m, dst, &recvs);
    pieces[static_cast<size_t>(m)] = dst;
    traffic.bytes_received += 8 + dst.size();
  }
  c.wait_all(recvs);
  try {
    compression::sparse_densify(pieces, out);
  } catch (const Error& e) {
    // A piece this rank cannot read fails the group, so that no rank goes on with a result the
    // others lack.
    c.abort(e.code(), e.what());
    throw;
  }
  c.wait_all(sends);
  return traffic;
}

}  // namespace geoccl::collectives
