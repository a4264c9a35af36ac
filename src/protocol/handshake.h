// The connection handshake. The connecting rank sends a Hello; the accepting rank checks it and
// answers with a Reply. A stranger (bad magic), another protocol version, another session or an
// impossible rank is rejected with a reason, and the connection is closed.
//
// Hello (28 bytes): u64 magic "GEOCCLHS" | u16 version | u16 stream | u32 rank |
//                   u32 world_size | u64 session_id
// Reply (16 bytes): u64 magic "GEOCCLHR" | u16 version | u8 status | u8 reserved(0) | u32 rank
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace geoccl::protocol {

inline constexpr uint64_t kHelloMagic = 0x5348'4C43'434F'4547ull;  // "GEOCCLHS"
inline constexpr uint64_t kReplyMagic = 0x5248'4C43'434F'4547ull;  // "GEOCCLHR"
// 2: frame header bytes 40..47 carry the per-pair frame number (striping).
// 3: ack frames; a Hello for a data stream that exists replaces it (stream re-established).
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr size_t kHelloSize = 28;
inline constexpr size_t kReplySize = 16;

struct Hello {
  uint16_t version = kProtocolVersion;
  uint16_t stream = 0;  // which of the pair's connections this is (0 = control)
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t session_id = 0;
};

enum class HandshakeStatus : uint8_t {
  kAccepted = 0,
  kBadMagic = 1,
  kBadVersion = 2,
  kBadSession = 3,
  kBadRank = 4,
  kBadWorldSize = 5,
  kMalformed = 6,
  kBadStream = 7,
};
const char* handshake_status_name(HandshakeStatus s);

struct Reply {
  uint16_t version = kProtocolVersion;
  HandshakeStatus status = HandshakeStatus::kAccepted;
  uint32_t rank = 0;
};

std::array<uint8_t, kHelloSize> encode_hello(const Hello& h);
std::array<uint8_t, kReplySize> encode_reply(const Reply& r);

// Decodes the bytes only (magic, reserved fields); returns kAccepted, kBadMagic or kMalformed.
HandshakeStatus decode_hello(std::span<const uint8_t, kHelloSize> in, Hello* out);
HandshakeStatus decode_reply(std::span<const uint8_t, kReplySize> in, Reply* out);

// The accepting side's verdict on a decoded Hello.
HandshakeStatus check_hello(const Hello& h, uint32_t my_world_size, uint64_t my_session_id,
                            uint16_t num_streams);

}  // namespace geoccl::protocol
