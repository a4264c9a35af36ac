// Arrays of fp32 to IEEE binary16 and back, bit for bit what core/half.h gives element by element
// (round to nearest even; a NaN becomes sign | 0x7e00, and a half NaN widens to the float with
// the same sign and payload), with the x86 F16C instructions where the CPU has them (chosen once,
// at the first call) and the portable loop elsewhere. The 16-bit values are little-endian and
// need no alignment.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geoccl::core {

// out[2i, 2i+2) = float_to_half(src[i]) for i < n.
void floats_to_halves(const float* src, size_t n, uint8_t* out);
// dst[i] = half_to_float(in[2i, 2i+2)) for i < n; with kAdd, dst[i] += that instead.
void halves_to_floats(const uint8_t* in, size_t n, float* dst);
void halves_add_to_floats(const uint8_t* in, size_t n, float* dst);

// Whether the F16C path is in use on this machine (false: the portable loop).
bool half_array_uses_f16c();

}  // namespace geoccl::core
