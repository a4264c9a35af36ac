// Compression of the hops of an allreduce that cross domains (regions), docs/compression.md.
//
// Only the hierarchical allreduce's WAN step is compressed: work inside a domain stays in full
// precision, a job on one site is unchanged, and every rank decodes the same bytes in the same
// order, so all ranks still hold bit-identical results. Applies to float32 sum/avg allreduces
// that take the large hierarchical path (more than Config::wan_small_msg_bytes across domains).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace geoccl {

enum class Codec : uint8_t {
  kNone = 0,
  kFp16 = 1,       // IEEE binary16 per element (2x)
  kBf16 = 2,       // bfloat16 per element (2x)
  kInt8 = 3,       // 8-bit affine quantization per block of 256 (3.9x)
  kInt4 = 4,       // 4-bit affine quantization per block of 256 (7.5x)
  kTopK = 5,       // the k largest magnitudes per chunk of 65536, fp16 values + u16 indices
  kInt2 = 6,       // 2-bit affine quantization per block of 256, round to nearest (14.2x)
  kInt2Sr = 7,     // int2 with stochastic rounding: unbiased, seeded per call (14.2x)
  kTopKInt8 = 8,   // top-k with 8-bit values (sign + magnitude, a scale per chunk)
  kTopKInt4 = 9,   // top-k with 4-bit values
  kTopKInt2 = 10,  // top-k with 2-bit values
};

// How the compressed WAN step runs among the k domains' owners of a piece.
//   allgather: each owner encodes its domain's partial sum once and sends it to every other
//              owner; each decodes all k in domain order and adds (one quantization per value,
//              (k-1) encoded pieces per uplink).
//   ring:      reduce-scatter whose partial sums are re-encoded at every hop, then an allgather
//              of the encoded final segments (2(k-1)/k encoded pieces per uplink; k-1
//              quantizations of a partial sum).
//   auto:      docs/compression.md says what each codec gets, and why (measured).
enum class CompressedAlgo : uint8_t { kAuto = 0, kAllgather = 1, kRing = 2 };

struct Compression {
  Codec codec = Codec::kNone;
  double topk_ratio = 0;  // top-k codecs only: fraction of the elements kept, in (0, 1]
  CompressedAlgo algo = CompressedAlgo::kAuto;

  // "none", "fp16", "bf16", "int8", "int4", "int2", "int2-sr", or "topk:RATIO",
  // "topk-int8:RATIO", "topk-int4:RATIO", "topk-int2:RATIO" (RATIO in (0, 1], e.g. topk:0.01),
  // optionally followed by "@allgather" or "@ring". Throws Error(kInvalidArgument) otherwise.
  static Compression parse(std::string_view text);
  // The canonical spelling: parse(name()) == *this.
  std::string name() const;
  bool enabled() const { return codec != Codec::kNone; }
  bool is_topk() const {
    return codec == Codec::kTopK || codec == Codec::kTopKInt8 || codec == Codec::kTopKInt4 ||
           codec == Codec::kTopKInt2;
  }
  bool operator==(const Compression&) const = default;
};

// What the compressed allreduces of one communicator did on this rank.
struct CompressionStats {
  uint64_t calls = 0;             // allreduces whose WAN step was compressed
  uint64_t elements_encoded = 0;  // fp32 values this rank encoded for the WAN
  uint64_t bytes_encoded = 0;     // the encodings' size (what this rank sent per destination)
  uint64_t feedback_keys = 0;     // error-feedback residuals held
  uint64_t feedback_bytes = 0;    // their memory
};

}  // namespace geoccl
