#include "adversary.h"

#include <algorithm>
#include <cstring>

namespace geoccl::testbed {
namespace {

constexpr std::uint8_t kProtoTcp = 6;

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
std::uint16_t be16(const std::uint8_t* p) { return static_cast<std::uint16_t>((p[0] << 8) | p[1]); }

// The 16-bit one's-complement sum of `bytes` (big-endian words, an odd last
// byte padded with zero), added to `sum` without folding.
std::uint64_t add_words(std::uint64_t sum, const std::uint8_t* bytes, std::size_t n) {
  std::size_t i = 0;
  for (; i + 1 < n; i += 2) sum += be16(bytes + i);
  if (i < n) sum += std::uint32_t{bytes[i]} << 8;
  return sum;
}

}  // namespace

std::optional<TcpSegment> parse_tcp_segment(std::span<const std::uint8_t> packet) {
  if (packet.size() < 20 || (packet[0] >> 4) != 4) return std::nullopt;
  const std::size_t ihl = std::size_t{packet[0] & 0x0Fu} * 4;
  const std::size_t total = be16(&packet[2]);
  if (ihl < 20 || total < ihl || total > packet.size()) return std::nullopt;
  if (packet[9] != kProtoTcp) return std::nullopt;
  // A fragment (more fragments set, or a non-zero offset) holds part of a segment only: its
  // checksum cannot be recomputed here.
  if ((be16(&packet[6]) & 0x3FFFu) != 0) return std::nullopt;
  if (total - ihl < 20) return std::nullopt;
  const std::size_t thl = static_cast<std::size_t>(packet[ihl + 12] >> 4) * 4;
  if (thl < 20 || ihl + thl > total) return std::nullopt;
  TcpSegment s;
  s.flow = TcpFlow{be32(&packet[12]), be32(&packet[16]), be16(&packet[ihl]), be16(&packet[ihl + 2])};
  s.tcp_offset = ihl;
  s.payload_offset = ihl + thl;
  s.payload_size = total - ihl - thl;
  return s;
}

std::span<const std::uint8_t> payload_of(std::span<const std::uint8_t> packet, const TcpSegment& s) {
  return packet.subspan(s.payload_offset, s.payload_size);
}

void update_tcp_checksum(std::span<std::uint8_t> packet, const TcpSegment& s) {
  std::uint8_t* tcp = packet.data() + s.tcp_offset;
  const std::size_t tcp_len = s.payload_offset + s.payload_size - s.tcp_offset;
  tcp[16] = tcp[17] = 0;
  std::uint64_t sum = add_words(0, packet.data() + 12, 8);  // source and destination address
  sum += kProtoTcp;
  sum += tcp_len;
  sum = add_words(sum, tcp, tcp_len);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  const auto csum = static_cast<std::uint16_t>(~sum & 0xFFFF);
  tcp[16] = static_cast<std::uint8_t>(csum >> 8);
  tcp[17] = static_cast<std::uint8_t>(csum & 0xFF);
}

bool flip_payload_byte(std::span<std::uint8_t> packet, std::size_t index) {
  const auto s = parse_tcp_segment(packet);
  if (!s || index >= s->payload_size) return false;
  packet[s->payload_offset + index] ^= 0xFF;
  update_tcp_checksum(packet, *s);
  return true;
}

std::size_t overwrite_payload(std::span<std::uint8_t> packet, std::span<const std::uint8_t> earlier) {
  const auto s = parse_tcp_segment(packet);
  if (!s) return 0;
  const std::size_t n = std::min(s->payload_size, earlier.size());
  if (n == 0) return 0;
  std::memmove(packet.data() + s->payload_offset, earlier.data(), n);
  update_tcp_checksum(packet, *s);
  return n;
}

bool payload_contains(std::span<const std::uint8_t> packet, std::span<const std::uint8_t> pattern) {
  const auto s = parse_tcp_segment(packet);
  if (!s || pattern.empty() || pattern.size() > s->payload_size) return false;
  const auto payload = payload_of(packet, *s);
  return std::search(payload.begin(), payload.end(), pattern.begin(), pattern.end()) != payload.end();
}

}  // namespace geoccl::testbed
