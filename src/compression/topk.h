// Top-k sparsification: the input is cut into chunks of kTopKChunk elements (the last one may be
// shorter) and each chunk keeps exactly min(k, chunk length) elements, those of largest
// magnitude, as u16 indices relative to the chunk (strictly ascending) followed by their values
// in fp16 (core/half.h: round to nearest even, Inf beyond 65504, NaN kept). Elements not kept
// decode to zero; error feedback (residual(), codec.h) carries them to the next step.
//
// Ties in magnitude go to the lower index, and a NaN ranks above every number, so the kept set
// is a function of the input bits alone: every rank encodes the same bytes.
//
// Why 65536: the largest chunk a u16 index addresses, so a top-k piece costs 4 bytes per kept
// value (a ratio of 1 % is 25x smaller than fp32), and the selection sees as much of the buffer
// at once as the index width allows.
#pragma once

#include <cstddef>
#include <span>

#include "compression/format.h"

namespace geoccl::compression {

inline constexpr uint32_t kTopKChunk = 65536;

// Encoded size of `count` elements keeping k per chunk; k must be in [1, kTopKChunk]
// (Error(kInvalidArgument) otherwise).
size_t topk_encoded_size(size_t count, uint32_t k);

// Encodes src into out, which must be exactly topk_encoded_size(src.size(), k) bytes.
void topk_encode(std::span<const float> src, uint32_t k, std::span<uint8_t> out);

// dst = the sparse values (zeros elsewhere) / dst += the kept values. Error(kProtocol) for a
// malformed buffer (other codec, chunk size, k out of range, length, an index out of its chunk
// or not ascending), Error(kMismatch) when dst.size() differs from the encoded count; dst is
// untouched on either.
void topk_decode(std::span<const uint8_t> in, std::span<float> dst);
void topk_decode_add(std::span<const uint8_t> in, std::span<float> dst);

}  // namespace geoccl::compression
