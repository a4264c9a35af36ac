// Codecs (src/compression): round trips and error bounds, exact bytes of small inputs (the
// format must not drift), special values, top-k selection and ties, decode_add, residuals, and
// malformed buffers rejected with typed errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "compression/block_quant.h"
#include "error_code.h"
#include "compression/codec.h"
#include "compression/half_codec.h"
#include "compression/topk.h"
#include "core/half.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> round_trip(const CodecSpec& spec, const std::vector<float>& x) {
  const auto bytes = encode(spec, x);
  EXPECT_EQ(bytes.size(), encoded_size(spec, x.size()));
  std::vector<float> out(x.size(), 12345.0f);
  decode(bytes, out);
  return out;
}

std::vector<uint8_t> header_bytes(uint8_t codec, uint64_t count, uint32_t block, uint32_t k) {
  std::vector<uint8_t> h = {0x47, 0x5a, codec, kFormatVersion};
  for (int i = 0; i < 8; ++i) h.push_back(static_cast<uint8_t>(count >> (8 * i)));
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<uint8_t>(block >> (8 * i)));
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<uint8_t>(k >> (8 * i)));
  return h;
}

void append(std::vector<uint8_t>* v, std::initializer_list<uint8_t> b) {
  v->insert(v->end(), b.begin(), b.end());
}

using geoccl::test::code_of;

const CodecSpec kAll[] = {{CodecId::kFp16, 0},       {CodecId::kBf16, 0},
                          {CodecId::kInt8, 0},       {CodecId::kInt4, 0},
                          {CodecId::kTopK, 655},     {CodecId::kInt2, 0},
                          {CodecId::kInt2Sr, 0, 7},  {CodecId::kTopKInt8, 655},
                          {CodecId::kTopKInt4, 655}, {CodecId::kTopKInt2, 655}};

const CodecId kTopKCodecs[] = {CodecId::kTopK, CodecId::kTopKInt8, CodecId::kTopKInt4,
                               CodecId::kTopKInt2};

// Bits of a top-k codec's value codes (0: fp16 values).
uint32_t topk_bits(CodecId c) {
  return c == CodecId::kTopKInt8   ? 8
         : c == CodecId::kTopKInt4 ? 4
         : c == CodecId::kTopKInt2 ? 2
                                   : 0;
}

// Bytes of a top-k chunk keeping m values.
size_t topk_chunk_bytes(CodecId c, size_t m) {
  const uint32_t bits = topk_bits(c);
  return 2 * m + (bits == 0 ? 2 * m : 8 + (m * bits + 7) / 8);
}

// ---- exact bytes ----

TEST(CompressionFormat, Fp16Bytes) {
  std::vector<uint8_t> want = header_bytes(1, 3, 0, 0);
  append(&want, {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38});  // 1.0, -2.0, 0.5
  EXPECT_EQ(encode({CodecId::kFp16}, std::vector<float>{1.0f, -2.0f, 0.5f}), want);
}

TEST(CompressionFormat, Bf16BytesRoundHalfToEven) {
  // 1 + 2^-8 lies halfway between bf16 0x3f80 and 0x3f81 (goes to the even 0x3f80); 1 + 3*2^-8
  // between 0x3f81 and 0x3f82 (goes to 0x3f82).
  std::vector<uint8_t> want = header_bytes(2, 3, 0, 0);
  append(&want, {0x80, 0x3f, 0x80, 0x3f, 0x82, 0x3f});
  EXPECT_EQ(encode({CodecId::kBf16}, std::vector<float>{1.0f, 1.00390625f, 1.01171875f}), want);
}

TEST(CompressionFormat, Int8Bytes) {
  // min 0, max 255: step = 255/255 - 0 = 1 exactly; 2.5 and 3.5 are ties (to even: 2 and 4).
  std::vector<uint8_t> want = header_bytes(3, 6, 256, 0);
  append(&want, {0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3f, 0, 255, 51, 127, 2, 4});
  EXPECT_EQ(encode({CodecId::kInt8}, std::vector<float>{0, 255, 51.2f, 126.6f, 2.5f, 3.5f}), want);
}

TEST(CompressionFormat, Int4BytesOddLength) {
  // min 0, max 15: step 1. Codes 0 15 | 8 3 | 1 (low nibble first, padding nibble zero).
  std::vector<uint8_t> want = header_bytes(4, 5, 256, 0);
  append(&want, {0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3f, 0xf0, 0x38, 0x01});
  EXPECT_EQ(encode({CodecId::kInt4}, std::vector<float>{0, 15, 7.6f, 3.2f, 1}), want);
}

