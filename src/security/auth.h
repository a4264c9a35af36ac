// Mutual authentication of one connection, I/O-free. Runs right after the plain Hello/Reply
// (protocol/handshake.h) of a connection whose Hello carries kHelloFlagAuth, and gives the
// connection its own keys, one per direction:
//
//   dialler  -> acceptor  Hello, AuthInit  = magic "GEOCCLA1", ciphers offered (u8), X25519 e_d
//   acceptor -> dialler   Reply, AuthResp  = magic "GEOCCLA2", cipher chosen (u8), X25519 e_a,
//                                            mac_a (32)
//   dialler  -> acceptor  AuthFin          = magic "GEOCCLA3", status (u8), mac_d (32)
//
//   th    = BLAKE2b-256("geoccl auth v1" || Hello || Reply || AuthInit || AuthResp without mac_a)
//   prk   = BLAKE2b-256(key = job key, X25519(e, e_peer) || th)
//   keys  = crypto_kdf(prk, "geocclk1"): 1 dialler->acceptor, 2 acceptor->dialler, 3 and 4 the
//           MAC keys of the two proofs
//   mac_a = BLAKE2b-256(key 3, th); mac_d = BLAKE2b-256(key 4, th || mac_a)
//
// Each side proves it holds the job key (the group secret bound to the session) over a transcript
// that holds fresh ephemeral keys of both sides, the ranks, the stream and the session, so a proof
// cannot be replayed on another connection. The ephemeral Diffie-Hellman gives forward secrecy: a
// secret stolen later does not open traffic recorded earlier. A wrong secret on either side shows
// at the dialler, which checks mac_a first and says so in AuthFin (status kAuthBadProof), so both
// sides report it. The acceptor accepts no frame before a valid mac_d.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "security/secret.h"

namespace geoccl::security {

inline constexpr size_t kAuthInitSize = 8 + 1 + 32;
inline constexpr size_t kAuthRespSize = 8 + 1 + 32 + 32;
inline constexpr size_t kAuthFinSize = 8 + 1 + 32;
inline constexpr uint64_t kAuthInitMagic = 0x3141'4C43'434F'4547ull;  // "GEOCCLA1"
inline constexpr uint64_t kAuthRespMagic = 0x3241'4C43'434F'4547ull;  // "GEOCCLA2"
inline constexpr uint64_t kAuthFinMagic = 0x3341'4C43'434F'4547ull;   // "GEOCCLA3"

enum class AuthStatus : uint8_t {
  kOk = 0,
  kBadProof = 1,       // the peer's proof is wrong: it holds another secret (or is a stranger)
  kPeerRejected = 2,   // the peer found our proof wrong (AuthFin status kBadProof)
  kMalformed = 3,      // bytes that are no such message
  kNoCommonCipher = 4,
  kBadKey = 5,         // an ephemeral key of low order
};
const char* auth_status_name(AuthStatus s);

// Keys of one connection, as this side uses them.
struct ConnectionKeys {
  uint8_t cipher = 0;  // one CipherBits value
  Key send{}, recv{};
};

// Decoded messages (also for the fuzzer).
struct AuthInit {
  uint8_t ciphers = 0;
  std::array<uint8_t, 32> ephemeral{};
};
struct AuthResp {
  uint8_t cipher = 0;
  std::array<uint8_t, 32> ephemeral{};
  std::array<uint8_t, 32> mac{};
};
struct AuthFin {
  uint8_t status = 0;
  std::array<uint8_t, 32> mac{};
};
AuthStatus decode_auth_init(std::span<const uint8_t, kAuthInitSize> in, AuthInit* out);
AuthStatus decode_auth_resp(std::span<const uint8_t, kAuthRespSize> in, AuthResp* out);
AuthStatus decode_auth_fin(std::span<const uint8_t, kAuthFinSize> in, AuthFin* out);

class AuthDialler {
 public:
  explicit AuthDialler(const GroupKey& key);
  ~AuthDialler();
  std::array<uint8_t, kAuthInitSize> init() const { return init_; }
  // The acceptor's AuthResp, with the Hello and Reply bytes of this connection. Fills `fin` (to
  // send in every case where it returns kOk or kBadProof) and, on kOk, `keys`.
  AuthStatus on_resp(std::span<const uint8_t> hello, std::span<const uint8_t> reply,
                     std::span<const uint8_t, kAuthRespSize> resp, std::array<uint8_t, kAuthFinSize>* fin,
                     ConnectionKeys* keys);

 private:
  GroupKey key_;
  std::array<uint8_t, 32> secret_{};
  std::array<uint8_t, kAuthInitSize> init_{};
};

class AuthAcceptor {
 public:
  explicit AuthAcceptor(const GroupKey& key);
  ~AuthAcceptor();
  // The dialler's AuthInit with this connection's Hello and the Reply about to be sent: fills
  // `resp` on kOk.
  AuthStatus on_init(std::span<const uint8_t> hello, std::span<const uint8_t> reply,
                     std::span<const uint8_t, kAuthInitSize> init, std::array<uint8_t, kAuthRespSize>* resp);
  // The dialler's AuthFin: kOk with `keys` when its proof is right.
  AuthStatus on_fin(std::span<const uint8_t, kAuthFinSize> fin, ConnectionKeys* keys);

 private:
  GroupKey key_;
  std::array<uint8_t, 32> secret_{};
  bool ready_ = false;
  uint8_t cipher_ = 0;
  Key th_{}, d2a_{}, a2d_{}, mac_d_key_{}, mac_a_{};
};

}  // namespace geoccl::security
