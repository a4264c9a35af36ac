// Compressed WAN step, ring form (wan_codec.h). Each piece is split into k segments, segment q of
// the ring being the q-th part of every piece (as the full-precision WAN ring does). The
// reduce-scatter sends encoded partial sums: a member decodes what its left neighbour sent, adds
// it to its own values, and encodes the new partial sum for its right neighbour (k-1 encodings
// of a growing sum; error feedback covers each one). The member that completes a segment encodes
// the final sum once, keeps decode(encoding) as its own result, and the allgather forwards that
// encoding around the ring unchanged, so every member decodes the same bytes.
//
// Traffic: 2(k-1)/k encodings of the pieces per uplink, as little as a full-precision ring's
// share: for int8 across 3 domains 0.34 of the fp32 ring's bytes where the allgather form sends
// 0.52. Cost: more quantizations of partial sums, and 2(k-1) WAN latencies.
#include <algorithm>

#include "collectives/collectives.h"
#include "collectives/wan_codec.h"

namespace geoccl::collectives {
namespace {

using wan_codec::Chunk;

// Piece `piece`'s part in one segment, with its chunks and where their encodings go in the
// segment's stream of encoded bytes.
struct Part {
  size_t piece;
  std::span<float> data, residual;
  std::vector<Chunk> chunks;
  size_t enc_off;
};

}  // namespace

void compressed_ring_allreduce(OpContext& c, const compression::CodecSpec& spec,
                               const std::vector<FloatPiece>& pieces, CompressionCounters* counters,
                               const PieceHook& before_local, const PieceHook& on_final) {
  const int k = c.size(), r = c.rank(), right = (r + 1) % k, left = (r - 1 + k) % k;
  if (k == 1) {
    for (size_t p = 0; p < pieces.size(); ++p) {
      if (before_local) before_local(p);
      if (on_final) on_final(p);
    }
    return;
  }
  const size_t chunk_elems = std::max<size_t>(1, c.chunk_bytes() / sizeof(float));
  std::vector<std::vector<Part>> segs(static_cast<size_t>(k));
  std::vector<size_t> seg_base(static_cast<size_t>(k), 0);
  size_t total = 0, max_seg = 0;
  for (int q = 0; q < k; ++q) {
    auto& s = segs[static_cast<size_t>(q)];
    size_t bytes = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      const auto& piece = pieces[p];
      const size_t n = piece.data.size();
      const size_t a = segment_begin(n, k, q), b = segment_begin(n, k, q + 1);
      Part part{p, piece.data.subspan(a, b - a),
                piece.residual.empty() ? std::span<float>{} : piece.residual.subspan(a, b - a),
                {}, bytes};
      size_t t = 0;
      part.chunks = wan_codec::chunks_of(spec, b - a, chunk_elems, &t);
      bytes += t;
      s.push_back(std::move(part));
    }
    seg_base[static_cast<size_t>(q)] = total;
    total += bytes;
    max_seg = std::max(max_seg, bytes);
  }
  auto seg = [&](int i) -> const std::vector<Part>& { return segs[static_cast<size_t>(((i % k) + k) % k)]; };
  auto seg_index = [&](int i) { return static_cast<size_t>(((i % k) + k) % k); };
  // Encodings this member sends: those of the reduce-scatter and those of the allgather (which
  // it also forwards), each segment's at its own place, so no buffer is reused while a send
  // from it may still be in flight; and two staging areas for the reduce-scatter's receives.
  auto rs_enc = c.scratch(total, 0), ag_enc = c.scratch(total, 1);
  std::span<uint8_t> staging[2] = {c.scratch(max_seg, 2), c.scratch(max_seg, 3)};
  auto at = [&](std::span<uint8_t> stream, size_t base, const Part& part, const Chunk& ch) {
    return stream.subspan(base + part.enc_off + ch.enc_off, ch.enc);
  };
  auto values = [](const Part& part, const Chunk& ch) { return part.data.subspan(ch.begin, ch.len); };
  auto feedback = [](const Part& part, const Chunk& ch) {
    return part.residual.empty() ? std::span<float>{} : part.residual.subspan(ch.begin, ch.len);
  };
  size_t announced = 0;
  auto ready = [&](size_t piece) {
    for (; announced <= piece; ++announced)
      if (before_local) before_local(announced);
  };
  auto seeded = [&](uint64_t offset) {
    return wan_codec::seeded(spec, c.seq(), c.global(r), offset);
  };
  std::vector<RequestPtr> sends;