// k = 26215 of 65536 keeps round(26215 * 5 / 65536) = 2 of 5 elements.
constexpr uint32_t kTwoOfFive = 26215;

TEST(CompressionFormat, Int2Bytes) {
  // min 0, max 3: step 1. Codes 0 3 1 2 | 2 (2.5 is a tie: to even), element 4j in bits 0-1.
  std::vector<uint8_t> want = header_bytes(6, 5, 256, 0);
  append(&want, {0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3f, 0x9c, 0x02});
  EXPECT_EQ(encode({CodecId::kInt2}, std::vector<float>{0, 3, 1.4f, 1.6f, 2.5f}), want);
}

TEST(CompressionFormat, Int2SrBytesFollowTheSeed) {
  // Values on the grid (min + code * step) round to themselves whatever the dither; the seed
  // travels in the header's k field.
  const std::vector<float> grid = {0, 3, 1, 2, 2};
  std::vector<uint8_t> want = header_bytes(7, 5, 256, 0xa1b2c3d4);
  append(&want, {0, 0, 0, 0, 0x00, 0x00, 0x80, 0x3f, 0x9c, 0x02});
  EXPECT_EQ(encode({CodecId::kInt2Sr, 0, 0xa1b2c3d4}, grid), want);
  // Off the grid: the same seed gives the same bytes, another seed other codes.
  const auto x = gaussian(4096, 31);
  const auto a = encode({CodecId::kInt2Sr, 0, 1}, x);
  EXPECT_EQ(a, encode({CodecId::kInt2Sr, 0, 1}, x));
  const auto b = encode({CodecId::kInt2Sr, 0, 2}, x);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_FALSE(std::equal(a.begin() + kHeaderSize, a.end(), b.begin() + kHeaderSize));
  // The deterministic codecs ignore a seed.
  EXPECT_EQ(encode({CodecId::kInt2, 0, 5}, x), encode({CodecId::kInt2}, x));
}

TEST(CompressionFormat, TopKQuantizedBytes) {
  // Kept -3 and 3: magnitudes 3 and 3 (min 3 = 0x40400000, step 0); codes carry the sign only.
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -0.25f};
  const std::pair<CodecId, uint8_t> forms[] = {
      {CodecId::kTopKInt8, 0x80}, {CodecId::kTopKInt4, 0x08}, {CodecId::kTopKInt2, 0x02}};
  for (auto [c, packed] : forms) {
    std::vector<uint8_t> want = header_bytes(static_cast<uint8_t>(c), 5, 65536, kTwoOfFive);
    append(&want, {1, 0, 2, 0, 0x00, 0x00, 0x40, 0x40, 0, 0, 0, 0, packed});
    if (c == CodecId::kTopKInt8) want.push_back(0x00);  // the second value's byte
    EXPECT_EQ(encode({c, kTwoOfFive}, x), want) << static_cast<int>(c);
  }
  // Everything kept (k = 65536): magnitudes 1 2 4 5, min 1, step 4 (one magnitude bit). Codes
  // (sign in bit 1): 0, 2|0, 1, 2|1, packed 0b11'01'10'00; decoded 1, -1, 5, -5.
  const std::vector<float> y = {1, -2, 4, -5};
  std::vector<uint8_t> want = header_bytes(10, 4, 65536, 65536);
  append(&want, {0, 0, 1, 0, 2, 0, 3, 0, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0x40, 0xd8});
  EXPECT_EQ(encode({CodecId::kTopKInt2, 65536}, y), want);
  EXPECT_EQ(round_trip({CodecId::kTopKInt2, 65536}, y), (std::vector<float>{1, -1, 5, -5}));
}

TEST(CompressionFormat, TopKBytesTiesToLowerIndex) {
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -0.25f};
  std::vector<uint8_t> want = header_bytes(5, 5, 65536, kTwoOfFive);
  append(&want, {1, 0, 2, 0, 0x00, 0xc2, 0x00, 0x42});  // indices 1, 2; values -3, 3
  EXPECT_EQ(encode({CodecId::kTopK, kTwoOfFive}, x), want);
  want = header_bytes(5, 5, 65536, 1);
  append(&want, {1, 0, 0x00, 0xc2});  // the tie |-3| = |3| goes to index 1
  EXPECT_EQ(encode({CodecId::kTopK, 1}, x), want);
}

