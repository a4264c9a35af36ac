// 8-, 4- and 2-bit affine block quantization of fp32. The input is cut into blocks of
// kQuantBlock elements (the last one may be shorter); each block stores its minimum and a
// step, both fp32, and one code per element (affine.h):
//
//   step = (max - min) / L        L = 255 (int8), 15 (int4) or 3 (int2, int2-sr)
//   code = min(round_half_even((x - min) * (1 / step)), L)       int8, int4, int2
//   code = min(floor((x - min) * (1 / step) + u), L)             int2-sr, u in [0, 1)
//   x'   = min + code * step
//
// Error bound, rounding to nearest: |x - x'| <= step/2, plus the fp32 rounding of these few
// operations: <= step/2 * (1 + 2^-12) + 2 ulp(max |x| of the block); stochastic: < step (plus
// the same rounding), and E[x'] = x (tests/unit/compression_test.cc).
//
// int2-sr's u is a hash of the seed (the header's k field), the block's index in the buffer and
// the element's index in the block (affine::dither): the same input and seed give the same
// bytes on every machine. A caller that encodes the same values repeatedly (a training step)
// passes a fresh seed each time, so that each value's rounding errors average out over the
// steps instead of repeating.
//
// Block payload: f32 min, f32 step, then the codes packed as affine.h says (int8 one byte each,
// int4 two per byte, int2 four per byte; unused high bits of the last byte zero). A block
// holding a NaN or Inf stores min = step = NaN and zero codes, so all of it decodes to NaN: a
// non-finite gradient stays visible (loss scalers look for it).
//
// Why affine (min + step) rather than symmetric absmax: on gaussian data, blocks of 256, its
// RMS error is 8 % lower at 8 bits and 13.5 % lower at 4 bits, for 4 more bytes per block
// (docs/compression.md). Why 256: the 8 bytes per block cost 3 % (int8) / 6 % (int4) / 12.5 %
// (int2) of the payload, and smaller blocks gain little (int4 RMS error 0.109 at 256, 0.100 at
// 128, 0.089 at 64, while the overhead doubles each time).
#pragma once

#include <cstddef>
#include <span>

#include "compression/format.h"

namespace geoccl::compression {

inline constexpr uint32_t kQuantBlock = 256;

// `codec` is kInt8, kInt4, kInt2 or kInt2Sr in every function here (Error(kInvalidArgument)
// otherwise).
size_t block_quant_encoded_size(CodecId codec, size_t count);

// Encodes src into out, which must be exactly block_quant_encoded_size(codec, src.size()) bytes.
// `seed`: kInt2Sr's rounding seed, stored in the header; the other codecs ignore it.
void block_quant_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out,
                        uint32_t seed);

// dst = decoded values / dst += decoded values. Error(kProtocol) for a malformed buffer (other
// codec, block size, length, non-zero k but for int2-sr's seed, non-zero padding bits),
// Error(kMismatch) when dst.size() differs from the encoded count; dst is untouched on either.
void block_quant_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);
void block_quant_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);

}  // namespace geoccl::compression
