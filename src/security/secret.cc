#include "security/secret.h"

#include <sodium.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

#include "geoccl/config.h"
#include "geoccl/error.h"

namespace geoccl::security {

namespace {
constexpr size_t kMinSecretBytes = 16;
constexpr char kSecretContext[] = "geoccl group secret v1";
constexpr char kJobContext[] = "geoccl job key v1";
}  // namespace

void init_sodium() {
  static std::once_flag once;
  static int rc = 0;
  std::call_once(once, [] { rc = sodium_init(); });
  if (rc < 0) throw Error(ErrorCode::kInternal, "libsodium failed to initialise");
}

const char* cipher_name(uint8_t cipher_bit) {
  switch (cipher_bit) {
    case kCipherAes256Gcm: return "aes256gcm";
    case kCipherXChaCha20Poly1305: return "xchacha20poly1305";
  }
  return "none";
}

uint8_t offered_ciphers(const std::string& choice) {
  init_sodium();
  const bool aes = crypto_aead_aes256gcm_is_available() != 0;
  if (choice.empty() || choice == "auto") return static_cast<uint8_t>(kCipherXChaCha20Poly1305 | (aes ? kCipherAes256Gcm : 0));
  if (choice == "xchacha20poly1305") return kCipherXChaCha20Poly1305;
  if (choice == "aes256gcm") {
    if (!aes) throw Error(ErrorCode::kInvalidArgument, "GEOCCL_CIPHER=aes256gcm, but this CPU has no AES-NI");
    return kCipherAes256Gcm;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "GEOCCL_CIPHER='" + choice + "' is not auto, aes256gcm or xchacha20poly1305");
}

std::optional<Key> load_secret(const Config& cfg) {
  if (!cfg.secret.empty() && !cfg.secret_file.empty())
    throw Error(ErrorCode::kInvalidArgument, "GEOCCL_SECRET and GEOCCL_SECRET_FILE are both set; set one");
  std::string secret = cfg.secret;
  if (!cfg.secret_file.empty()) {
    std::ifstream in(cfg.secret_file, std::ios::binary);
    if (!in)
      throw Error(ErrorCode::kInvalidArgument, "GEOCCL_SECRET_FILE: cannot read " + cfg.secret_file);
    secret.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!secret.empty() && secret.back() == '\n') secret.pop_back();
    if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  }
  if (secret.empty()) return std::nullopt;
  if (secret.size() < kMinSecretBytes)
    throw Error(ErrorCode::kInvalidArgument, "the group secret has " + std::to_string(secret.size()) +
                                                 " bytes; at least " + std::to_string(kMinSecretBytes) +
                                                 " are needed (`geoccl run` makes one of 64 hex digits)");
  init_sodium();
  Key k{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, k.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kSecretContext), sizeof kSecretContext);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  crypto_generichash_final(&st, k.data(), k.size());
  sodium_memzero(secret.data(), secret.size());
  return k;
}

GroupKey job_key(const Key& secret, uint64_t session_id, uint8_t ciphers) {
  init_sodium();
  GroupKey g;
  g.ciphers = ciphers;
  unsigned char msg[sizeof kJobContext + 8];
  std::copy(kJobContext, kJobContext + sizeof kJobContext, msg);
  for (int i = 0; i < 8; ++i) msg[sizeof kJobContext + i] = static_cast<unsigned char>(session_id >> (8 * i));
  crypto_generichash(g.job_key.data(), g.job_key.size(), msg, sizeof msg, secret.data(), secret.size());
  return g;
}

std::string random_secret_hex() {
  init_sodium();
  Key k{};
  randombytes_buf(k.data(), k.size());
  char hex[2 * kKeyBytes + 1];
  sodium_bin2hex(hex, sizeof hex, k.data(), k.size());
  return hex;
}

}  // namespace geoccl::security