TEST(CompressionFormat, EncodedSizes) {
  EXPECT_EQ(encoded_size({CodecId::kFp16}, 0), kHeaderSize);
  EXPECT_EQ(encoded_size({CodecId::kBf16}, 1000), kHeaderSize + 2000);
  EXPECT_EQ(encoded_size({CodecId::kInt8}, 512), kHeaderSize + 2 * (8 + 256));
  EXPECT_EQ(encoded_size({CodecId::kInt8}, 513), kHeaderSize + 2 * (8 + 256) + 8 + 1);
  EXPECT_EQ(encoded_size({CodecId::kInt4}, 513), kHeaderSize + 2 * (8 + 128) + 8 + 1);
  EXPECT_EQ(encoded_size({CodecId::kInt4}, 258), kHeaderSize + (8 + 128) + 8 + 1);
  // The tail of 100 keeps round(655 * 100 / 65536) = 1.
  EXPECT_EQ(encoded_size({CodecId::kTopK, 655}, 65536 * 2 + 100), kHeaderSize + 4 * (655 * 2 + 1));
  EXPECT_EQ(encoded_size({CodecId::kInt2}, 513), kHeaderSize + 2 * (8 + 64) + 8 + 1);
  EXPECT_EQ(encoded_size({CodecId::kInt2Sr, 0, 9}, 259), kHeaderSize + (8 + 64) + 8 + 1);
  EXPECT_EQ(encoded_size({CodecId::kTopKInt8, 655}, 65536 * 2 + 100),
            kHeaderSize + 2 * (2 * 655 + 8 + 655) + 2 + 8 + 1);
  EXPECT_EQ(encoded_size({CodecId::kTopKInt4, 655}, 65536), kHeaderSize + 2 * 655 + 8 + 328);
  EXPECT_EQ(encoded_size({CodecId::kTopKInt2, 655}, 65536), kHeaderSize + 2 * 655 + 8 + 164);
  EXPECT_EQ(encoded_size({CodecId::kTopKInt2, 655}, 0), kHeaderSize);
  EXPECT_EQ(encoded_size({CodecId::kTopK, 655}, 0), kHeaderSize);
  EXPECT_EQ(topk_k_for_ratio(0.01), 656u);
  EXPECT_EQ(topk_k_for_ratio(1e-9), 1u);
  EXPECT_EQ(code_of([] { encoded_size({CodecId::kTopK, 0}, 10); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] {
              encoded_size({CodecId::kTopK, 65537}, 10);
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { topk_k_for_ratio(0.0); }), ErrorCode::kInvalidArgument);
}

// ---- round trips and error bounds ----

TEST(CompressionHalf, RoundTripMatchesCoreConversions) {
  auto x = gaussian(10001, 1, 100.0f);
  x.insert(x.end(), {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e6f, -1e6f, 1e-6f, 1e-40f, 65504.0f});
  const auto h = round_trip({CodecId::kFp16}, x);
  const auto b = round_trip({CodecId::kBf16}, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const float wh = core::half_to_float(core::float_to_half(x[i]));
    const float wb = core::bf16_to_float(core::float_to_bf16(x[i]));
    if (!std::isnan(wh)) {
      EXPECT_EQ(std::bit_cast<uint32_t>(h[i]), std::bit_cast<uint32_t>(wh));
    }
    EXPECT_EQ(std::isnan(h[i]), std::isnan(x[i])) << i;
    EXPECT_EQ(std::isnan(b[i]), std::isnan(x[i])) << i;
    if (!std::isnan(x[i])) {
      EXPECT_EQ(b[i], wb) << i;
      // Relative error of round to nearest: 2^-11 (fp16 normal range), 2^-8 (bf16).
      if (std::fabs(x[i]) >= 6.2e-5f && std::fabs(x[i]) <= 65504.0f) {
        EXPECT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1p-11f) << i;
      }
      if (std::isfinite(x[i]) && std::fabs(x[i]) >= 1.2e-38f) {
        EXPECT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << i;
      }
    }
  }
  EXPECT_EQ(h[10001 + 1], kInf);
  EXPECT_EQ(h[10001 + 2], -kInf);
  EXPECT_EQ(h[10001 + 5], kInf);  // fp16 overflows to Inf; bf16 does not
  EXPECT_NEAR(b[10001 + 5], 1e6f, 1e6f * 0x1p-8f);
  EXPECT_TRUE(std::signbit(h[10001 + 4]));
}

