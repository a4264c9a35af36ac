// core/half_array.h against core/half.h element by element: the array conversions (F16C where
// the CPU has it) must give the same bits as the portable ones on every input that matters:
// every half, the rounding boundaries between halves, overflow, subnormals, NaNs anywhere in a
// group of eight, random bit patterns, odd lengths and unaligned buffers, and with the CPU's
// flush-to-zero and denormals-are-zero modes on (torch can turn them on).
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/half_array.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HALF_ARRAY_TEST_X86 1
#endif

namespace geoccl::core {
namespace {

// Floats on and around every rounding decision of float -> half.
std::vector<float> hard_floats() {
  std::vector<uint32_t> bits;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t f = std::bit_cast<uint32_t>(half_to_float(static_cast<uint16_t>(h)));
    for (int d = -2; d <= 2; ++d) bits.push_back(f + static_cast<uint32_t>(d));
    // The midpoint to the next half up (same sign): the tie and its neighbours.
    const uint32_t g = std::bit_cast<uint32_t>(half_to_float(static_cast<uint16_t>(h + 1)));
    if ((h & 0x7fff) < 0x7bff) {
      const uint32_t mid = f + (g - f) / 2;
      for (int d = -1; d <= 1; ++d) bits.push_back(mid + static_cast<uint32_t>(d));
    }
  }
  // Float subnormals and the smallest normals, the overflow edge, infinities and NaN payloads.
  for (uint32_t s : {0u, 0x80000000u}) {
    for (uint32_t v : {0u, 1u, 2u, 0x7fffffu, 0x800000u, 0x33000000u, 0x33000001u, 0x32ffffffu,
                       0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u,
                       0x7f7fffffu, 0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu,
                       0x7fa00000u, 0x7f802000u})
      bits.push_back(s | v);
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 1 << 18; ++i) bits.push_back(rng());
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * sizeof(float));
  return out;
}

void expect_encode_matches(const std::vector<float>& x, size_t offset) {
  const size_t n = x.size() - offset;
  std::vector<uint8_t> got(2 * n + 1);
  floats_to_halves(x.data() + offset, n, got.data() + 1);  // unaligned output
  for (size_t i = 0; i < n; ++i) {
    const uint16_t want = float_to_half(x[offset + i]);
    const uint16_t have = static_cast<uint16_t>(got[1 + 2 * i] | (got[2 + 2 * i] << 8));
    ASSERT_EQ(have, want) << "float bits 0x" << std::hex << std::bit_cast<uint32_t>(x[offset + i])
                          << " at " << std::dec << i;
  }
}

void expect_decode_matches(size_t offset, bool add) {
  std::vector<uint8_t> in(2 * 0x10000 + 1);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    in[1 + 2 * h] = static_cast<uint8_t>(h);
    in[2 + 2 * h] = static_cast<uint8_t>(h >> 8);
  }
  const size_t n = 0x10000 - offset;
  std::vector<float> dst(n + 1), want(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (size_t i = 0; i < n; ++i) dst[1 + i] = g(rng);
  for (size_t i = 0; i < n; ++i) {
    const float v = half_to_float(static_cast<uint16_t>(offset + i));
    want[i] = add ? dst[1 + i] + v : v;
  }
  const uint8_t* src = in.data() + 1 + 2 * offset;  // odd address
  (add ? halves_add_to_floats : halves_to_floats)(src, n, dst.data() + 1);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(dst[1 + i]), std::bit_cast<uint32_t>(want[i]))
        << "half 0x" << std::hex << offset + i << (add ? " (add)" : "");
}

void expect_all_match() {
  const auto x = hard_floats();
  for (size_t offset : {0, 1, 3, 7}) expect_encode_matches(x, offset);
  for (size_t offset : {0, 5})
    for (bool add : {false, true}) expect_decode_matches(offset, add);
}

TEST(HalfArray, EveryConversionGivesThePortableBits) {
  RecordProperty("f16c", half_array_uses_f16c() ? "yes" : "no");
  expect_all_match();
}

TEST(HalfArray, ANanInAGroupOfEightLeavesItsNeighboursExact) {
  for (int pos = 0; pos < 8; ++pos) {
    std::vector<float> x = {1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159f, -0.0f, 70000.0f, 6e-8f, 0.1f};
    x[static_cast<size_t>(pos)] = std::bit_cast<float>(0xffa12345u);
    expect_encode_matches(x, 0);
  }
}

#ifdef HALF_ARRAY_TEST_X86
TEST(HalfArray, FlushToZeroAndDenormalsAreZeroChangeNothing) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  expect_all_match();
  _mm_setcsr(saved);
}
#endif

}  // namespace
}  // namespace geoccl::core
