#include "compression/codec.h"

#include <algorithm>
#include <cmath>

#include "compression/block_quant.h"
#include "compression/half_codec.h"
#include "compression/topk.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

template <bool kAdd>
void decode_any(std::span<const uint8_t> in, std::span<float> dst) {
  const Header h = read_header(in);
  switch (h.codec) {
    case CodecId::kFp16:
    case CodecId::kBf16:
      return kAdd ? half_decode_add(h.codec, in, dst) : half_decode(h.codec, in, dst);
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt2:
    case CodecId::kInt2Sr:
      return kAdd ? block_quant_decode_add(h.codec, in, dst) : block_quant_decode(h.codec, in, dst);
    case CodecId::kTopK:
    case CodecId::kTopKInt8:
    case CodecId::kTopKInt4:
    case CodecId::kTopKInt2:
      return kAdd ? topk_decode_add(h.codec, in, dst) : topk_decode(h.codec, in, dst);
  }
  throw Error(ErrorCode::kProtocol, "codec buffer: unknown codec");
}

}  // namespace

uint32_t topk_k_for_ratio(double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0))
    throw Error(ErrorCode::kInvalidArgument, "top-k ratio must be in (0, 1]");
  const double k = std::ceil(ratio * kTopKChunk);
  return static_cast<uint32_t>(std::clamp(k, 1.0, double{kTopKChunk}));
}

size_t encoded_size(const CodecSpec& spec, size_t count) {
  switch (spec.codec) {
    case CodecId::kFp16:
    case CodecId::kBf16:
      return half_encoded_size(count);
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt2:
    case CodecId::kInt2Sr:
      return block_quant_encoded_size(spec.codec, count);
    case CodecId::kTopK:
    case CodecId::kTopKInt8:
    case CodecId::kTopKInt4:
    case CodecId::kTopKInt2:
      return topk_encoded_size(spec.codec, count, spec.k);
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown codec");
}

void encode(const CodecSpec& spec, std::span<const float> src, std::span<uint8_t> out) {
  switch (spec.codec) {
    case CodecId::kFp16:
    case CodecId::kBf16:
      return half_encode(spec.codec, src, out);
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kInt2:
    case CodecId::kInt2Sr:
      return block_quant_encode(spec.codec, src, out, spec.seed);
    case CodecId::kTopK:
    case CodecId::kTopKInt8:
    case CodecId::kTopKInt4:
    case CodecId::kTopKInt2:
      return topk_encode(spec.codec, src, spec.k, out);
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown codec");
}

std::vector<uint8_t> encode(const CodecSpec& spec, std::span<const float> src) {
  std::vector<uint8_t> out(encoded_size(spec, src.size()));
  encode(spec, src, out);
  return out;
}

Header peek_header(std::span<const uint8_t> in) { return read_header(in); }

void decode(std::span<const uint8_t> in, std::span<float> dst) { decode_any<false>(in, dst); }
void decode_add(std::span<const uint8_t> in, std::span<float> dst) { decode_any<true>(in, dst); }

void residual(const CodecSpec& spec, std::span<const float> x, std::span<float> out) {
  if (out.size() != x.size())
    throw Error(ErrorCode::kInvalidArgument, "residual: output size differs from input");
  const std::vector<uint8_t> bytes = encode(spec, x);
  std::vector<float> lossy(x.size());
  decode(bytes, lossy);
  float* o = out.data();  // may alias x
  const float* __restrict l = lossy.data();
  const float* xs = x.data();
  for (size_t i = 0; i < x.size(); ++i) o[i] = xs[i] - l[i];  // must vectorize
}

}  // namespace geoccl::compression