// Checks |x - x'| <= step/2 per block (stochastic rounding: < step), reading each block's step
// from the encoded bytes.
void expect_block_bound(CodecId codec, const std::vector<float>& x, uint32_t seed = 0) {
  const auto bytes = encode({codec, 0, seed}, x);
  std::vector<float> y(x.size());
  decode(bytes, y);
  const size_t bits = codec == CodecId::kInt8 ? 8 : codec == CodecId::kInt4 ? 4 : 2;
  const double within = codec == CodecId::kInt2Sr ? 1.0 : 0.5;
  size_t p = kHeaderSize;
  for (size_t off = 0; off < x.size(); off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, x.size() - off);
    float mn, step;
    std::memcpy(&mn, &bytes[p], 4);
    std::memcpy(&step, &bytes[p + 4], 4);
    float lo = x[off], hi = x[off];
    for (size_t i = off; i < off + n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    EXPECT_EQ(mn, lo);
    const float levels = static_cast<float>((1 << bits) - 1);
    EXPECT_NEAR(step, (double{hi} - lo) / levels, (double{hi} - lo) * 1e-7 + 1e-44);
    const float big = std::max(std::fabs(lo), std::fabs(hi));
    const double ulp = double{std::nextafter(big, kInf)} - big;
    for (size_t i = off; i < off + n; ++i)
      ASSERT_LE(std::fabs(double{x[i]} - y[i]), step * within * (1 + 0x1p-12) + 2 * ulp)
          << "element " << i << " block step " << step;
    p += 8 + (n * bits + 7) / 8;
  }
}

TEST(CompressionBlockQuant, ErrorWithinHalfStepGaussian) {
  for (CodecId c : {CodecId::kInt8, CodecId::kInt4, CodecId::kInt2, CodecId::kInt2Sr}) {
    expect_block_bound(c, gaussian(100003, 2));  // not a multiple of the block
    expect_block_bound(c, gaussian(777, 3, 1e-3f));
    auto shifted = gaussian(5000, 4);
    for (auto& v : shifted) v += 1000.0f;  // offset far from zero
    expect_block_bound(c, shifted);
    expect_block_bound(c, gaussian(600, 5, 1e-39f));  // denormal scales (wide path)
    expect_block_bound(c, {});
    expect_block_bound(c, {1.5f});
  }
}

TEST(CompressionBlockQuant, RmsErrorOnGaussian) {
  // The design figures in docs/compression.md: RMS error per unit sigma with 256-blocks.
  const auto x = gaussian(1 << 20, 6);
  // Stochastic rounding trades variance for unbiasedness: 0.772 against int2's 0.546.
  for (auto [c, bound] : {std::pair{CodecId::kInt8, 0.0066}, std::pair{CodecId::kInt4, 0.112},
                          std::pair{CodecId::kInt2, 0.56}, std::pair{CodecId::kInt2Sr, 0.79}}) {
    const auto y = round_trip({c, 0, 3}, x);
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (double{x[i]} - y[i]) * (x[i] - y[i]);
    EXPECT_LT(std::sqrt(se / x.size()), bound) << static_cast<int>(c);
  }
}

