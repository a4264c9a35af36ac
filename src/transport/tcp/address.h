// The TCP device's published address: where peers dial this rank.
//
//   u8 version (1) | u32 length | endpoint "ip:port" or "[v6]:port" (UTF-8)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace geoccl::transport::tcp {

std::vector<uint8_t> encode_address(const std::string& endpoint);
// False for bytes that are not a TCP address of this version (lengths checked, host:port parsed).
bool decode_address(std::span<const uint8_t> in, std::string* endpoint);
// "host:port", bracketing an IPv6 host.
std::string join_host_port(const std::string& host, uint16_t port);

}  // namespace geoccl::transport::tcp
