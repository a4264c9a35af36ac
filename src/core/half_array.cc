#include "core/half_array.h"

#include "core/half.h"
#include "core/unaligned.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define GEOCCL_HAVE_F16C_PATH 1
#endif

namespace geoccl::core {
namespace {

// The portable loops. g++ does not vectorize them (the subnormal and NaN cases of core/half.h
// stay branches): about 2 GB/s per core, where F16C does several times that.
void to_halves_portable(const float* __restrict src, size_t n, uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) store_u16(out + 2 * i, float_to_half(src[i]));
}
template <bool kAdd>
void to_floats_portable(const uint8_t* __restrict in, size_t n, float* __restrict dst) {
  for (size_t i = 0; i < n; ++i) {
    const float v = half_to_float(load_u16(in + 2 * i));
    dst[i] = kAdd ? dst[i] + v : v;
  }
}

#ifdef GEOCCL_HAVE_F16C_PATH
// Eight lanes at a time. The instructions round to nearest even as core/half.h does and agree
// with it on every finite value, infinity and subnormal; they differ only on NaNs (they keep the
// payload, and quiet a signalling NaN), so a group of eight that holds a NaN takes the portable
// conversion. Little-endian x86: a lane's u16 is its two bytes in order.
__attribute__((target("avx2,f16c"))) void to_halves_f16c(const float* src, size_t n, uint8_t* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    const __m256i nan = _mm256_cmpgt_epi32(a, inf);
    if (!_mm256_testz_si256(nan, nan)) {
      to_halves_portable(src + i, 8, out + 2 * i);
      continue;
    }
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  to_halves_portable(src + i, n - i, out + 2 * i);
}

template <bool kAdd>
__attribute__((target("avx2,f16c"))) void to_floats_f16c(const uint8_t* in, size_t n, float* dst) {
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  const __m128i abs_mask = _mm_set1_epi16(0x7fff);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    // A NaN: exponent all ones and a non-zero mantissa, i.e. |h| > 0x7c00 (signed 16-bit compare
    // is right: |h| < 0x8000).
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs_mask), exp_mask);
    if (!_mm_testz_si128(nan, nan)) {
      to_floats_portable<kAdd>(in + 2 * i, 8, dst + i);
      continue;
    }
    __m256 v = _mm256_cvtph_ps(h);
    if (kAdd) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
  to_floats_portable<kAdd>(in + 2 * i, n - i, dst + i);
}

// CPUID: F16C and AVX (leaf 1, ecx bits 29, 28), AVX2 (leaf 7, ebx bit 5), the OS saving the AVX state
// (OSXSAVE, leaf 1 ecx bit 27, then XCR0 bits 1 and 2). clang 14 knows no "f16c" for
// __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool f16c = (c >> 29) & 1, avx = (c >> 28) & 1, osxsave = (c >> 27) & 1;
  if (!f16c || !avx || !osxsave) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6) != 6) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b >> 5) & 1;
}
#endif

struct Kernels {
  void (*to_halves)(const float*, size_t, uint8_t*) = to_halves_portable;
  void (*to_floats)(const uint8_t*, size_t, float*) = to_floats_portable<false>;
  void (*add_to_floats)(const uint8_t*, size_t, float*) = to_floats_portable<true>;
  bool f16c = false;
};

const Kernels& kernels() {
  static const Kernels k = [] {
    Kernels out;
#ifdef GEOCCL_HAVE_F16C_PATH
    if (cpu_has_f16c()) {
      out.to_halves = to_halves_f16c;
      out.to_floats = to_floats_f16c<false>;
      out.add_to_floats = to_floats_f16c<true>;
      out.f16c = true;
    }
#endif
    return out;
  }();
  return k;
}

}  // namespace

void floats_to_halves(const float* src, size_t n, uint8_t* out) { kernels().to_halves(src, n, out); }
void halves_to_floats(const uint8_t* in, size_t n, float* dst) { kernels().to_floats(in, n, dst); }
void halves_add_to_floats(const uint8_t* in, size_t n, float* dst) {
  kernels().add_to_floats(in, n, dst);
}
bool half_array_uses_f16c() { return kernels().f16c; }

}  // namespace geoccl::core
