// int8 and 4-bit affine block quantization of fp32. The input is cut into blocks of
// kQuantBlock elements (the last one may be shorter); each block stores its minimum and a
// step, both fp32, and one code per element:
//
//   step = (max - min) / L        L = 255 (int8) or 15 (int4)
//   code = min(round_half_even((x - min) * (1 / step)), L)
//   x'   = min + code * step
//
// Error bound: |x - x'| <= step/2, plus the fp32 rounding of these few operations:
// <= step/2 * (1 + 2^-12) + 2 ulp(max |x| of the block) (tests/unit/compression_test.cc).
//
// Block payload: f32 min, f32 step, then the codes: one byte each (int8), or two per byte
// (int4: element 2j in the low nibble, 2j+1 in the high one; an odd block's last high nibble
// is zero). A block holding a NaN or Inf stores min = step = NaN and zero codes, so all of it
// decodes to NaN: a non-finite gradient stays visible (loss scalers look for it).
//
// Why affine (min + step) rather than symmetric absmax: on gaussian data, blocks of 256, its
// RMS error is 8 % lower at 8 bits and 13.5 % lower at 4 bits, for 4 more bytes per block
// (docs/compression.md). Why 256: the 8 bytes per block cost 3 % (int8) / 6 % (int4) of the
// payload, and smaller blocks gain little (int4 RMS error 0.109 at 256, 0.100 at 128, 0.089 at
// 64, while the overhead doubles each time).
//
// Deterministic: plain IEEE fp32 operations in a fixed order (the layer is built with
// -ffp-contract=off and never with -ffast-math), so every machine encodes the same bytes.
#pragma once

#include <cstddef>
#include <span>

#include "compression/format.h"

namespace geoccl::compression {

inline constexpr uint32_t kQuantBlock = 256;

// `codec` is kInt8 or kInt4 in every function here (Error(kInvalidArgument) otherwise).
size_t block_quant_encoded_size(CodecId codec, size_t count);

// Encodes src into out, which must be exactly block_quant_encoded_size(codec, src.size()) bytes.
void block_quant_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out);

// dst = decoded values / dst += decoded values. Error(kProtocol) for a malformed buffer (other
// codec, block size, length, non-zero k or padding), Error(kMismatch) when dst.size() differs
// from the encoded count.
void block_quant_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);
void block_quant_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);

}  // namespace geoccl::compression
