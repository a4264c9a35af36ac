// One entry point for every codec: a CodecSpec names the codec (and k for top-k, the seed for
// stochastic rounding), and the functions here dispatch to half_codec.h, block_quant.h and
// topk.h. Decoders take the codec from the buffer's header. residual() is the error-feedback
// helper: what the codec loses.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "compression/format.h"

namespace geoccl::compression {

struct CodecSpec {
  CodecId codec = CodecId::kFp16;
  uint32_t k =
      0;  // top-k codecs only: values kept per full chunk of kTopKChunk, in [1, kTopKChunk]
  uint32_t seed = 0;  // int2-sr only (others ignore it): the rounding seed, stored in the header
};

// Values to keep per full top-k chunk for a fraction `ratio` in (0, 1] of the elements:
// ceil(ratio * kTopKChunk), at least 1. A shorter chunk keeps the same share (topk_kept()).
uint32_t topk_k_for_ratio(double ratio);

// Bytes the encoding of `count` elements takes, header included. Error(kInvalidArgument) for a
// bad spec (unknown codec, top-k k out of range).
size_t encoded_size(const CodecSpec& spec, size_t count);

// Encodes src into out (exactly encoded_size(spec, src.size()) bytes, else kInvalidArgument).
void encode(const CodecSpec& spec, std::span<const float> src, std::span<uint8_t> out);
std::vector<uint8_t> encode(const CodecSpec& spec, std::span<const float> src);

// Reads the header only (Error(kProtocol) if malformed): lets a receiver size its destination.
Header peek_header(std::span<const uint8_t> in);

// dst = decode(in) / dst += decode(in), for a buffer of any codec. Error(kProtocol) for a
// malformed buffer, Error(kMismatch) when dst.size() is not the encoded element count.
void decode(std::span<const uint8_t> in, std::span<float> dst);
void decode_add(std::span<const uint8_t> in, std::span<float> dst);

// out = x - decode(encode(x)): the part of x the codec drops, which error feedback adds to the
// next input. out.size() must equal x.size() (Error(kInvalidArgument)); out may alias x.
void residual(const CodecSpec& spec, std::span<const float> x, std::span<float> out);

}  // namespace geoccl::compression
