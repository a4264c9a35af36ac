#include "core/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/half.h"

using namespace geoccl;
using geoccl::core::Operands;

TEST(Half, RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = core::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(core::float_to_half(f), h) << "h=" << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  // 2049 lies halfway between 2048 and 2050 in half precision: ties go to the even mantissa.
  EXPECT_EQ(core::half_to_float(core::float_to_half(2049.f)), 2048.f);
  EXPECT_EQ(core::half_to_float(core::float_to_half(2051.f)), 2052.f);
  EXPECT_EQ(core::half_to_float(core::float_to_half(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(core::half_to_float(core::float_to_half(5.96e-8f)), 5.9604644775390625e-8f);
}

TEST(BFloat16, RoundTripsAndRounds) {
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = core::bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(core::float_to_bf16(f), h);
  }
  EXPECT_EQ(core::bf16_to_float(core::float_to_bf16(257.f)), 256.f);  // tie -> even
  EXPECT_EQ(core::bf16_to_float(core::float_to_bf16(259.f)), 260.f);
}

template <class T>
std::vector<T> apply(std::vector<T> a, const std::vector<T>& b, DataType t, ReduceOp op) {
  core::reduce_into(a.data(), b.data(), a.size(), t, op);
  return a;
}

TEST(Reduce, AllOpsFloat) {
  std::vector<float> a = {1, -2, 3.5f, 0}, b = {4, 5, -1, 0};
  EXPECT_EQ(apply(a, b, DataType::kFloat32, ReduceOp::kSum), (std::vector<float>{5, 3, 2.5f, 0}));
  EXPECT_EQ(apply(a, b, DataType::kFloat32, ReduceOp::kProd), (std::vector<float>{4, -10, -3.5f, 0}));
  EXPECT_EQ(apply(a, b, DataType::kFloat32, ReduceOp::kMin), (std::vector<float>{1, -2, -1, 0}));
  EXPECT_EQ(apply(a, b, DataType::kFloat32, ReduceOp::kMax), (std::vector<float>{4, 5, 3.5f, 0}));
}

TEST(Reduce, IntegersWrapInsteadOfOverflowing) {
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max()}, b = {1};
  EXPECT_EQ(apply(a, b, DataType::kInt32, ReduceOp::kSum)[0], std::numeric_limits<int32_t>::min());
  std::vector<int8_t> c = {100}, d = {100};
  EXPECT_EQ(apply(c, d, DataType::kInt8, ReduceOp::kSum)[0], static_cast<int8_t>(-56));
  std::vector<uint8_t> e = {200}, f = {100};
  EXPECT_EQ(apply(e, f, DataType::kUInt8, ReduceOp::kMax)[0], 200);
  std::vector<int64_t> g = {-5}, h = {3};
  EXPECT_EQ(apply(g, h, DataType::kInt64, ReduceOp::kProd)[0], -15);
}

TEST(Reduce, HalfReducesInFloatAndRoundsOnce) {
  // 2048 + 1 is not representable in half; computed in f32 then rounded once it gives 2048.
  std::vector<uint16_t> a = {core::float_to_half(2048.f)}, b = {core::float_to_half(1.f)};
  core::reduce_into(a.data(), b.data(), 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(core::half_to_float(a[0]), 2048.f);
  std::vector<uint16_t> x = {core::float_to_bf16(1.5f)}, y = {core::float_to_bf16(2.f)};
  core::reduce_into(x.data(), y.data(), 1, DataType::kBFloat16, ReduceOp::kProd);
  EXPECT_EQ(core::bf16_to_float(x[0]), 3.f);
}

TEST(Reduce, OperandOrderIsRespectedForSignedZero) {
  std::vector<float> a = {0.f}, b = {-0.f};
  core::reduce_into(a.data(), b.data(), 1, DataType::kFloat32, ReduceOp::kMin, Operands::kDstFirst);
  const bool first_neg = std::signbit(a[0]);
  std::vector<float> c = {-0.f}, d = {0.f};
  core::reduce_into(c.data(), d.data(), 1, DataType::kFloat32, ReduceOp::kMin, Operands::kSrcFirst);
  // Both computed min(+0, -0) with +0 as the left operand: identical bits.
  EXPECT_EQ(first_neg, std::signbit(c[0]));
}

TEST(Reduce, AvgDividesOnce) {
  std::vector<float> a = {9, 3};
  core::finish_avg(a.data(), 2, DataType::kFloat32, 3);
  EXPECT_EQ(a, (std::vector<float>{3, 1}));
  std::vector<int32_t> b = {7, -7};
  core::finish_avg(b.data(), 2, DataType::kInt32, 2);
  EXPECT_EQ(b, (std::vector<int32_t>{3, -3}));
}

TEST(Reduce, LargeBuffersMatchScalarReference) {
  const size_t n = (1 << 20) + 3;  // odd length exercises the vector loop's tail
  std::vector<double> a(n), b(n), ref(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<double>(i % 1000) * 0.5;
    b[i] = static_cast<double>(i % 333) - 100;
    ref[i] = a[i] + b[i];
  }
  core::reduce_into(a.data(), b.data(), n, DataType::kFloat64, ReduceOp::kSum);
  EXPECT_EQ(a, ref);
}

// reduce_to is reduce_into with its result written elsewhere: the same bits for every type and
// operator, operand order included, and its inputs untouched.
TEST(Reduce, ReduceToMatchesReduceIntoBitForBit) {
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                            DataType::kInt8,    DataType::kUInt8,   DataType::kInt32,   DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  const size_t n = 1037;
  for (DataType t : types) {
    const size_t bytes = n * dtype_size(t);
    std::vector<uint8_t> a(bytes), b(bytes);
    for (size_t i = 0; i < bytes; ++i) {
      a[i] = static_cast<uint8_t>(i * 37 + 11);
      b[i] = static_cast<uint8_t>(i * 91 + 5);
    }
    if (t == DataType::kFloat32) {  // signed zeros both ways round: min/max pick by operand order
      const float z[2] = {0.f, -0.f};
      std::memcpy(a.data(), &z[0], 4);
      std::memcpy(b.data(), &z[1], 4);
      std::memcpy(a.data() + 4, &z[1], 4);
      std::memcpy(b.data() + 4, &z[0], 4);
    }
    for (ReduceOp op : ops) {
      std::vector<uint8_t> expect = a, out(bytes, 0xEE);
      const auto a0 = a, b0 = b;
      core::reduce_into(expect.data(), b.data(), n, t, op);
      core::reduce_to(out.data(), a.data(), b.data(), n, t, op);
      EXPECT_EQ(out, expect) << dtype_name(t) << " op " << static_cast<int>(op);
      EXPECT_EQ(a, a0);
      EXPECT_EQ(b, b0);
    }
  }
}
