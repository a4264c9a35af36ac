// Sparse pieces (compression/sparse_piece.h): the exact layout, round trips for every width,
// what the encoder reports as decoded, densification order, and every malformed piece refused
// with a typed error and the destination untouched.
#include "compression/sparse_piece.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "error_code.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

using test::code_of;

std::vector<uint8_t> encode(uint32_t bits, uint64_t n, std::vector<int64_t> idx,
                            std::vector<float> val, std::vector<float>* decoded = nullptr) {
  std::vector<float> d(val.size());
  auto out = sparse_encode(bits, n, idx, val, d);
  if (decoded) *decoded = d;
  return out;
}

TEST(SparsePiece, LayoutIsHeaderThenDeltaVarintsThenValues) {
  const auto p = encode(32, 1000, {300, 2, 3}, {1.5f, -2.0f, 4.0f});
  ASSERT_EQ(p.size(), kSparseHeaderSize + 4 + 12u);  // indices 2, 3, 300: gaps 2, 0, 296
  EXPECT_EQ(p[0], 'G');
  EXPECT_EQ(p[1], 'S');
  EXPECT_EQ(p[2], 32);
  EXPECT_EQ(p[3], kSparseVersion);
  uint64_t n, m, ib;
  std::memcpy(&n, &p[4], 8);
  std::memcpy(&m, &p[12], 8);
  std::memcpy(&ib, &p[20], 8);
  EXPECT_EQ(n, 1000u);
  EXPECT_EQ(m, 3u);
  EXPECT_EQ(ib, 4u);
  const uint8_t idx[] = {2, 0, 0xa8, 0x02};  // 296 = 0b10_0101000
  EXPECT_EQ(0, std::memcmp(&p[28], idx, 4));
  float v[3];
  std::memcpy(v, &p[32], 12);
  EXPECT_EQ(v[0], -2.0f);  // index order
  EXPECT_EQ(v[1], 4.0f);
  EXPECT_EQ(v[2], 1.5f);
}

TEST(SparsePiece, EveryWidthRoundTripsToWhatTheEncoderReports) {
  std::mt19937 gen(7);
  for (uint32_t bits : {32u, 8u, 4u, 2u}) {
    for (size_t m : {size_t{0}, size_t{1}, size_t{4095}, size_t{4097}, size_t{9000}}) {
      const uint64_t n = 50000;
      std::vector<int64_t> idx(n);
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), gen);
      idx.resize(m);
      std::normal_distribution<float> g(0, 3);
      std::vector<float> val(m);
      for (auto& x : val) x = g(gen);
      std::vector<float> decoded;
      const auto p = encode(bits, n, idx, val, &decoded);
      std::vector<float> dst(n, 0.0f);
      sparse_add(p, dst);
      size_t set = 0;
      for (float x : dst) set += x != 0.0f;
      EXPECT_LE(set, m);
      for (size_t j = 0; j < m; ++j) {
        EXPECT_EQ(dst[static_cast<size_t>(idx[j])], decoded[j]) << bits << " bits, pair " << j;
        EXPECT_EQ(std::signbit(decoded[j]), std::signbit(val[j]));
        if (bits == 32) {
          EXPECT_EQ(decoded[j], val[j]);
        }
      }
      // Quantized magnitudes stay within the block's range: |x'| between min|x| and max|x|.
      if (bits == 8 && m > 0) {
        float hi = 0;
        for (float x : val) hi = std::max(hi, std::fabs(x));
        for (size_t j = 0; j < m; ++j) EXPECT_NEAR(decoded[j], val[j], hi / 127 * 0.51 + 1e-6);
      }
    }
  }
}

TEST(SparsePiece, DensifyAddsPiecesInTheOrderGiven) {
  // 1 + 2^-24 rounds differently depending on the order: the result is the order's.
  const auto a = encode(32, 4, {0}, {1.0f});
  const auto b = encode(32, 4, {0, 3}, {0x1p-24f, 5.0f});
  const auto c = encode(32, 4, {0}, {0x1p-24f});
  std::vector<float> abc(4, 9.0f), bca(4);
  const std::span<const uint8_t> order1[] = {a, b, c}, order2[] = {b, c, a};
  sparse_densify(order1, abc);
  sparse_densify(order2, bca);
  EXPECT_EQ(abc[0], (1.0f + 0x1p-24f) + 0x1p-24f);
  EXPECT_EQ(bca[0], (0x1p-24f + 0x1p-24f) + 1.0f);
  EXPECT_NE(abc[0], bca[0]);
  EXPECT_EQ(abc[1], 0.0f);
  EXPECT_EQ(abc[3], 5.0f);
}

TEST(SparsePiece, BadArgumentsAreInvalid) {
  std::vector<float> d(2);
  const std::vector<float> v{1, 2};
  auto enc = [&](uint32_t bits, uint64_t n, std::vector<int64_t> idx) {
    return code_of([&] { sparse_encode(bits, n, idx, v, d); });
  };
  EXPECT_EQ(enc(16, 10, {1, 2}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc(32, 10, {1, 10}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc(32, 10, {-1, 2}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc(32, 10, {4, 4}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc(32, uint64_t{1} << 50, {1, 2}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { sparse_encode(32, 10, std::vector<int64_t>{1}, v, d); }),
            ErrorCode::kInvalidArgument);
}

TEST(SparsePiece, MalformedPiecesAreRefusedAndLeaveTheDestinationAlone) {
  const auto good = encode(2, 1000, {5, 6, 900}, {1.0f, -3.0f, 2.0f});
  auto refused = [&](std::vector<uint8_t> p, uint64_t n = 1000) {
    std::vector<float> dst(n, 1.0f);
    const ErrorCode c = code_of([&] { sparse_add(p, dst); });
    if (c != ErrorCode::kOk) {
      for (float x : dst) EXPECT_EQ(x, 1.0f);
    }
    return c;
  };
  EXPECT_EQ(refused(good), ErrorCode::kOk);
  EXPECT_EQ(refused(good, 999), ErrorCode::kMismatch);
  auto bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);  // magic
  bad = good;
  bad[3] = 9;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);  // version
  bad = good;
  bad[2] = 3;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);  // width
  bad = good;
  bad.pop_back();
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);  // length
  bad = good;
  bad[12] = 4;  // m = 4: the length no longer matches
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);
  // Gaps 5, 0, 893 (0xfd 0x06). A third gap of 0x7f 0x07 ends a byte early: a byte is left.
  bad = good;
  bad[28 + 2] = 0x7f;
  bad[28 + 3] = 0x07;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);
  // A third gap of 1023 (0xff 0x07): index 1030 of 1000.
  bad = good;
  bad[28 + 2] = 0xff;
  bad[28 + 3] = 0x07;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);
  // An overlong varint (0x85 0x00 for 5) in a piece of the same length.
  auto two = encode(32, 1000, {5, 600}, {1.0f, 2.0f});  // gaps 5 (1 byte), 594 (2 bytes)
  bad = two;
  bad[28] = 0x85;
  bad[29] = 0x00;
  bad[30] = 0x01;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);
  // Non-zero padding bits of the last packed byte (3 codes of 2 bits: bits 6-7 unused).
  bad = good;
  bad.back() |= 0xc0;
  EXPECT_EQ(refused(bad), ErrorCode::kProtocol);
  // Too short for a header.
  EXPECT_EQ(refused(std::vector<uint8_t>(good.begin(), good.begin() + 10)), ErrorCode::kProtocol);
}

}  // namespace
}  // namespace geoccl::compression
