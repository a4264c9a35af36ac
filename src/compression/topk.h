// Top-k sparsification: the input is cut into chunks of kTopKChunk elements (the last one may be
// shorter) and each chunk keeps topk_kept(length, k) elements, those of largest magnitude: k for
// a full chunk, the same share (k / kTopKChunk, rounded, at least 1) of a shorter one, so the
// kept fraction is the ratio whatever the buffer's length. Elements not kept decode to zero;
// error feedback (residual(), codec.h) carries them to the next step.
//
// A chunk of m kept values is m u16 indices relative to the chunk (strictly ascending), then
// the values in one of four forms:
//   topk        fp16 each (core/half.h: round to nearest even, Inf beyond 65504, NaN kept)
//   topk-int8   f32 min, f32 step, then a byte per value: sign (bit 7), magnitude code (0..127)
//   topk-int4   the same with 4-bit codes: sign (bit 3), magnitude code (0..7), two per byte
//   topk-int2   the same with 2-bit codes: sign (bit 1), magnitude code (0..1), four per byte
// The quantized forms fit the kept magnitudes (all at or above the chunk's threshold, so a
// narrow range away from zero) affinely, rounding to nearest (affine.h: L = 127, 7 or 1), and
// keep the sign exactly: |x - x'| <= step/2 plus fp32 rounding, step = (max|x| - min|x|) / L.
// A chunk whose kept values include a NaN or Inf stores min = step = NaN: its kept values
// decode to NaN (a non-finite gradient stays visible). Codes pack as affine.h says; unused high
// bits of a chunk's last byte are zero.
//
// Ties in magnitude go to the lower index, and a NaN ranks above every number, so the kept set
// is a function of the input bits alone: every rank encodes the same bytes.
//
// Why 65536: the largest chunk a u16 index addresses, so an fp16 top-k piece costs 4 bytes per
// kept value (a ratio of 1 % is 100x smaller than fp32; with int8 values 3 bytes, int2 2.25),
// and the selection sees as much of the buffer at once as the index width allows.
#pragma once

#include <cstddef>
#include <span>

#include "compression/format.h"

namespace geoccl::compression {

inline constexpr uint32_t kTopKChunk = 65536;

// Whether `codec` is one of the top-k codecs (kTopK, kTopKInt8, kTopKInt4, kTopKInt2).
bool is_topk(CodecId codec);

// Values kept of a chunk of n <= kTopKChunk elements: round(k * n / kTopKChunk), half up, at
// least 1 (0 for n = 0), so exactly k of a full chunk.
size_t topk_kept(size_t n, uint32_t k);

// Encoded size of `count` elements with `codec` (a top-k codec) keeping k per full chunk; k must
// be in [1, kTopKChunk] (Error(kInvalidArgument) otherwise, or for a codec that is not top-k).
size_t topk_encoded_size(CodecId codec, size_t count, uint32_t k);

// Encodes src into out, which must be exactly topk_encoded_size(codec, src.size(), k) bytes.
void topk_encode(CodecId codec, std::span<const float> src, uint32_t k, std::span<uint8_t> out);

// dst = the sparse values (zeros elsewhere) / dst += the kept values. Error(kProtocol) for a
// malformed buffer (not `codec`, chunk size, k out of range, length, an index out of its chunk
// or not ascending, non-zero padding bits), Error(kMismatch) when dst.size() differs from the
// encoded count; dst is untouched on either.
void topk_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);
void topk_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);

}  // namespace geoccl::compression