TEST(CompressionBlockQuant, SpecialBlocks) {
  for (CodecId c : {CodecId::kInt8, CodecId::kInt4, CodecId::kInt2, CodecId::kInt2Sr}) {
    std::vector<float> x(4 * kQuantBlock + 3, 0.0f);     // block 0: zeros
    for (size_t i = 256; i < 512; ++i) x[i] = 7.25f;     // block 1: constant
    for (size_t i = 512; i < 768; ++i) x[i] = float(i);  // block 2: a NaN inside
    x[600] = kNaN;
    for (size_t i = 768; i < 1024; ++i) x[i] = -float(i);  // block 3: an Inf inside
    x[1000] = kInf;
    x[1024] = -0.0f, x[1025] = 1.0f, x[1026] = 2.0f;  // short tail
    const auto y = round_trip({c}, x);
    for (size_t i = 0; i < 256; ++i) EXPECT_EQ(y[i], 0.0f);
    for (size_t i = 256; i < 512; ++i) EXPECT_EQ(y[i], 7.25f);
    for (size_t i = 512; i < 1024; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
    const float levels = c == CodecId::kInt8 ? 255 : c == CodecId::kInt4 ? 15 : 3;
    EXPECT_NEAR(y[1025], 1.0f, 2.0f / levels * (c == CodecId::kInt2Sr ? 1.0f : 0.5f) + 1e-6f);
    EXPECT_EQ(y[1026], 2.0f);
    const auto bytes = encode({c}, x);
    EXPECT_EQ(bytes, encode({c}, x));  // deterministic
  }
}

TEST(CompressionTopK, KeepsExactlyKLargestTiesToLowerIndex) {
  // Two inputs. Values from a small set: many ties, so the tie rule decides most of the kept
  // set, and they all fall in a few buckets of the threshold's histogram. Then magnitudes
  // spread over 22 binades with denormals and zeros: many buckets, the kth largest anywhere.
  std::mt19937 rng(7);
  std::vector<float> ties(65536 * 2 + 1000), spread = gaussian(65536 * 2 + 1000, 12);
  for (auto& v : ties) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
  ties[70000] = kNaN;  // ranks above every number
  for (size_t i = 0; i < spread.size(); ++i) {
    spread[i] = std::ldexp(spread[i], static_cast<int>(rng() % 22) - 12);  // within fp16's range
    if (i % 97 == 0) spread[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 5);
  }
  // Inputs that steer the selection's sample (topk.cc) each way: gaussian (the sample's band
  // holds the answer), a period of 64 whose large values the sample rarely sees, ascending
  // magnitudes, a few non-zeros among zeros, and large values only where the sample looks
  // (the first 16 of every 64), so that it overestimates and the histogram takes over.
  std::vector<float> plain = gaussian(65536 * 2 + 1000, 13), periodic(plain.size()),
                     ascending(plain.size()), sparse(plain.size(), 0.0f), front(plain.size());
  for (size_t i = 0; i < periodic.size(); ++i) {
    periodic[i] = i % 64 == 63 ? 100.0f + static_cast<float>(i % 1000) : plain[i];
    front[i] = i % 64 < 16 ? 10.0f + plain[i] : 0.01f * plain[i];
    ascending[i] = static_cast<float>(i) * (i % 2 ? -1e-3f : 1e-3f);
    if (i % 1500 == 7) sparse[i] = plain[i];
  }
  for (const auto* input : {&ties, &spread, &plain, &periodic, &ascending, &sparse, &front})
  for (uint32_t k : {1u, 100u, 655u, 1000u, 20000u, 65535u, 65536u}) {
    const auto& x = *input;
    const auto y = round_trip({CodecId::kTopK, k}, x);
    for (size_t off = 0; off < x.size(); off += kTopKChunk) {
      const size_t n = std::min<size_t>(kTopKChunk, x.size() - off);
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      auto mag = [&](size_t i) { return std::bit_cast<uint32_t>(x[off + i]) & 0x7fffffffu; };
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return mag(a) > mag(b); });
      std::vector<bool> kept(n, false);
      for (size_t j = 0; j < topk_kept(n, k); ++j) kept[order[j]] = true;
      for (size_t i = 0; i < n; ++i) {
        // Kept values travel as fp16.
        const float want = kept[i] ? core::half_to_float(core::float_to_half(x[off + i])) : 0.0f;
        if (std::isnan(want))
          ASSERT_TRUE(std::isnan(y[off + i]));
        else
          ASSERT_EQ(y[off + i], want) << "k " << k << " element " << off + i;
      }
    }
  }
}

TEST(CompressionTopK, ValuesAreFp16) {
  const auto x = gaussian(70000, 8);
  const auto y = round_trip({CodecId::kTopK, 700}, x);
  size_t nonzero = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0.0f) continue;
    ++nonzero;
    EXPECT_EQ(y[i], core::half_to_float(core::float_to_half(x[i])));
  }
  EXPECT_EQ(nonzero, 700u + topk_kept(70000 - 65536, 700));  // 700 + 48
}

// ---- decode_add and residuals, every codec ----

TEST(CompressionAllCodecs, DecodeAddAddsDecode) {
  const auto x = gaussian(70001, 9);
  for (const auto& spec : kAll) {
    const auto bytes = encode(spec, x);
    std::vector<float> dec(x.size()), acc = gaussian(x.size(), 10);
    const auto before = acc;
    decode(bytes, dec);
    decode_add(bytes, acc);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(acc[i], before[i] + dec[i]) << i;
  }
}

TEST(CompressionAllCodecs, ResidualIsWhatTheCodecDrops) {
  const auto x = gaussian(70001, 11);
  for (const auto& spec : kAll) {
    std::vector<float> r(x.size());
    residual(spec, x, r);
    const auto y = round_trip(spec, x);
    double rr = 0, xx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(r[i], x[i] - y[i]) << i;
      rr += double{r[i]} * r[i], xx += double{x[i]} * x[i];
    }
    EXPECT_GT(rr, 0.0);  // every codec here is lossy on gaussian data
    EXPECT_LT(rr, xx);
    std::vector<float> in_place = x;
    residual(spec, in_place, in_place);  // out may alias x
    EXPECT_EQ(in_place, r);
  }
  std::vector<float> small(3);
  EXPECT_EQ(code_of([&] { residual({CodecId::kInt8}, x, small); }), ErrorCode::kInvalidArgument);
}

