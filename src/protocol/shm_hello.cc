#include "protocol/shm_hello.h"

#include "protocol/wire.h"

namespace geoccl::protocol::shm {

std::vector<uint8_t> encode_extension(const Extension& e) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.u64(e.ring_bytes);
  w.bytes(e.token);
  return out;
}

bool decode_extension(std::span<const uint8_t> in, Extension* out) {
  if (in.size() != kExtensionSize) return false;
  Reader r(in);
  Extension e;
  r.u64(&e.ring_bytes);
  for (auto& b : e.token) r.u8(&b);
  if (!r.ok()) return false;
  *out = e;
  return true;
}

std::string check_extension(const Extension& e) {
  if (e.ring_bytes < kMinRingBytes || e.ring_bytes > (1ull << 30) || e.ring_bytes % kRingQuantum != 0)
    return "ring size " + std::to_string(e.ring_bytes) + " is not a multiple of 64 in [4 KiB, 1 GiB]";
  return "";
}

}  // namespace geoccl::protocol::shm
