#include "compression/block_quant.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>

#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

constexpr size_t kBlockHeader = 8;  // f32 min, f32 step

bool is_int4(CodecId codec) {
  if (codec != CodecId::kInt8 && codec != CodecId::kInt4)
    throw Error(ErrorCode::kInvalidArgument, "block quantization: codec must be int8 or int4");
  return codec == CodecId::kInt4;
}

size_t code_bytes(bool int4, size_t n) { return int4 ? (n + 1) / 2 : n; }

// Orders fp32 bit patterns as signed integers in the order of the values (-0 below +0, NaNs
// beyond the infinities), so a block's min and max are integer reductions, which vectorize
// without -ffast-math and do not depend on the order of evaluation.
inline int32_t order_key(float x) {
  const int32_t b = std::bit_cast<int32_t>(x);
  return b ^ ((b >> 31) & 0x7fffffff);
}
inline float from_order_key(int32_t k) {
  return std::bit_cast<float>(k ^ ((k >> 31) & 0x7fffffff));
}

// Round half to even for 0 <= y < 2^22: adding 1.5 * 2^23 leaves the integer part in the
// mantissa, rounded by the FPU's (default) nearest-even mode.
constexpr float kRoundMagic = 12582912.0f;

// codes[i] = min(round((x[i] - mn) * inv), levels). x >= mn, so the product is >= 0; the
// clamp only guards the last ulp at the top. Integer clamp: a float one would be a branch the
// vectorizer refuses (NaN semantics).
void quantize(const float* __restrict x, size_t n, float mn, float inv, int32_t levels,
              uint8_t* __restrict codes) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const float y = (x[i] - mn) * inv;
    const int32_t q = static_cast<int32_t>((y + kRoundMagic) - kRoundMagic);
    codes[i] = static_cast<uint8_t>(q < levels ? q : levels);
  }
}

// The same in double, for the blocks the fp32 path cannot take: a step below FLT_MIN (1/step
// overflows) or a range beyond FLT_MAX (x - min overflows). Rare; scalar is fine.
void quantize_wide(const float* x, size_t n, float mn, float step, float levels, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    double y = step > 0.0f ? (double{x[i]} - mn) / step : 0.0;
    y = std::clamp(y, 0.0, double{levels});
    codes[i] = static_cast<uint8_t>(std::nearbyint(y));
  }
}

void encode_block(const float* __restrict x, size_t n, bool int4, uint8_t* __restrict out) {
  int32_t lo = std::numeric_limits<int32_t>::max();
  int32_t hi = std::numeric_limits<int32_t>::min();
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const int32_t k = order_key(x[i]);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  }
  uint8_t* codes_out = out + kBlockHeader;
  const size_t nbytes = code_bytes(int4, n);
  if (hi >= order_key(std::numeric_limits<float>::infinity()) ||
      lo <= order_key(-std::numeric_limits<float>::infinity())) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    store_f32(out, nan);
    store_f32(out + 4, nan);
    std::fill_n(codes_out, nbytes, uint8_t{0});
    return;
  }
  const float mn = from_order_key(lo), mx = from_order_key(hi);
  const float levels = int4 ? 15.0f : 255.0f;
  // (max - min)/L: one rounding. A range beyond FLT_MAX (values near +-3.4e38 of both signs)
  // takes max/L - min/L instead, finite for every finite block.
  const float range = mx - mn;
  const float step = range <= FLT_MAX ? range / levels : mx / levels - mn / levels;
  store_f32(out, mn);
  store_f32(out + 4, step);
  uint8_t codes[kQuantBlock];
  if (step == 0.0f)  // constant block (all zeros, say): every code 0 decodes to min exactly
    std::fill_n(codes, n, uint8_t{0});
  else if (step >= FLT_MIN && range <= FLT_MAX)
    quantize(x, n, mn, 1.0f / step, int4 ? 15 : 255, codes);
  else
    quantize_wide(x, n, mn, step, levels, codes);
  if (!int4) {
    std::copy_n(codes, n, codes_out);
    return;
  }
  const size_t pairs = n / 2;
  for (size_t j = 0; j < pairs; ++j)  // must vectorize
    codes_out[j] = static_cast<uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
  if (n % 2) codes_out[pairs] = codes[n - 1];
}

template <bool kAdd>
void dequantize(const uint8_t* __restrict codes, size_t n, float mn, float step,
                float* __restrict dst) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const float v = mn + static_cast<float>(codes[i]) * step;
    dst[i] = kAdd ? dst[i] + v : v;
  }
}

template <bool kAdd>
void decode_block(const uint8_t* __restrict in, size_t n, bool int4, float* __restrict dst) {
  const float mn = load_f32(in), step = load_f32(in + 4);
  const uint8_t* codes_in = in + kBlockHeader;
  if (!int4) return dequantize<kAdd>(codes_in, n, mn, step, dst);
  uint8_t codes[kQuantBlock];
  const size_t pairs = n / 2;
  for (size_t j = 0; j < pairs; ++j) {  // must vectorize
    codes[2 * j] = codes_in[j] & 0x0f;
    codes[2 * j + 1] = codes_in[j] >> 4;
  }
  if (n % 2) codes[n - 1] = codes_in[pairs] & 0x0f;
  dequantize<kAdd>(codes, n, mn, step, dst);
}

template <bool kAdd>
void decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  const bool int4 = is_int4(codec);
  const Header h = read_header(in);
  if (h.codec == codec && (h.block != kQuantBlock || h.k != 0))
    throw Error(ErrorCode::kProtocol, "block quantization: block size must be " +
                                          std::to_string(kQuantBlock) + " and k zero");
  check_payload(h, codec, in.size(), block_quant_encoded_size(codec, h.count));
  check_destination(h, dst.size());
  const size_t count = dst.size();
  if (int4 && count % kQuantBlock % 2 == 1 && (in.back() & 0xf0) != 0)
    throw Error(ErrorCode::kProtocol, "int4: non-zero padding nibble");
  const uint8_t* p = in.data() + kHeaderSize;
  for (size_t off = 0; off < count; off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, count - off);
    decode_block<kAdd>(p, n, int4, dst.data() + off);
    p += kBlockHeader + code_bytes(int4, n);
  }
}

}  // namespace

size_t block_quant_encoded_size(CodecId codec, size_t count) {
  const bool int4 = is_int4(codec);
  const size_t full = count / kQuantBlock, rest = count % kQuantBlock;
  size_t size = kHeaderSize + full * (kBlockHeader + code_bytes(int4, kQuantBlock));
  if (rest) size += kBlockHeader + code_bytes(int4, rest);
  return size;
}

void block_quant_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out) {
  const bool int4 = is_int4(codec);
  check_output(out, block_quant_encoded_size(codec, src.size()));
  write_header({codec, src.size(), kQuantBlock, 0}, out);
  uint8_t* p = out.data() + kHeaderSize;
  for (size_t off = 0; off < src.size(); off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, src.size() - off);
    encode_block(src.data() + off, n, int4, p);
    p += kBlockHeader + code_bytes(int4, n);
  }
}

void block_quant_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<false>(codec, in, dst);
}
void block_quant_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<true>(codec, in, dst);
}

}  // namespace geoccl::compression
