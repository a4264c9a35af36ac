// fp16 and bf16: each fp32 element rounded to nearest even into 16 bits (core/half.h, the same
// conversions the reduction kernels use), NaN and Inf kept (a NaN stays a NaN; fp16 overflows
// to Inf beyond 65504, bf16 keeps the fp32 range). Payload: `count` u16 values. 2x smaller.
#pragma once

#include <cstddef>
#include <span>

#include "compression/format.h"

namespace geoccl::compression {

// `codec` is kFp16 or kBf16 in every function here.
size_t half_encoded_size(size_t count);

// Encodes src into out, which must be exactly half_encoded_size(src.size()) bytes
// (Error(kInvalidArgument) otherwise).
void half_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out);

// dst = decoded values / dst += decoded values. Error(kProtocol) for a malformed buffer (not
// `codec`, wrong length), Error(kMismatch) when dst.size() differs from the encoded count.
void half_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);
void half_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst);

// The fp16 payload loops on their own, for other codecs' fp16 values (topk.h): n u16 values at
// `out` from src[0, n), and back.
void fp16_store(const float* src, size_t n, uint8_t* out);
void fp16_load(const uint8_t* in, size_t n, float* dst);

}  // namespace geoccl::compression
