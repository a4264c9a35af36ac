// The connection handshake. The connecting rank sends a Hello; the accepting rank checks it and
// answers with a Reply. A stranger (bad magic), another protocol version, another session, other
// group parameters or an impossible rank is rejected with a reason, and the connection is closed.
//
// Hello (58 bytes):
//   off size field
//     0    8 magic        "GEOCCLHS"
//     8    2 version      major protocol version (kProtocolVersion); must be equal
//    10    2 stream       which of the pair's connections this is (0 = control)
//    12    4 rank
//    16    4 world_size
//    20    8 session_id
//    28    2 minor        minor version of the sender (any value is accepted; a dial-back
//                         request to a rank with a secret needs kMinorDialBackProof)
//    30    4 flags        capabilities of the sender: kHelloFlagAuth (4.1)
//    34    8 params_hash  GroupParams::hash() of the sender's group parameters; must be equal
//    42    4 via          kHelloFlagRelayRequest: the rank to connect the sender to;
//                         kHelloFlagRelayed: the rank whose relay carries this connection (4.2)
//    46    1 transport    which transport's connection this is (Transport; 4.3)
//    47    1 extension    bytes of the transport's extension right behind the Hello (4.3)
//    48   10 reserved
// Reply (38 bytes):
//     0    8 magic        "GEOCCLHR"
//     8    2 version      major version of the acceptor
//    10    1 status       HandshakeStatus
//    11    1 reserved
//    12    4 rank         the acceptor's rank
//    16    2 minor        minor version of the acceptor
//    18    4 flags        capabilities of the acceptor: kHelloFlagAuth (4.1)
//    22    2 reason       bytes of the refusal's reason text right behind the Reply (4.3)
//    24   14 reserved
//
// Every transport speaks this one handshake (handshake_machine.h drives it): TCP on each stream,
// shared memory on its unix socket (the extension names the segment it shares), QUIC on its
// control stream (TLS authenticates, so no secret rides in it).
//
// Relays (minor 2). A rank that cannot reach a peer directly (a firewall, a cut path) asks a third
// rank to carry the connection: it sends that rank a Hello with kHelloFlagRelayRequest and `via`
// = the peer. The relay checks it like any Hello, connects to the peer's published address and
// answers with a Reply: kAccepted once it reaches the peer (from then on it forwards bytes both
// ways, unread), kUnreachable if it cannot. The dialler then runs the ordinary handshake with the
// peer through that tunnel, end to end (its Hello says kHelloFlagRelayed and `via` = the relay),
// so authentication and frame sealing are between the two ends only.
//
// Rules for what comes next:
//   - The first bytes keep the layout of version 3 (a Hello's first 28 bytes, a Reply's first
//     16), and magic and major version stay at offsets 0 and 8 in every version, so any version
//     can tell another one apart and answer kBadVersion.
//   - Another major version is rejected. A minor version adds only what an older minor of the
//     same major may ignore: flag bits and fields in the reserved bytes. A feature is used on a
//     connection only when both sides' minor (or flags) announce it.
//   - Encoders of this version write zero in the reserved bytes. Decoders of this version
//     ignore the reserved bytes (they are not kept in Hello/Reply) and flag bits they do not know
//     (kept in `flags`, acted on by nobody).
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace geoccl::protocol {

inline constexpr uint64_t kHelloMagic = 0x5348'4C43'434F'4547ull;  // "GEOCCLHS"
inline constexpr uint64_t kReplyMagic = 0x5248'4C43'434F'4547ull;  // "GEOCCLHR"
// 2: frame header bytes 40..47 carry the per-pair frame number (striping).
// 3: ack frames; a Hello for a data stream that exists replaces it (stream re-established).
// 4: 64-byte frame header (flags, channel, epoch); group parameter hash, minor version, flags
//    and reserved bytes in the handshake.
inline constexpr uint16_t kProtocolVersion = 4;
// Minor 1: kHelloFlagAuth. A Hello with it is followed by security::AuthInit; a Reply that accepts
// it by AuthResp, then the dialler sends AuthFin (security/auth.h). Both sides must agree: a rank
// with a group secret rejects a Hello without the flag, and one without a secret a Hello with it
// (kAuthMismatch), so a secret on one side only is a clear error at connect.
// Minor 2: relays (kHelloFlagRelayRequest, kHelloFlagRelayed, `via`, kUnreachable).
// Minor 3: `transport`, the transport's extension, the Reply's reason, kBadTransport, kRefused.
// Minor 4: kHelloFlagDialBack (connections made on demand).
// Minor 5: a dial-back request carries the dialler's proof when the group has a secret.
inline constexpr uint16_t kProtocolMinor = 5;
// The first minor whose dial-back request carries the proof: a rank with a secret refuses an
// older one's request (it would come without a proof).
inline constexpr uint16_t kMinorDialBackProof = 5;
inline constexpr uint32_t kHelloFlagAuth = 1u << 0;
inline constexpr uint32_t kHelloFlagRelayRequest = 1u << 1;
inline constexpr uint32_t kHelloFlagRelayed = 1u << 2;
// A lower rank asks the higher one to dial it (a pair connected on demand, whose lower end has
// something to send first): the acceptor answers with a Reply and closes, and dials back. With a
// group secret the request is authenticated as a connection is (AuthInit, AuthResp, AuthFin; minor
// 5), and the acceptor dials back only once the dialler has proved the secret: a stranger cannot
// make a rank connect out.
inline constexpr uint32_t kHelloFlagDialBack = 1u << 3;
inline constexpr size_t kHelloSize = 58;
inline constexpr size_t kReplySize = 38;
inline constexpr size_t kReplyReserved = 14;  // after `reason`
inline constexpr size_t kHelloReserved = 10;  // after `extension`
inline constexpr size_t kMaxExtension = 255;
inline constexpr size_t kMaxReason = 400;

// The transport a connection belongs to: an acceptor takes only its own transport's Hellos.
enum class Transport : uint8_t { kTcp = 0, kSharedMemory = 1, kQuic = 2 };
const char* transport_name(Transport t);

struct Hello {
  uint16_t version = kProtocolVersion;
  uint16_t stream = 0;  // which of the pair's connections this is (0 = control)
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t session_id = 0;
  uint16_t minor = kProtocolMinor;
  uint32_t flags = 0;
  uint64_t params_hash = 0;  // membership::GroupParams::hash()
  uint32_t via = 0;          // relay flags only (see above); 0 otherwise
  uint8_t transport = 0;     // a Transport
  uint8_t extension = 0;     // bytes of the transport's extension that follow

  bool operator==(const Hello&) const = default;
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
  kBadParams = 8,
  kAuthMismatch = 9,  // one side has a group secret, the other does not
  kUnreachable = 10,  // a relay could not reach the rank it was asked to connect to (minor 2)
  kBadTransport = 11, // another transport's Hello (minor 3)
  kRefused = 12,      // the acceptor's transport refused what the Hello brings; the reason says why
};
const char* handshake_status_name(HandshakeStatus s);

struct Reply {
  uint16_t version = kProtocolVersion;
  HandshakeStatus status = HandshakeStatus::kAccepted;
  uint32_t rank = 0;
  uint16_t minor = kProtocolMinor;
  uint32_t flags = 0;
  uint16_t reason = 0;  // bytes of reason text that follow (at most kMaxReason)

  bool operator==(const Reply&) const = default;
};

std::array<uint8_t, kHelloSize> encode_hello(const Hello& h);
std::array<uint8_t, kReplySize> encode_reply(const Reply& r);

// Decodes the bytes only; returns kAccepted, kBadMagic or kMalformed (a Reply status this
// version does not know, a reason longer than kMaxReason).
HandshakeStatus decode_hello(std::span<const uint8_t, kHelloSize> in, Hello* out);
HandshakeStatus decode_reply(std::span<const uint8_t, kReplySize> in, Reply* out);

// The accepting side's verdict on a decoded Hello: kBadVersion, kBadSession, kBadWorldSize,
// kBadParams (`my_params_hash` differs), kBadRank, kBadStream, in that order, or kAccepted. With a
// relay flag, `via` must be another rank of the group than the sender (kBadRank), and the two
// flags never come together (kMalformed).
HandshakeStatus check_hello(const Hello& h, uint32_t my_world_size, uint64_t my_session_id,
                            uint16_t num_streams, uint64_t my_params_hash);
// kAuthMismatch when the Hello's kHelloFlagAuth differs from `authenticated` (this rank has a
// group secret), else kAccepted.
HandshakeStatus check_auth_flag(const Hello& h, bool authenticated);

}  // namespace geoccl::protocol
