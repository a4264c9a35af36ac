// Host little-endian loads and stores of 16- and 32-bit fields at any alignment (the codecs'
// payloads, the fp16 arrays).
#pragma once

#include <cstdint>
#include <cstring>

namespace geoccl::core {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_f32(uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }

}  // namespace geoccl::core