TEST(CompressionAllCodecs, EmptyInputAndWrongSpans) {
  for (const auto& spec : kAll) {
    const auto bytes = encode(spec, std::vector<float>{});
    EXPECT_EQ(bytes.size(), kHeaderSize);
    std::vector<float> none;
    decode(bytes, none);
    decode_add(bytes, none);
    std::vector<float> one(1);
    EXPECT_EQ(code_of([&] { decode(bytes, one); }), ErrorCode::kMismatch);
    std::vector<uint8_t> out(encoded_size(spec, 5) + 1);
    EXPECT_EQ(code_of([&] { encode(spec, std::vector<float>(5), out); }),
              ErrorCode::kInvalidArgument);
  }
}

// ---- malformed buffers ----

TEST(CompressionMalformed, HeaderAndLengthRejected) {
  const auto x = gaussian(1000, 12);
  for (const auto& spec : kAll) {
    const auto good = encode(spec, x);
    std::vector<float> dst(x.size());
    auto rejects = [&](std::vector<uint8_t> bad) {
      const std::vector<float> before = dst;
      EXPECT_EQ(code_of([&] { decode(bad, dst); }), ErrorCode::kProtocol);
      EXPECT_EQ(code_of([&] { decode_add(bad, dst); }), ErrorCode::kProtocol);
      EXPECT_EQ(dst, before);
    };
    auto with = [&](size_t at, uint8_t v) {
      auto b = good;
      b[at] = v;
      return b;
    };
    rejects({});
    rejects(std::vector<uint8_t>(good.begin(), good.begin() + kHeaderSize - 1));
    rejects(std::vector<uint8_t>(good.begin(), good.end() - 1));  // truncated
    auto longer = good;
    longer.push_back(0);
    rejects(longer);         // trailing byte
    rejects(with(0, 0x48));  // magic
    rejects(with(3, kFormatVersion + 1));  // version
    rejects(with(2, 0));     // codec id
    rejects(with(2, static_cast<uint8_t>(kLastCodec) + 1));
    rejects(with(10, 1));  // count 2^48 + ...: above the limit
    auto ten = good;       // count 10 disagrees with the length
    ten[4] = 10, ten[5] = 0;
    rejects(ten);
    rejects(with(12, good[12] + 1));                         // block size
    if (is_topk(spec.codec)) {
      rejects(with(17, good[17] + 1));            // k + 256: more kept values than the buffer holds
      rejects(with(18, 1));                       // k > chunk
    } else if (spec.codec != CodecId::kInt2Sr) {  // (int2-sr's k is its seed: any value)
      rejects(with(16, good[16] + 1));            // k non-zero where it must be zero
    }
    // A codec-specific decoder refuses another codec's buffer.
    if (spec.codec != CodecId::kFp16) {
      EXPECT_EQ(code_of([&] { half_decode(CodecId::kFp16, good, dst); }), ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kInt8) {
      EXPECT_EQ(code_of([&] { block_quant_decode(CodecId::kInt8, good, dst); }),
                ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kTopK) {
      EXPECT_EQ(code_of([&] { topk_decode(CodecId::kTopK, good, dst); }), ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kInt2) {
      EXPECT_EQ(code_of([&] { block_quant_decode(CodecId::kInt2, good, dst); }),
                ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kTopKInt2) {
      EXPECT_EQ(code_of([&] { topk_decode(CodecId::kTopKInt2, good, dst); }), ErrorCode::kProtocol);
    }
  }
}

TEST(CompressionMalformed, TopKIndicesChecked) {
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -0.25f};
  const auto good = encode({CodecId::kTopK, kTwoOfFive}, x);  // indices 1, 2 at offsets 20, 22
  std::vector<float> dst = {9, 9, 9, 9, 9};
  auto rejects = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    EXPECT_EQ(code_of([&] { decode_add(b, dst); }), ErrorCode::kProtocol);
    EXPECT_EQ(code_of([&] { decode(b, dst); }), ErrorCode::kProtocol);
    EXPECT_EQ(dst, (std::vector<float>{9, 9, 9, 9, 9}));  // untouched
  };
  rejects(kHeaderSize + 2, 5);  // index 5 is outside the 5-element chunk
  rejects(kHeaderSize + 2, 1);  // duplicate index
  rejects(kHeaderSize + 0, 3);  // descending
  rejects(kHeaderSize + 3, 1);  // index 257
  decode_add(good, dst);
  EXPECT_EQ(dst, (std::vector<float>{9, 6, 12, 9, 9}));
}

TEST(CompressionMalformed, Int4PaddingNibbleMustBeZero) {
  auto b = encode({CodecId::kInt4}, std::vector<float>{0, 15, 7.6f, 3.2f, 1});
  b.back() |= 0x10;
  std::vector<float> dst(5);
  EXPECT_EQ(code_of([&] { decode(b, dst); }), ErrorCode::kProtocol);
}

// ---- int2 with stochastic rounding: unbiased ----

// Blocks whose min is 0 and max 3 (step exactly 1), every other element at `frac` + 0, 1 or 2.
std::vector<float> unit_step_blocks(size_t blocks, float frac) {
  std::vector<float> x(blocks * kQuantBlock);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t j = i % kQuantBlock;
    x[i] = j == 0 ? 0.0f : j == 1 ? 3.0f : static_cast<float>(j % 3) + frac;
  }
  return x;
}

TEST(CompressionInt2Sr, UnbiasedOverElementsOfOneEncoding) {
  // One encoding, seed fixed: over 2^20 elements at the same fraction of a step, the decoded
  // mean is the input's (sd of a code 0.5 at most: 5 sd of the mean is 0.0025), where rounding
  // to nearest is off by the fraction itself (or 1 - it).
  for (float frac : {0.1f, 0.25f, 0.5f, 0.7f, 0.95f}) {
    const auto x = unit_step_blocks(4096, frac);
    const auto sr = round_trip({CodecId::kInt2Sr, 0, 12345}, x);
    const auto nearest = round_trip({CodecId::kInt2}, x);
    double bias_sr = 0, bias_nearest = 0;
    size_t n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % kQuantBlock < 2) continue;
      bias_sr += double{sr[i]} - x[i];
      bias_nearest += double{nearest[i]} - x[i];
      ++n;
      ASSERT_TRUE(sr[i] == std::floor(x[i]) || sr[i] == std::floor(x[i]) + 1) << i;
    }
    EXPECT_LT(std::fabs(bias_sr / n), 0.0025) << frac;
    EXPECT_GT(std::fabs(bias_nearest / n), 0.04) << frac;  // the test tells the two apart
  }
}

