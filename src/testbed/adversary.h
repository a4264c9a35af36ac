// What an on-path adversary can do to one IPv4 packet carrying TCP, free of
// I/O: find the TCP payload, flip a payload byte, overwrite the payload with
// bytes captured earlier, search it for a byte pattern. Every change keeps the
// packet's length and recomputes the TCP checksum (pseudo-header included), so
// the receiving kernel accepts the packet as if the sender had sent it: the
// change reaches the application, which is what the attack is for. The IPv4
// header is never changed, so its checksum stays valid.
//
// Packets that are not IPv4 + TCP, are fragments, are truncated or carry no
// payload are left alone (the operations return false / nullopt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace geoccl::testbed {

// One direction of one TCP connection.
struct TcpFlow {
  std::uint32_t src_addr = 0;  // host order
  std::uint32_t dst_addr = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  bool operator==(const TcpFlow&) const = default;
};

struct TcpSegment {
  TcpFlow flow;
  std::size_t tcp_offset = 0;      // of the TCP header in the packet
  std::size_t payload_offset = 0;  // of the payload in the packet
  std::size_t payload_size = 0;    // may be 0 (a pure ACK, SYN, FIN)
};

// The TCP segment in `packet`, or nullopt when it is not an unfragmented IPv4
// packet carrying a complete TCP header. Bytes after the IPv4 total length
// (padding) are not part of the segment.
std::optional<TcpSegment> parse_tcp_segment(std::span<const std::uint8_t> packet);

// XORs the payload byte at `index` (of the payload) with 0xFF. False, and the
// packet unchanged, when there is no such payload byte.
bool flip_payload_byte(std::span<std::uint8_t> packet, std::size_t index);

// Overwrites the payload with `earlier` (the payload of an earlier segment):
// its first min(payload size, earlier.size()) bytes; the packet keeps its
// length and sequence number, so the receiver's TCP takes the bytes as the
// ones due there. Returns how many bytes were written (0: nothing changed).
std::size_t overwrite_payload(std::span<std::uint8_t> packet, std::span<const std::uint8_t> earlier);

// Whether the payload contains `pattern` anywhere (false for an empty pattern).
bool payload_contains(std::span<const std::uint8_t> packet, std::span<const std::uint8_t> pattern);

// The payload bytes of a parsed segment.
std::span<const std::uint8_t> payload_of(std::span<const std::uint8_t> packet, const TcpSegment& s);

// Recomputes the TCP checksum over the pseudo-header and the segment.
void update_tcp_checksum(std::span<std::uint8_t> packet, const TcpSegment& s);

}  // namespace geoccl::testbed
