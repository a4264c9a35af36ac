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
  std::vector<uint8_t> h = {0x47, 0x5a, codec, 0x01};
  for (int i = 0; i < 8; ++i) h.push_back(static_cast<uint8_t>(count >> (8 * i)));
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<uint8_t>(block >> (8 * i)));
  for (int i = 0; i < 4; ++i) h.push_back(static_cast<uint8_t>(k >> (8 * i)));
  return h;
}

void append(std::vector<uint8_t>* v, std::initializer_list<uint8_t> b) {
  v->insert(v->end(), b.begin(), b.end());
}

using geoccl::test::code_of;

const CodecSpec kAll[] = {{CodecId::kFp16, 0},
                          {CodecId::kBf16, 0},
                          {CodecId::kInt8, 0},
                          {CodecId::kInt4, 0},
                          {CodecId::kTopK, 655}};

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

TEST(CompressionFormat, TopKBytesTiesToLowerIndex) {
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -0.25f};
  std::vector<uint8_t> want = header_bytes(5, 5, 65536, 2);
  append(&want, {1, 0, 2, 0, 0x00, 0xc2, 0x00, 0x42});  // indices 1, 2; values -3, 3
  EXPECT_EQ(encode({CodecId::kTopK, 2}, x), want);
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
  EXPECT_EQ(encoded_size({CodecId::kTopK, 655}, 65536 * 2 + 100),
            kHeaderSize + 4 * (655 * 2 + 100));
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

// Checks |x - x'| <= step/2 per block, reading each block's step from the encoded bytes.
void expect_block_bound(CodecId codec, const std::vector<float>& x) {
  const auto bytes = encode({codec}, x);
  std::vector<float> y(x.size());
  decode(bytes, y);
  const bool int4 = codec == CodecId::kInt4;
  size_t p = kHeaderSize;
  for (size_t off = 0; off < x.size(); off += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, x.size() - off);
    float mn, step;
    std::memcpy(&mn, &bytes[p], 4);
    std::memcpy(&step, &bytes[p + 4], 4);
    float lo = x[off], hi = x[off];
    for (size_t i = off; i < off + n; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    EXPECT_EQ(mn, lo);
    const float levels = int4 ? 15.0f : 255.0f;
    EXPECT_NEAR(step, (double{hi} - lo) / levels, (double{hi} - lo) * 1e-7 + 1e-44);
    const float big = std::max(std::fabs(lo), std::fabs(hi));
    const double ulp = double{std::nextafter(big, kInf)} - big;
    for (size_t i = off; i < off + n; ++i)
      ASSERT_LE(std::fabs(double{x[i]} - y[i]), step * 0.5 * (1 + 0x1p-12) + 2 * ulp)
          << "element " << i << " block step " << step;
    p += 8 + (int4 ? (n + 1) / 2 : n);
  }
}

TEST(CompressionBlockQuant, ErrorWithinHalfStepGaussian) {
  for (CodecId c : {CodecId::kInt8, CodecId::kInt4}) {
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
  for (auto [c, bound] : {std::pair{CodecId::kInt8, 0.0066}, std::pair{CodecId::kInt4, 0.112}}) {
    const auto y = round_trip({c}, x);
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += (double{x[i]} - y[i]) * (x[i] - y[i]);
    EXPECT_LT(std::sqrt(se / x.size()), bound) << static_cast<int>(c);
  }
}

TEST(CompressionBlockQuant, SpecialBlocks) {
  for (CodecId c : {CodecId::kInt8, CodecId::kInt4}) {
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
    EXPECT_NEAR(y[1025], 1.0f, 2.0f / (c == CodecId::kInt4 ? 30 : 510) + 1e-6f);
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
  for (const auto* input : {&ties, &spread})
  for (uint32_t k : {1u, 100u, 655u, 1000u, 65535u, 65536u}) {
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
      for (size_t j = 0; j < std::min<size_t>(k, n); ++j) kept[order[j]] = true;
      for (size_t i = 0; i < n; ++i) {
        // Kept values travel as fp16 (the tie-heavy input is exact in fp16).
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
  EXPECT_EQ(nonzero, 700u + 700u);
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
    rejects(with(3, 2));     // version
    rejects(with(2, 0));     // codec id
    rejects(with(2, 6));
    rejects(with(10, 1));  // count 2^48 + ...: above the limit
    auto ten = good;       // count 10 disagrees with the length
    ten[4] = 10, ten[5] = 0;
    rejects(ten);
    rejects(with(12, good[12] + 1));                         // block size
    rejects(with(16, good[16] + 1));                         // k (non-zero where it must be zero)
    if (spec.codec == CodecId::kTopK) rejects(with(17, 1));  // k > chunk for top-k
    // A codec-specific decoder refuses another codec's buffer.
    if (spec.codec != CodecId::kFp16) {
      EXPECT_EQ(code_of([&] { half_decode(CodecId::kFp16, good, dst); }), ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kInt8) {
      EXPECT_EQ(code_of([&] { block_quant_decode(CodecId::kInt8, good, dst); }),
                ErrorCode::kProtocol);
    }
    if (spec.codec != CodecId::kTopK) {
      EXPECT_EQ(code_of([&] { topk_decode(good, dst); }), ErrorCode::kProtocol);
    }
  }
}

TEST(CompressionMalformed, TopKIndicesChecked) {
  const std::vector<float> x = {0.5f, -3.0f, 3.0f, 1.0f, -0.25f};
  const auto good = encode({CodecId::kTopK, 2}, x);  // indices 1, 2 at offsets 20, 22
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

}  // namespace
}  // namespace geoccl::compression
