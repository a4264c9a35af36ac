#include "transport/quic/address.h"

#include "geoccl/error.h"
#include "protocol/wire.h"
#include "runtime/socket.h"

namespace geoccl::transport::quic {

namespace {
constexpr uint8_t kVersion = 1;
constexpr size_t kMaxEndpoint = 256;
}  // namespace

std::vector<uint8_t> encode_address(const Address& a) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u8(kVersion);
  w.str(a.endpoint);
  w.bytes(a.fingerprint);
  return out;
}

bool decode_address(std::span<const uint8_t> in, Address* out) {
  protocol::Reader r(in);
  uint8_t version = 0;
  Address a;
  if (!r.u8(&version) || version != kVersion || !r.str(&a.endpoint, kMaxEndpoint) || a.endpoint.empty() ||
      r.remaining() != a.fingerprint.size())
    return false;
  for (auto& b : a.fingerprint) r.u8(&b);
  try {
    std::string host;
    uint16_t port = 0;
    runtime::split_host_port(a.endpoint, &host, &port);
    if (port == 0) return false;
  } catch (const Error&) {
    return false;
  }
  *out = std::move(a);
  return true;
}

}  // namespace geoccl::transport::quic