TEST(CompressionInt2Sr, UnbiasedOverSeedsForEachElement) {
  // Each element, over 4000 seeds (1..4000): its mean decoding is itself (5 sd: 0.04 of a step)
  // on gaussian data; its codes are the two grid points around it.
  const auto x = gaussian(2 * kQuantBlock + 17, 21);
  std::vector<double> sum(x.size(), 0.0);
  constexpr int kSeeds = 4000;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    const auto y = round_trip({CodecId::kInt2Sr, 0, seed}, x);
    for (size_t i = 0; i < x.size(); ++i) sum[i] += y[i];
  }
  const auto bytes = encode({CodecId::kInt2Sr, 0, 1}, x);
  for (size_t i = 0; i < x.size(); ++i) {
    float step;
    std::memcpy(&step, &bytes[kHeaderSize + (i / kQuantBlock) * (8 + 64) + 4], 4);
    EXPECT_NEAR(sum[i] / kSeeds, x[i], 0.04 * step) << i;
  }
}

TEST(CompressionInt2Sr, ErrorFeedbackAveragesOut) {
  // The same input encoded every step with a fresh seed, and feedback: the decoded values'
  // running mean converges on the input (the residual stays within a step).
  const auto x = gaussian(1000, 22);
  std::vector<float> r(x.size(), 0.0f), in(x.size()), mean(x.size(), 0.0f);
  constexpr int kSteps = 200;
  for (uint32_t step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < x.size(); ++i) in[i] = x[i] + r[i];
    const CodecSpec spec{CodecId::kInt2Sr, 0, step};
    residual(spec, in, r);
    const auto y = round_trip(spec, in);
    for (size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / kSteps;
  }
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(mean[i], x[i], 0.02) << i;
}

// ---- top-k: quantized values, the ratio on every length ----

