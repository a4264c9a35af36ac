#include "protocol/handshake.h"

#include <algorithm>
#include <vector>

#include "protocol/wire.h"

namespace geoccl::protocol {

const char* handshake_status_name(HandshakeStatus s) {
  switch (s) {
    case HandshakeStatus::kAccepted: return "accepted";
    case HandshakeStatus::kBadMagic: return "not a geoccl peer (bad magic)";
    case HandshakeStatus::kBadVersion: return "protocol version mismatch";
    case HandshakeStatus::kBadSession: return "different session (another job?)";
    case HandshakeStatus::kBadRank: return "rank out of range";
    case HandshakeStatus::kBadWorldSize: return "world size mismatch";
    case HandshakeStatus::kMalformed: return "malformed handshake";
    case HandshakeStatus::kBadStream: return "stream index out of range";
    case HandshakeStatus::kBadParams: return "group parameters differ";
    case HandshakeStatus::kAuthMismatch:
      return "one side has a group secret (GEOCCL_SECRET / GEOCCL_SECRET_FILE), the other not";
    case HandshakeStatus::kUnreachable: return "the relay cannot reach that rank";
    case HandshakeStatus::kBadTransport: return "another transport's handshake";
    case HandshakeStatus::kRefused: return "refused";
  }
  return "unknown";
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kTcp: return "tcp";
    case Transport::kSharedMemory: return "shm";
    case Transport::kQuic: return "quic";
  }
  return "unknown";
}

namespace {

template <size_t N>
std::array<uint8_t, N> to_array(const std::vector<uint8_t>& v) {
  std::array<uint8_t, N> out{};
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

void write_reserved(Writer& w, size_t n) {
  for (size_t i = 0; i < n; ++i) w.u8(0);
}

}  // namespace

std::array<uint8_t, kHelloSize> encode_hello(const Hello& h) {
  std::vector<uint8_t> v;
  Writer w(&v);
  w.u64(kHelloMagic);
  w.u16(h.version);
  w.u16(h.stream);
  w.u32(h.rank);
  w.u32(h.world_size);
  w.u64(h.session_id);
  w.u16(h.minor);
  w.u32(h.flags);
  w.u64(h.params_hash);
  w.u32(h.via);
  w.u8(h.transport);
  w.u8(h.extension);
  write_reserved(w, kHelloReserved);
  return to_array<kHelloSize>(v);
}

std::array<uint8_t, kReplySize> encode_reply(const Reply& r) {
  std::vector<uint8_t> v;
  Writer w(&v);
  w.u64(kReplyMagic);
  w.u16(r.version);
  w.u8(static_cast<uint8_t>(r.status));
  w.u8(0);
  w.u32(r.rank);
  w.u16(r.minor);
  w.u32(r.flags);
  w.u16(r.reason);
  write_reserved(w, kReplyReserved);
  return to_array<kReplySize>(v);
}

// The reserved bytes are read past, not checked: a newer minor version may use them.
HandshakeStatus decode_hello(std::span<const uint8_t, kHelloSize> in, Hello* out) {
  Reader r(in);
  uint64_t magic = 0;
  Hello h;
  r.u64(&magic);
  r.u16(&h.version);
  r.u16(&h.stream);
  r.u32(&h.rank);
  r.u32(&h.world_size);
  r.u64(&h.session_id);
  r.u16(&h.minor);
  r.u32(&h.flags);
  r.u64(&h.params_hash);
  r.u32(&h.via);
  r.u8(&h.transport);
  r.u8(&h.extension);
  if (magic != kHelloMagic) return HandshakeStatus::kBadMagic;
  if (!r.ok() || r.remaining() != kHelloReserved) return HandshakeStatus::kMalformed;
  *out = h;
  return HandshakeStatus::kAccepted;
}

HandshakeStatus decode_reply(std::span<const uint8_t, kReplySize> in, Reply* out) {
  Reader r(in);
  uint64_t magic = 0;
  uint8_t status = 0, reserved = 0;
  Reply rep;
  r.u64(&magic);
  r.u16(&rep.version);
  r.u8(&status);
  r.u8(&reserved);
  r.u32(&rep.rank);
  r.u16(&rep.minor);
  r.u32(&rep.flags);
  r.u16(&rep.reason);
  if (magic != kReplyMagic) return HandshakeStatus::kBadMagic;
  if (!r.ok() || r.remaining() != kReplyReserved || rep.reason > kMaxReason ||
      status > static_cast<uint8_t>(HandshakeStatus::kRefused))
    return HandshakeStatus::kMalformed;
  rep.status = static_cast<HandshakeStatus>(status);
  *out = rep;
  return HandshakeStatus::kAccepted;
}

HandshakeStatus check_hello(const Hello& h, uint32_t my_world_size, uint64_t my_session_id,
                            uint16_t num_streams, uint64_t my_params_hash) {
  if (h.version != kProtocolVersion) return HandshakeStatus::kBadVersion;
  if (h.session_id != my_session_id) return HandshakeStatus::kBadSession;
  if (h.world_size != my_world_size) return HandshakeStatus::kBadWorldSize;
  if (h.params_hash != my_params_hash) return HandshakeStatus::kBadParams;
  if (h.rank >= my_world_size) return HandshakeStatus::kBadRank;
  if (h.stream >= num_streams) return HandshakeStatus::kBadStream;
  const uint32_t relay = h.flags & (kHelloFlagRelayRequest | kHelloFlagRelayed);
  if (relay == (kHelloFlagRelayRequest | kHelloFlagRelayed)) return HandshakeStatus::kMalformed;
  if (relay && (h.via >= my_world_size || h.via == h.rank)) return HandshakeStatus::kBadRank;
  return HandshakeStatus::kAccepted;
}

HandshakeStatus check_auth_flag(const Hello& h, bool authenticated) {
  return ((h.flags & kHelloFlagAuth) != 0) == authenticated ? HandshakeStatus::kAccepted
                                                             : HandshakeStatus::kAuthMismatch;
}

}  // namespace geoccl::protocol
