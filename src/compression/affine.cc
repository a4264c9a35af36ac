#include "compression/affine.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace geoccl::compression::affine {
namespace {

// Orders fp32 bit patterns as signed integers in the order of the values (-0 below +0, NaNs
// beyond the infinities), so a run's min and max are integer reductions, which vectorize
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
void nearest(const float* __restrict x, size_t n, float mn, float inv, int32_t levels,
             uint8_t* __restrict codes) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const float y = (x[i] - mn) * inv;
    const int32_t q = static_cast<int32_t>((y + kRoundMagic) - kRoundMagic);
    codes[i] = static_cast<uint8_t>(q < levels ? q : levels);
  }
}

// codes[i] = min(floor((x[i] - mn) * inv + u_i), levels); y + u >= 0, so truncation is floor.
void stochastic(const float* __restrict x, size_t n, float mn, float inv, int32_t levels,
                uint32_t key, uint8_t* __restrict codes) {
  const uint32_t count = static_cast<uint32_t>(n);
  for (uint32_t i = 0; i < count; ++i) {  // must vectorize
    const float y = (x[i] - mn) * inv;
    const int32_t q = static_cast<int32_t>(y + dither(key, i));
    codes[i] = static_cast<uint8_t>(q < levels ? q : levels);
  }
}

// The same in double, for the runs the fp32 path cannot take: a step below FLT_MIN (1/step
// overflows) or a range beyond FLT_MAX (x - min overflows). Rare; scalar is fine.
void wide(const float* x, size_t n, float mn, float step, uint32_t levels, Rounding rounding,
          uint32_t key, uint8_t* codes) {
  for (size_t i = 0; i < n; ++i) {
    double y = step > 0.0f ? (double{x[i]} - mn) / step : 0.0;
    y = std::clamp(y, 0.0, double(levels));
    y = rounding == Rounding::kNearest
            ? std::nearbyint(y)
            : std::min(std::floor(y + dither(key, static_cast<uint32_t>(i))), double(levels));
    codes[i] = static_cast<uint8_t>(y);
  }
}

template <uint32_t kBits>
void pack_bits(const uint8_t* __restrict codes, size_t n, uint8_t* __restrict out) {
  constexpr size_t kPer = 8 / kBits;
  const size_t whole = n / kPer;
  for (size_t j = 0; j < whole; ++j) {  // must vectorize
    uint32_t b = 0;
    for (size_t e = 0; e < kPer; ++e) b |= uint32_t{codes[kPer * j + e]} << (kBits * e);
    out[j] = static_cast<uint8_t>(b);
  }
  if (n % kPer == 0) return;
  uint32_t b = 0;
  for (size_t e = 0; e < n % kPer; ++e) b |= uint32_t{codes[kPer * whole + e]} << (kBits * e);
  out[whole] = static_cast<uint8_t>(b);
}

template <uint32_t kBits>
void unpack_bits(const uint8_t* __restrict in, size_t n, uint8_t* __restrict codes) {
  constexpr size_t kPer = 8 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  const size_t whole = n / kPer;
  for (size_t j = 0; j < whole; ++j) {  // must vectorize
    for (size_t e = 0; e < kPer; ++e)
      codes[kPer * j + e] = static_cast<uint8_t>((in[j] >> (kBits * e)) & kMask);
  }
  for (size_t e = 0; e < n % kPer; ++e)
    codes[kPer * whole + e] = static_cast<uint8_t>((in[whole] >> (kBits * e)) & kMask);
}

}  // namespace

