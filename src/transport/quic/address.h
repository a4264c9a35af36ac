// The QUIC device's published address: where peers send this rank's UDP datagrams, and the
// SHA-256 fingerprint of the certificate this rank presents in the TLS 1.3 handshake (a
// self-signed key per rank and job, tls.h). A peer accepts the handshake only when the
// certificate it is shown has the fingerprint published here, so the store pins every rank's key.
//
//   u8 version (1) | u32 length | endpoint "ip:port" or "[v6]:port" (UTF-8) | 32 fingerprint
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace geoccl::transport::quic {

using Fingerprint = std::array<uint8_t, 32>;

struct Address {
  std::string endpoint;
  Fingerprint fingerprint{};
};

std::vector<uint8_t> encode_address(const Address& a);
// False for bytes that are not a QUIC address of this version (lengths checked, host:port
// parsed).
bool decode_address(std::span<const uint8_t> in, Address* out);

}  // namespace geoccl::transport::quic
