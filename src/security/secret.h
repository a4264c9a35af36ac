// The group secret: where it comes from (GEOCCL_SECRET, GEOCCL_SECRET_FILE) and the job key every
// connection of one job authenticates with (docs/security.md).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace geoccl {
struct Config;
}

namespace geoccl::security {

inline constexpr size_t kKeyBytes = 32;
using Key = std::array<uint8_t, kKeyBytes>;

// The AEADs a rank may seal frames with (bits, so a handshake can offer several).
enum CipherBits : uint8_t {
  kCipherAes256Gcm = 1,           // where the CPU has AES-NI and PCLMUL
  kCipherXChaCha20Poly1305 = 2,   // everywhere
};
const char* cipher_name(uint8_t cipher_bit);
// The ciphers this rank offers for GEOCCL_CIPHER = auto | aes256gcm | xchacha20poly1305: auto
// offers AES-256-GCM only where the CPU accelerates it. Throws kInvalidArgument on another name
// or on aes256gcm without AES-NI.
uint8_t offered_ciphers(const std::string& choice);

// What a rank with a secret holds: the key of this job's handshakes (the secret bound to the
// session id, so two jobs sharing a secret still do not accept each other) and its ciphers.
struct GroupKey {
  Key job_key{};
  uint8_t ciphers = kCipherXChaCha20Poly1305;
};

// Initialises libsodium (idempotent, any thread). Throws kInternal when it cannot.
void init_sodium();

// The secret from the configuration: GEOCCL_SECRET (at least 16 bytes) or the contents of
// GEOCCL_SECRET_FILE (one trailing newline dropped), hashed to a 32-byte group key; nullopt when
// neither is set. Throws kInvalidArgument when both are set, the file is unreadable, or the secret
// is too short.
std::optional<Key> load_secret(const Config& cfg);

// The key of one job's handshakes: BLAKE2b keyed with the secret over the session id.
GroupKey job_key(const Key& secret, uint64_t session_id, uint8_t ciphers);

// A fresh random secret (64 hex digits), as `geoccl run` gives every job.
std::string random_secret_hex();

}  // namespace geoccl::security
