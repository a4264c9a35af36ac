#include "transport/tcp/address.h"

#include "geoccl/error.h"
#include "protocol/wire.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

namespace {
constexpr uint8_t kVersion = 1;
constexpr size_t kMaxEndpoint = 256;
}  // namespace

std::vector<uint8_t> encode_address(const std::string& endpoint) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u8(kVersion);
  w.str(endpoint);
  return out;
}

bool decode_address(std::span<const uint8_t> in, std::string* endpoint) {
  protocol::Reader r(in);
  uint8_t version = 0;
  std::string ep;
  if (!r.u8(&version) || version != kVersion || !r.str(&ep, kMaxEndpoint) || ep.empty() ||
      r.remaining() != 0)
    return false;
  try {
    std::string host;
    uint16_t port = 0;
    split_host_port(ep, &host, &port);
  } catch (const Error&) {
    return false;
  }
  *endpoint = std::move(ep);
  return true;
}

std::string join_host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace geoccl::transport::tcp
