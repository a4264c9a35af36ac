// The shared-memory handshake, I/O free. The dialler (higher rank) sends one Hello packet on the
// unix socket together with three descriptors (SCM_RIGHTS: the segment's memfd, the acceptor's
// wake-up eventfd, the dialler's); the acceptor checks it, maps the segment, compares the token it
// reads there with the Hello's, and answers with one Reply packet carrying a reason on refusal.
//
// Hello (64 bytes): u64 magic "GEOSHMHL" | u16 version | u16 flags | u32 rank |
//                   u32 world_size | u32 reserved(0) | u64 session_id | u64 params_hash |
//                   u64 ring_bytes | 16-byte token
// Reply: u64 magic "GEOSHMRP" | u16 version | u8 accepted | u8 reserved(0) | u32 rank |
//        str reason (empty when accepted; at most kMaxReason bytes)
//
// The shm Hello has its own magic so that neither transport's listener mistakes the other's
// peers; it carries the same group-parameter hash as protocol::Hello (handshake.h).
//
// With a group secret (flags kShmFlagAuth) the two ends authenticate each other with
// security/auth.h before the acceptor adopts the segment: the Hello packet carries AuthInit right
// behind its 64 bytes; the acceptor answers Reply, then AuthResp (its own packet); the dialler
// sends AuthFin; the acceptor answers with a second Reply, its verdict on the dialler's proof.
// The transcript both proofs cover holds the Hello and the first Reply. Frames then go through the
// shared memory unsealed: the segment's memfd reaches only the authenticated peer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace geoccl::protocol::shm {

// Ring capacities are multiples of this (transport/shm/ring.h checks that it agrees).
inline constexpr size_t kRingQuantum = 64;
// The smallest ring accepted: a frame header, its padding and payload bytes besides must fit.
inline constexpr size_t kMinRingBytes = 4096;

inline constexpr uint64_t kHelloMagic = 0x4C48'4D48'5345'4F47ull;  // "GEOSHMHL"
inline constexpr uint64_t kReplyMagic = 0x5052'4D48'5345'4F47ull;  // "GEOSHMRP"
inline constexpr uint16_t kShmVersion = 1;
inline constexpr size_t kHelloSize = 64;
inline constexpr size_t kMaxReason = 400;

using Token = std::array<uint8_t, 16>;

// Hello flags; a decoder refuses any other bit.
inline constexpr uint16_t kShmFlagAuth = 1;

struct Hello {
  uint16_t version = kShmVersion;
  uint16_t flags = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t session_id = 0;
  uint64_t params_hash = 0;
  uint64_t ring_bytes = 0;  // capacity of each of the segment's two rings
  Token token{};
};

struct Reply {
  uint16_t version = kShmVersion;
  bool accepted = false;
  uint32_t rank = 0;
  std::string reason;
};

std::vector<uint8_t> encode_hello(const Hello& h);
std::vector<uint8_t> encode_reply(const Reply& r);
// False for bytes that are not a shared-memory Hello / Reply (wrong magic, size, reserved or
// unknown flag bits).
bool decode_hello(std::span<const uint8_t> in, Hello* out);
bool decode_reply(std::span<const uint8_t> in, Reply* out);

// The acceptor's verdict on a decoded Hello: "" to accept, else the reason for the dialler.
// Checks version, session, world size, rank (a higher rank dials a lower one), group parameters
// and the ring size (a multiple of 64 within [4 KiB, 1 GiB]).
std::string check_hello(const Hello& h, int my_rank, int world_size, uint64_t session_id,
                        uint64_t params_hash);

}  // namespace geoccl::protocol::shm