TEST(CompressionTopK, QuantizedValuesKeepTheSetAndTheBound) {
  // The quantized forms keep the same elements as fp16 top-k, the exact sign, and each value
  // within half a step of its chunk's magnitude fit.
  const auto x = gaussian(65536 * 2 + 3000, 23);
  for (CodecId c : {CodecId::kTopKInt8, CodecId::kTopKInt4, CodecId::kTopKInt2}) {
    const uint32_t k = 656;
    const auto ref = round_trip({CodecId::kTopK, k}, x);
    const auto bytes = encode({c, k}, x);
    std::vector<float> y(x.size());
    decode(bytes, y);
    const uint32_t bits = topk_bits(c);
    size_t p = kHeaderSize;
    for (size_t off = 0; off < x.size(); off += kTopKChunk) {
      const size_t n = std::min<size_t>(kTopKChunk, x.size() - off);
      const size_t m = topk_kept(n, k);
      float mn, step;
      std::memcpy(&mn, &bytes[p + 2 * m], 4);
      std::memcpy(&step, &bytes[p + 2 * m + 4], 4);
      float lo = kInf, hi = 0;
      for (size_t i = off; i < off + n; ++i)
        if (ref[i] != 0.0f) lo = std::min(lo, std::fabs(x[i])), hi = std::max(hi, std::fabs(x[i]));
      EXPECT_EQ(mn, lo);
      EXPECT_NEAR(step, (double{hi} - lo) / ((1 << (bits - 1)) - 1), hi * 1e-6);
      for (size_t i = off; i < off + n; ++i) {
        ASSERT_EQ(y[i] != 0.0f, ref[i] != 0.0f) << i;
        if (y[i] == 0.0f) continue;
        ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
        ASSERT_LE(std::fabs(double{x[i]} - y[i]), step * 0.5 * (1 + 0x1p-12) + 1e-6) << i;
      }
      p += topk_chunk_bytes(c, m);
    }
    EXPECT_EQ(p, bytes.size());
  }
}

TEST(CompressionTopK, QuantizedNonFiniteChunkDecodesToNaN) {
  auto x = gaussian(1000, 24);
  x[10] = kInf;
  for (CodecId c : {CodecId::kTopKInt8, CodecId::kTopKInt4, CodecId::kTopKInt2}) {
    const auto y = round_trip({c, 6554}, x);  // keeps 100
    size_t nan = 0;
    for (float v : y) nan += std::isnan(v);
    EXPECT_EQ(nan, 100u);
    EXPECT_TRUE(std::isnan(y[10]));
  }
}

TEST(CompressionTopK, KeepsTheRatioOnEveryLength) {
  // Per chunk round(k * n / 65536), at least 1: the kept fraction is the ratio within one value
  // per chunk for short pieces, tails and multi-chunk buffers alike; the size follows.
  for (double ratio : {0.001, 0.01, 0.1, 0.5, 1.0}) {
    const uint32_t k = topk_k_for_ratio(ratio);
    for (size_t len :
         {size_t{1}, size_t{2}, size_t{5}, size_t{100}, size_t{999}, size_t{4096}, size_t{65535},
          size_t{65536}, size_t{65537}, size_t{65536 * 2 + 100}, size_t{300000}}) {
      auto x = gaussian(len, static_cast<uint32_t>(len));
      for (auto& v : x) v = v == 0.0f ? 1.0f : v;  // no zero, so every kept value is non-zero
      for (CodecId c : kTopKCodecs) {
        const auto y = round_trip({c, k}, x);
        size_t want_bytes = kHeaderSize, total = 0;
        for (size_t off = 0; off < len; off += kTopKChunk) {
          const size_t n = std::min<size_t>(kTopKChunk, len - off);
          const size_t kept = static_cast<size_t>(std::clamp<double>(
              std::floor(static_cast<double>(k) * n / kTopKChunk + 0.5), 1.0, double(n)));
          ASSERT_EQ(topk_kept(n, k), kept) << n;
          size_t nonzero = 0;
          for (size_t i = off; i < off + n; ++i) nonzero += y[i] != 0.0f;
          ASSERT_EQ(nonzero, kept) << "ratio " << ratio << " length " << len;
          EXPECT_LE(std::fabs(double(kept) - ratio * n), 1.0 + n / 65536.0) << n;
          want_bytes += topk_chunk_bytes(c, kept);
          total += kept;
        }
        EXPECT_EQ(encoded_size({c, k}, len), want_bytes);
        const double chunks = std::ceil(len / 65536.0);
        EXPECT_LE(std::fabs(double(total) - ratio * len), chunks * (1.0 + len / chunks / 65536.0))
            << "ratio " << ratio << " length " << len;
      }
    }
  }
  EXPECT_EQ(topk_kept(0, 655), 0u);
  EXPECT_EQ(topk_kept(5, 1), 1u);          // at least one
  EXPECT_EQ(topk_kept(100, 656), 1u);      // 0.001 rounds to 1
  EXPECT_EQ(topk_kept(1000, 656), 10u);    // 10.0098
  EXPECT_EQ(topk_kept(65536, 656), 656u);  // a full chunk keeps k
  EXPECT_EQ(topk_kept(3, 65536), 3u);      // ratio 1 keeps everything
}

}  // namespace
}  // namespace geoccl::compression
