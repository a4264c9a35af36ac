// Compressed WAN step, allgather form (wan_codec.h): every member encodes its domain's partial
// sum of each piece once, sends the encoding to every other member directly, and then each
// member decodes the k encodings of a chunk in member order, the first into the piece and the
// others added to it. Every member thus computes each final value from the same k buffers in
// the same order: bit-identical results, one quantization per domain's contribution.
//
// Traffic: each member sends k-1 copies of its encodings, one per WAN path, all at once; latency
// one one-way trip plus the transfer. Best for k = 2 (where a ring would quantize twice for the
// same bytes) and for top-k, whose sparse encodings a ring would have to re-sparsify at each hop.
#include <algorithm>

#include "collectives/wan_codec.h"

namespace geoccl::collectives {

using wan_codec::Chunk;

void compressed_allgather_allreduce(OpContext& c, const compression::CodecSpec& spec,
                                    const std::vector<FloatPiece>& pieces,
                                    CompressionCounters* counters, const PieceHook& before_local,
                                    const PieceHook& on_final) {
  const int k = c.size(), me = c.rank();
  const size_t chunk_elems = std::max<size_t>(1, c.chunk_bytes() / sizeof(float));
  // Piece p's chunks; the encodings of all pieces form one stream of `total` bytes per member.
  std::vector<std::vector<Chunk>> chunks(pieces.size());
  std::vector<size_t> base(pieces.size());
  size_t total = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    size_t t = 0;
    chunks[p] = wan_codec::chunks_of(spec, pieces[p].data.size(), chunk_elems, &t);
    base[p] = total;
    total += t;
  }
  auto all = c.scratch(total * static_cast<size_t>(k), 0);
  auto stream = [&](int m) { return all.subspan(static_cast<size_t>(m) * total, total); };
  auto enc = [&](int m, size_t p, const Chunk& ch) { return stream(m).subspan(base[p] + ch.enc_off, ch.enc); };

  // Receives first, in the order the peers send: piece by piece, chunk by chunk.
  std::vector<std::vector<RequestPtr>> recvs(static_cast<size_t>(k));
  for (int m = 0; m < k; ++m) {
    if (m == me) continue;
    for (size_t p = 0; p < pieces.size(); ++p)
      for (const auto& ch : chunks[p])
        recvs[static_cast<size_t>(m)].push_back(c.recv(m, enc(m, p, ch), base[p] + ch.enc_off));
  }
  std::vector<RequestPtr> sends;
  for (size_t p = 0; p < pieces.size(); ++p) {
    if (before_local) before_local(p);
    const auto& piece = pieces[p];
    for (const auto& ch : chunks[p]) {
      auto out = enc(me, p, ch);
      wan_codec::encode_chunk(
          wan_codec::seeded(spec, c.seq(), c.global(me), base[p] + ch.enc_off),
          piece.data.subspan(ch.begin, ch.len),
          piece.residual.empty() ? std::span<float>{} : piece.residual.subspan(ch.begin, ch.len),
          out, counters);
      // Each member starts with its right-hand neighbour, so that not every member's first
      // chunk heads for member 0.
      for (int i = 1; i < k; ++i) sends.push_back(c.send((me + i) % k, out, base[p] + ch.enc_off));
    }
  }
  std::vector<size_t> next(static_cast<size_t>(k), 0);
  for (size_t p = 0; p < pieces.size(); ++p) {
    for (const auto& ch : chunks[p]) {
      auto dst = pieces[p].data.subspan(ch.begin, ch.len);
      for (int m = 0; m < k; ++m) {
        if (m != me) c.wait(recvs[static_cast<size_t>(m)][next[static_cast<size_t>(m)]++]);
        wan_codec::decode_chunk(c, m, enc(m, p, ch), dst, /*add=*/m > 0);
      }
    }
    if (on_final) on_final(p);
  }
  c.wait_all(sends);
}

}  // namespace geoccl::collectives
