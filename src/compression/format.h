// The encoded format every codec shares: a 20-byte little-endian header, then the codec's
// payload. The header lets a decoder check, before touching the payload, that the bytes are a
// codec buffer of this version, of the codec it expects, and exactly as long as the element
// count (and block size, k) say.
//
//   off size field
//     0    2 magic        "GZ" (0x5a47 little-endian)
//     2    1 codec        CodecId
//     3    1 version      kFormatVersion
//     4    8 count        number of fp32 elements encoded (<= kMaxElements)
//    12    4 block        elements per block (int8/int4/int2), per chunk (top-k), 0 for fp16/bf16
//    16    4 k            top-k: values kept per full chunk; int2-sr: the rounding seed; else 0
//
// Payload arrays (u16 halves and indices, f32 scales) are stored little-endian too; they are
// copied as host values, which is why the layer requires a little-endian host (every target the
// project builds for: x86-64, aarch64).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "core/unaligned.h"

namespace geoccl::compression {

static_assert(std::endian::native == std::endian::little,
              "codec payloads are copied as host little-endian values");

enum class CodecId : uint8_t {
  kFp16 = 1,       // IEEE binary16 per element
  kBf16 = 2,       // bfloat16 per element
  kInt8 = 3,       // affine 8-bit block quantization (block_quant.h)
  kInt4 = 4,       // affine 4-bit block quantization (block_quant.h)
  kTopK = 5,       // k largest magnitudes per chunk, fp16 values + u16 indices (topk.h)
  kInt2 = 6,       // affine 2-bit block quantization, round to nearest even (block_quant.h)
  kInt2Sr = 7,     // affine 2-bit block quantization, stochastic rounding (block_quant.h)
  kTopKInt8 = 8,   // top-k, values as sign + 7-bit magnitude codes (topk.h)
  kTopKInt4 = 9,   // top-k, values as sign + 3-bit magnitude codes (topk.h)
  kTopKInt2 = 10,  // top-k, values as sign + 1-bit magnitude codes (topk.h)
};
inline constexpr CodecId kLastCodec = CodecId::kTopKInt2;

inline constexpr uint16_t kFormatMagic = 0x5a47;  // "GZ"
inline constexpr uint8_t kFormatVersion = 2;
inline constexpr size_t kHeaderSize = 20;
// A bound on `count` that keeps every size computation far from overflow (2^48 elements is a
// 1 PiB fp32 buffer); a header above it is malformed.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 48;

struct Header {
  CodecId codec;
  uint64_t count = 0;
  uint32_t block = 0;
  uint32_t k = 0;  // top-k: kept per full chunk; int2-sr: the rounding seed
};

// Writes `h` into out[0, kHeaderSize). `out` must hold at least kHeaderSize bytes.
void write_header(const Header& h, std::span<uint8_t> out);

// Reads and checks the header of an encoded buffer: length, magic, version, a known codec id and
// count <= kMaxElements. Codec-specific fields (block, k, payload length) are the codec's to
// check. Throws Error(kProtocol) saying what is wrong.
Header read_header(std::span<const uint8_t> in);

// Throws Error(kProtocol) unless h.codec == want and in.size() == expected_size: a decoder calls
// it once it knows from the header how long the buffer must be, before reading the payload.
void check_payload(const Header& h, CodecId want, size_t in_size, size_t expected_size);

// Throws Error(kMismatch) unless the destination holds exactly h.count elements.
void check_destination(const Header& h, size_t dst_size);

// Throws Error(kInvalidArgument) unless an encoder's output span is exactly `expected` bytes.
void check_output(std::span<const uint8_t> out, size_t expected);

// Host little-endian loads and stores of payload fields at any alignment (core/unaligned.h).
using core::load_f32;
using core::load_u16;
using core::store_f32;
using core::store_u16;

}  // namespace geoccl::compression