Fit quantize(const float* x, size_t n, uint32_t levels, Rounding rounding, uint32_t key,
             uint8_t* codes) {
  int32_t lo = std::numeric_limits<int32_t>::max();
  int32_t hi = std::numeric_limits<int32_t>::min();
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const int32_t k = order_key(x[i]);
    lo = k < lo ? k : lo;
    hi = k > hi ? k : hi;
  }
  if (hi >= order_key(std::numeric_limits<float>::infinity()) ||
      lo <= order_key(-std::numeric_limits<float>::infinity())) {
    std::fill_n(codes, n, uint8_t{0});
    const float nan = std::numeric_limits<float>::quiet_NaN();
    return {nan, nan};
  }
  const float mn = from_order_key(lo), mx = from_order_key(hi);
  const float fl = static_cast<float>(levels);
  // (max - min)/L: one rounding. A range beyond FLT_MAX (values near +-3.4e38 of both signs)
  // takes max/L - min/L instead, finite for every finite run.
  const float range = mx - mn;
  const float step = range <= FLT_MAX ? range / fl : mx / fl - mn / fl;
  const auto l = static_cast<int32_t>(levels);
  if (step == 0.0f)  // constant run (all zeros, say): every code 0 decodes to min exactly
    std::fill_n(codes, n, uint8_t{0});
  else if (step < FLT_MIN || range > FLT_MAX)
    wide(x, n, mn, step, levels, rounding, key, codes);
  else if (rounding == Rounding::kNearest)
    nearest(x, n, mn, 1.0f / step, l, codes);
  else
    stochastic(x, n, mn, 1.0f / step, l, key, codes);
  return {mn, step};
}

uint32_t dither_key(uint32_t seed, uint64_t run) {
  // splitmix64's finalizer over (seed, run): consecutive runs get unrelated keys.
  uint64_t z = (uint64_t{seed} << 32 ^ run) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

template <bool kAdd>
void dequantize(const uint8_t* __restrict codes, size_t n, Fit fit, float* __restrict dst) {
  const float mn = fit.min, step = fit.step;
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const float v = mn + static_cast<float>(codes[i]) * step;
    dst[i] = kAdd ? dst[i] + v : v;
  }
}
template void dequantize<false>(const uint8_t*, size_t, Fit, float*);
template void dequantize<true>(const uint8_t*, size_t, Fit, float*);

void pack(uint32_t bits, const uint8_t* codes, size_t n, uint8_t* out) {
  if (bits == 8) return static_cast<void>(std::memcpy(out, codes, n));
  if (bits == 4) return pack_bits<4>(codes, n, out);
  pack_bits<2>(codes, n, out);
}

void unpack(uint32_t bits, const uint8_t* in, size_t n, uint8_t* codes) {
  if (bits == 8) return static_cast<void>(std::memcpy(codes, in, n));
  if (bits == 4) return unpack_bits<4>(in, n, codes);
  unpack_bits<2>(in, n, codes);
}

void store_signed(uint32_t bits, float* v, size_t m, uint8_t* codes, uint8_t* mag_codes, uint8_t* out) {
  const uint32_t sign_shift = bits - 1;
  float* __restrict mv = v;
  uint8_t* __restrict c = codes;
  for (size_t j = 0; j < m; ++j) {  // must vectorize
    const uint32_t b = std::bit_cast<uint32_t>(mv[j]);
    c[j] = static_cast<uint8_t>((b >> 31) << sign_shift);
    mv[j] = std::bit_cast<float>(b & 0x7fffffffu);
  }
  uint8_t* __restrict mc = mag_codes;
  const Fit fit = quantize(mv, m, (1u << sign_shift) - 1, Rounding::kNearest, 0, mc);
  for (size_t j = 0; j < m; ++j) c[j] |= mc[j];  // must vectorize
  std::memcpy(out, &fit.min, 4);
  std::memcpy(out + 4, &fit.step, 4);
  pack(bits, codes, m, out + kSignedFitBytes);
}

void load_signed(uint32_t bits, const uint8_t* in, size_t m, uint8_t* codes, float* v) {
  const uint32_t sign_shift = bits - 1, mag_mask = (1u << sign_shift) - 1;
  float mn, step;
  std::memcpy(&mn, in, 4);
  std::memcpy(&step, in + 4, 4);
  unpack(bits, in + kSignedFitBytes, m, codes);
  const uint8_t* __restrict c = codes;
  float* __restrict out = v;
  for (size_t j = 0; j < m; ++j) {  // must vectorize
    const float mag = mn + static_cast<float>(c[j] & mag_mask) * step;
    const uint32_t sign = uint32_t{c[j]} >> sign_shift << 31;
    out[j] = std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
}

bool padding_is_zero(uint32_t bits, const uint8_t* in, size_t n) {
  const size_t used = n * bits % 8;
  return used == 0 || (in[n * bits / 8] >> used) == 0;
}

}  // namespace geoccl::compression::affine
