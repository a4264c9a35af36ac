// Affine quantization kernels shared by block quantization (block_quant.h) and the quantized
// values of top-k (topk.h). A run of n fp32 values gets a minimum and a step, both fp32, and one
// code in 0..L per value:
//
//   step = (max - min) / L
//   nearest:    code = min(round_half_even((x - min) * (1 / step)), L)
//   stochastic: code = min(floor((x - min) * (1 / step) + u), L),  u in [0, 1) from dither()
//   x'   = min + code * step
//
// A run holding a NaN or Inf gets min = step = NaN and zero codes, so all of it decodes to NaN;
// a constant run gets step 0 and decodes exactly. Runs whose step is below FLT_MIN (1/step
// overflows) or whose range exceeds FLT_MAX take an exact double-precision path.
//
// Stochastic rounding is unbiased: E[x'] = x for every x of the run, to within 2^-22 of a step
// for L = 3 (u's 24-bit resolution and the fp32 rounding of y + u). u is a counter-based hash of
// (key, position in the run), with key = dither_key(seed, run index): the codes are a function
// of the input, the seed and the layout alone, the same on every machine and every run.
//
// Codes are packed little-end first: 8 bits one per byte; 4 bits element 2j in the low nibble;
// 2 bits element 4j in bits 0-1 up to 4j+3 in bits 6-7. The unused high bits of a last partial
// byte are zero (a decoder rejects them otherwise: padding_is_zero()).
//
// Deterministic: plain IEEE fp32 operations in a fixed order (the layer is built with
// -ffp-contract=off and never with -ffast-math), so every machine encodes the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geoccl::compression::affine {

enum class Rounding : uint8_t { kNearest, kStochastic };

struct Fit {
  float min = 0.0f;
  float step = 0.0f;  // NaN (with min) when the run held a NaN or Inf
};

// Fits x[0, n) (1 <= n < 2^32) to codes 0..levels (1 <= levels <= 255) and writes one code
// per value to codes[0, n). `key` (stochastic only) is dither_key() of the run.
Fit quantize(const float* x, size_t n, uint32_t levels, Rounding rounding, uint32_t key,
             uint8_t* codes);

// The key of run `run` of a buffer encoded with `seed`: a hash of both.
uint32_t dither_key(uint32_t seed, uint64_t run);

// u for position i of a run with `key`: the top 24 bits of a 32-bit integer hash of key ^ i,
// times 2^-24, so u in [0, 1) takes 2^24 equally likely values.
inline float dither(uint32_t key, uint32_t i) {
  uint32_t h = key ^ i;
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return static_cast<float>(static_cast<int32_t>(h >> 8)) * 0x1p-24f;
}

// dst[i] = min + codes[i] * step (kAdd: dst[i] += that), for i < n.
template <bool kAdd>
void dequantize(const uint8_t* codes, size_t n, Fit fit, float* dst);

// Bytes of n codes of `bits` (2, 4 or 8) bits.
inline size_t packed_bytes(uint32_t bits, size_t n) { return (n * bits + 7) / 8; }
// codes[0, n) (each below 2^bits) into out[0, packed_bytes(bits, n)), and back.
void pack(uint32_t bits, const uint8_t* codes, size_t n, uint8_t* out);
void unpack(uint32_t bits, const uint8_t* in, size_t n, uint8_t* codes);
// Whether the unused bits of the last byte of n packed codes are zero.
bool padding_is_zero(uint32_t bits, const uint8_t* in, size_t n);

// Sign + magnitude codes, for values that keep their sign exactly (top-k's quantized values,
// sparse pieces): code = sign << (bits - 1) | magnitude code, the magnitudes fitted over the run
// with L = 2^(bits-1) - 1 levels, round to nearest. Stored as an f32 min and an f32 step (the
// magnitudes' fit), then the m codes packed: kSignedFitBytes + packed_bytes(bits, m) bytes.
inline constexpr size_t kSignedFitBytes = 8;
// Encodes v[0, m) (1 <= m < 2^32; bits 2, 4 or 8) into out; overwrites v with the magnitudes.
// codes and mag_codes: scratch of m bytes each.
void store_signed(uint32_t bits, float* v, size_t m, uint8_t* codes, uint8_t* mag_codes, uint8_t* out);
// Decodes m values stored by store_signed into v; codes: scratch of m bytes. The caller checks
// padding_is_zero() of the packed codes (at in + kSignedFitBytes) first.
void load_signed(uint32_t bits, const uint8_t* in, size_t m, uint8_t* codes, float* v);

}  // namespace geoccl::compression::affine
