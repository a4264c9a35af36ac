#include "compression/block_quant.h"

#include <algorithm>
#include <string>

#include "compression/affine.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

constexpr size_t kBlockHeader = 8;  // f32 min, f32 step

// Bits per code of a block codec; Error(kInvalidArgument) for any other codec.
uint32_t bits_of(CodecId codec) {
  switch (codec) {
    case CodecId::kInt8:
      return 8;
    case CodecId::kInt4:
      return 4;
    case CodecId::kInt2:
    case CodecId::kInt2Sr:
      return 2;
    default:
      break;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "block quantization: codec must be int8, int4, int2 or int2-sr");
}

size_t block_bytes(uint32_t bits, size_t n) { return kBlockHeader + affine::packed_bytes(bits, n); }

void encode_block(const float* x, size_t n, uint32_t bits, affine::Rounding rounding, uint32_t key,
                  uint8_t* out) {
  uint8_t codes[kQuantBlock];
  const affine::Fit fit = affine::quantize(x, n, (1u << bits) - 1, rounding, key, codes);
  store_f32(out, fit.min);
  store_f32(out + 4, fit.step);
  affine::pack(bits, codes, n, out + kBlockHeader);
}

template <bool kAdd>
void decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  const uint32_t bits = bits_of(codec);
  const Header h = read_header(in);
  if (h.codec == codec && (h.block != kQuantBlock || (h.k != 0 && codec != CodecId::kInt2Sr)))
    throw Error(ErrorCode::kProtocol, "block quantization: block size must be " +
                                          std::to_string(kQuantBlock) + " and k zero");
  check_payload(h, codec, in.size(), block_quant_encoded_size(codec, h.count));
  check_destination(h, dst.size());
  const size_t count = dst.size();
  const size_t tail = count % kQuantBlock;
  if (tail && !affine::padding_is_zero(
                  bits, in.data() + in.size() - affine::packed_bytes(bits, tail), tail))
    throw Error(ErrorCode::kProtocol, "block quantization: non-zero padding bits");
  const uint8_t* p = in.data() + kHeaderSize;
  uint8_t codes[kQuantBlock];
  for (size_t off = 0; off < count; off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, count - off);
    const uint8_t* c = p + kBlockHeader;
    if (bits != 8) {
      affine::unpack(bits, c, n, codes);
      c = codes;
    }
    affine::dequantize<kAdd>(c, n, {load_f32(p), load_f32(p + 4)}, dst.data() + off);
    p += block_bytes(bits, n);
  }
}

}  // namespace

size_t block_quant_encoded_size(CodecId codec, size_t count) {
  const uint32_t bits = bits_of(codec);
  const size_t full = count / kQuantBlock, rest = count % kQuantBlock;
  size_t size = kHeaderSize + full * block_bytes(bits, kQuantBlock);
  if (rest) size += block_bytes(bits, rest);
  return size;
}

void block_quant_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out,
                        uint32_t seed) {
  const uint32_t bits = bits_of(codec);
  const bool sr = codec == CodecId::kInt2Sr;
  check_output(out, block_quant_encoded_size(codec, src.size()));
  write_header({codec, src.size(), kQuantBlock, sr ? seed : 0}, out);
  const auto rounding = sr ? affine::Rounding::kStochastic : affine::Rounding::kNearest;
  uint8_t* p = out.data() + kHeaderSize;
  for (size_t off = 0; off < src.size(); off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, src.size() - off);
    const uint32_t key = sr ? affine::dither_key(seed, off / kQuantBlock) : 0;
    encode_block(src.data() + off, n, bits, rounding, key, p);
    p += block_bytes(bits, n);
  }
}

void block_quant_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<false>(codec, in, dst);
}
void block_quant_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<true>(codec, in, dst);
}

}  // namespace geoccl::compression