  // Reduce-scatter. After step s this member has added its values into segment r-s-1.
  auto post_recvs = [&](int step, std::vector<RequestPtr>* out) {
    for (const auto& part : seg(r - step - 1))
      for (const auto& ch : part.chunks)
        out->push_back(c.recv(left, at(staging[step % 2], 0, part, ch), part.enc_off + ch.enc_off));
  };
  std::vector<RequestPtr> recvs[2];
  post_recvs(0, &recvs[0]);
  for (const auto& part : seg(r)) {
    ready(part.piece);
    for (const auto& ch : part.chunks) {
      auto out = at(rs_enc, seg_base[seg_index(r)], part, ch);
      wan_codec::encode_chunk(seeded(static_cast<size_t>(out.data() - rs_enc.data())),
                              values(part, ch), feedback(part, ch), out, counters);
      sends.push_back(c.send(right, out, part.enc_off + ch.enc_off));
    }
  }
  for (int step = 0; step < k - 1; ++step) {
    const bool forward = step + 1 < k - 1;
    if (forward) post_recvs(step + 1, &recvs[(step + 1) % 2]);
    auto& rs = recvs[step % 2];
    size_t j = 0;
    const int q = r - step - 1;
    for (const auto& part : seg(q)) {
      for (const auto& ch : part.chunks) {
        c.wait(rs[j++]);
        ready(part.piece);
        wan_codec::decode_chunk(c, left, at(staging[step % 2], 0, part, ch), values(part, ch), true);
        if (!forward) continue;  // segment r+1 is complete here; the allgather sends it
        auto out = at(rs_enc, seg_base[seg_index(q)], part, ch);
        wan_codec::encode_chunk(seeded(static_cast<size_t>(out.data() - rs_enc.data())),
                                values(part, ch), feedback(part, ch), out, counters);
        sends.push_back(c.send(right, out, part.enc_off + ch.enc_off));
      }
      ready(part.piece);  // a part without chunks still counts as read
    }
    rs.clear();
  }

  // Allgather: encode the completed segment once, keep its decoding, pass the bytes on.
  for (const auto& part : seg(r + 1)) {
    for (const auto& ch : part.chunks) {
      auto out = at(ag_enc, seg_base[seg_index(r + 1)], part, ch);
      // Offsets past `total`: the allgather's encodings are seeded apart from the reduce-scatter's.
      wan_codec::encode_chunk(seeded(total + static_cast<size_t>(out.data() - ag_enc.data())),
                              values(part, ch), feedback(part, ch), out, counters);
      wan_codec::decode_chunk(c, r, out, values(part, ch), false);
      sends.push_back(c.send(right, out, part.enc_off + ch.enc_off));
    }
  }
  for (int step = 0; step < k - 1; ++step) {
    const bool last = step + 1 == k - 1;
    const int q = r - step;
    const size_t b = seg_base[seg_index(q)];
    std::vector<RequestPtr> rs;
    for (const auto& part : seg(q))
      for (const auto& ch : part.chunks) rs.push_back(c.recv(left, at(ag_enc, b, part, ch), part.enc_off + ch.enc_off));
    size_t j = 0;
    for (const auto& part : seg(q)) {
      for (const auto& ch : part.chunks) {
        c.wait(rs[j++]);
        auto in = at(ag_enc, b, part, ch);
        wan_codec::decode_chunk(c, left, in, values(part, ch), false);
        if (!last) sends.push_back(c.send(right, in, part.enc_off + ch.enc_off));
      }
      // The last step brings the last missing segment: the piece is final everywhere.
      if (last && on_final) on_final(part.piece);
    }
  }
  c.wait_all(sends);
}

}  // namespace geoccl::collectives
