// The compressed WAN step of an allreduce (geoccl/compression.h): what the hierarchical
// allreduce runs among the k domains' owners of its pieces instead of a full-precision ring.
//
// The input is a list of pieces of fp32 memory, the same number with the same lengths on every
// member; each member holds its domain's partial sum in them, and afterwards every member holds
// the same final sum in them, bit for bit: every final value is decoded from the same bytes and
// added in the same order on every member. Pieces are cut into chunks of chunk_bytes()/4
// elements, each encoded on its own (one frame each), so encoding, the WAN and decoding overlap.
//
// Error feedback: a piece's `residual` (empty: none) has the piece's length; before this member
// encodes a value of the piece it adds the residual there, and afterwards stores what the codec
// dropped. Every element of a piece is encoded exactly once by each member in both algorithms,
// so one residual per element suffices.
//
// Hooks as in the full-precision ring (collectives.h): before_local(p) once per piece, in order,
// before this member first reads piece p; on_final(p) once per piece, in order, once piece p
// holds its final value. A buffer that does not decode (a peer that sent garbage) fails the
// group with kProtocol.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "collectives/op_context.h"
#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "geoccl/compression.h"

namespace geoccl::collectives {

struct FloatPiece {
  std::span<float> data;
  std::span<float> residual;  // empty, or data.size() elements
};

// What the compressed steps of one communicator did on this rank (CompressionStats).
struct CompressionCounters {
  std::atomic<uint64_t> calls{0}, elements{0}, bytes{0};
};

using PieceHook = std::function<void(size_t piece)>;

// What a compressed allreduce needs from the API layer.
struct WanCompression {
  compression::CodecSpec spec;
  CompressedAlgo algo = CompressedAlgo::kAuto;  // resolved per call from the domain count
  std::string name;                             // Compression::name(), for logs
  compression::FeedbackStore* feedback = nullptr;  // with a non-empty key: error feedback
  std::string key;
  CompressionCounters* counters = nullptr;

  // The form to run among k members: allgather for the top-k codecs (their sparse sums would be
  // re-sparsified at every ring hop) and for k = 2 (the same bytes as a ring, one quantization
  // instead of two, half the WAN latencies); the ring otherwise (2(k-1)/k encodings per uplink
  // against k-1). docs/compression.md has the measurements.
  CompressedAlgo resolve(int k) const;
};

// Allgather of encoded pieces, then a local reduction in member order (one quantization per
// value; each member's uplink carries k-1 encodings of its pieces).
void compressed_allgather_allreduce(OpContext& c, const compression::CodecSpec& spec,
                                    const std::vector<FloatPiece>& pieces,
                                    CompressionCounters* counters, const PieceHook& before_local = {},
                                    const PieceHook& on_final = {});
// Ring: a reduce-scatter whose partial sums are re-encoded at every hop, then an allgather that
// forwards the encoded final segments unchanged (2(k-1)/k encodings per uplink).
void compressed_ring_allreduce(OpContext& c, const compression::CodecSpec& spec,
                               const std::vector<FloatPiece>& pieces, CompressionCounters* counters,
                               const PieceHook& before_local = {}, const PieceHook& on_final = {});

// Shared by both: one chunk's encoding with error feedback, and a decode that fails the group on
// malformed bytes.
namespace wan_codec {

// x += residual (if any); out = encode(x); residual = x - decode(out). Counts into `counters`.
void encode_chunk(const compression::CodecSpec& spec, std::span<float> x,
                  std::span<float> residual, std::span<uint8_t> out, CompressionCounters* counters);

// `spec` with the seed of one encoding, for stochastic rounding (int2-sr; any other codec is
// returned unchanged): a hash of spec.seed, the operation's sequence number, the encoding
// member's global rank and the encoding's offset in that member's encoded stream of the
// operation. Every encoding of a run thus rounds differently, and a rerun of the same program
// encodes the same bytes.
compression::CodecSpec seeded(const compression::CodecSpec& spec, uint64_t op_seq, int rank,
                              uint64_t offset);
// dst = decode(in) (add: dst += decode(in)); on a malformed buffer aborts the group (kProtocol,
// naming the peer) and throws.
void decode_chunk(OpContext& c, int peer, std::span<const uint8_t> in, std::span<float> dst, bool add);

// Chunks of one element range: (offset, length) in elements, and each one's encoded bytes.
struct Chunk {
  size_t begin, len;    // elements, relative to the range
  size_t enc_off, enc;  // bytes, in the range's encoded stream
};
std::vector<Chunk> chunks_of(const compression::CodecSpec& spec, size_t count, size_t chunk_elems,
                             size_t* encoded_total);

}  // namespace wan_codec
}  // namespace geoccl::collectives
