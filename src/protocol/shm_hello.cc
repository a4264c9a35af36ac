#include "protocol/shm_hello.h"

#include "protocol/handshake.h"
#include "protocol/wire.h"

namespace geoccl::protocol::shm {

using geoccl::protocol::HandshakeStatus;
using geoccl::protocol::handshake_status_name;

std::vector<uint8_t> encode_hello(const Hello& h) {
  std::vector<uint8_t> out;
  geoccl::protocol::Writer w(&out);
  w.u64(kHelloMagic);
  w.u16(h.version);
  w.u16(h.flags);
  w.u32(h.rank);
  w.u32(h.world_size);
  w.u32(0);
  w.u64(h.session_id);
  w.u64(h.params_hash);
  w.u64(h.ring_bytes);
  w.bytes(h.token);
  return out;
}

bool decode_hello(std::span<const uint8_t> in, Hello* out) {
  if (in.size() != kHelloSize) return false;
  geoccl::protocol::Reader r(in);
  uint64_t magic = 0;
  uint32_t reserved32 = 1;
  Hello h;
  r.u64(&magic);
  r.u16(&h.version);
  r.u16(&h.flags);
  r.u32(&h.rank);
  r.u32(&h.world_size);
  r.u32(&reserved32);
  r.u64(&h.session_id);
  r.u64(&h.params_hash);
  r.u64(&h.ring_bytes);
  for (auto& b : h.token) r.u8(&b);
  if (!r.ok() || magic != kHelloMagic || (h.flags & ~kShmFlagAuth) != 0 || reserved32 != 0) return false;
  *out = h;
  return true;
}

std::vector<uint8_t> encode_reply(const Reply& rep) {
  std::vector<uint8_t> out;
  geoccl::protocol::Writer w(&out);
  w.u64(kReplyMagic);
  w.u16(rep.version);
  w.u8(rep.accepted ? 1 : 0);
  w.u8(0);
  w.u32(rep.rank);
  w.str(rep.reason.substr(0, kMaxReason));
  return out;
}

bool decode_reply(std::span<const uint8_t> in, Reply* out) {
  geoccl::protocol::Reader r(in);
  uint64_t magic = 0;
  uint8_t accepted = 2, reserved = 1;
  Reply rep;
  r.u64(&magic);
  r.u16(&rep.version);
  r.u8(&accepted);
  r.u8(&reserved);
  r.u32(&rep.rank);
  r.str(&rep.reason, kMaxReason);
  if (!r.ok() || r.remaining() != 0 || magic != kReplyMagic || accepted > 1 || reserved != 0)
    return false;
  rep.accepted = accepted == 1;
  *out = std::move(rep);
  return true;
}

std::string check_hello(const Hello& h, int my_rank, int world_size, uint64_t session_id,
                        uint64_t params_hash) {
  if (h.version != kShmVersion)
    return std::string(handshake_status_name(HandshakeStatus::kBadVersion)) + " (shm " +
           std::to_string(h.version) + ", we speak " + std::to_string(kShmVersion) + ")";
  if (h.session_id != session_id) return handshake_status_name(HandshakeStatus::kBadSession);
  if (h.world_size != static_cast<uint32_t>(world_size))
    return std::string(handshake_status_name(HandshakeStatus::kBadWorldSize)) + " (" +
           std::to_string(h.world_size) + " vs " + std::to_string(world_size) + ")";
  if (h.rank >= static_cast<uint32_t>(world_size) || static_cast<int>(h.rank) <= my_rank)
    return std::string(handshake_status_name(HandshakeStatus::kBadRank)) + " (rank " +
           std::to_string(h.rank) + " cannot dial rank " + std::to_string(my_rank) +
           ": the higher rank of a pair dials)";
  if (h.params_hash != params_hash)
    return "group parameters differ from this rank's (params hash mismatch)";
  if (h.ring_bytes < kMinRingBytes || h.ring_bytes > (1ull << 30) || h.ring_bytes % kRingQuantum != 0)
    return "ring size " + std::to_string(h.ring_bytes) + " is not a multiple of 64 in [4 KiB, 1 GiB]";
  return "";
}

}  // namespace geoccl::protocol::shm
