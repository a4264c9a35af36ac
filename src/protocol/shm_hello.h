// The shared-memory transport's extension of the Hello (handshake.h, driven by
// handshake_machine.h). The dialler (higher rank) sends its Hello on the unix socket in one packet
// together with three descriptors (SCM_RIGHTS: the segment's memfd, the acceptor's wake-up
// eventfd, the dialler's); the extension behind the Hello says how large the segment's rings are
// and which token the segment holds. The acceptor maps the segment and compares the token it
// reads there with the extension's before it accepts.
//
// Extension (24 bytes): u64 ring_bytes | 16-byte token
//
// With a group secret the handshake authenticates both ends (security/auth.h) before the
// acceptor adopts the segment; its transcript holds the Hello with this extension. Frames then go
// through the shared memory unsealed: the segment's memfd reaches only the authenticated peer.
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
inline constexpr size_t kExtensionSize = 24;

using Token = std::array<uint8_t, 16>;

struct Extension {
  uint64_t ring_bytes = 0;  // capacity of each of the segment's two rings
  Token token{};
};

std::vector<uint8_t> encode_extension(const Extension& e);
// False for bytes that are no extension of this size.
bool decode_extension(std::span<const uint8_t> in, Extension* out);
// The acceptor's verdict: "" to accept, else the reason for the dialler (the ring size must be a
// multiple of 64 within [4 KiB, 1 GiB]).
std::string check_extension(const Extension& e);

}  // namespace geoccl::protocol::shm
