#include "security/sealer.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "geoccl/error.h"

namespace geoccl::security {

namespace {

// Big enough for both ciphers' nonces (12 and 24 bytes).
struct Nonce {
  unsigned char b[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES]{};
  Nonce(uint64_t counter, uint32_t record) {
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(counter >> (8 * i));
    for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<unsigned char>(record >> (8 * i));
  }
};
// AES-256-GCM takes the first 12 bytes as its IV (OpenSSL's default IV length for GCM).
static_assert(crypto_aead_aes256gcm_NPUBBYTES == 12 && crypto_aead_aes256gcm_ABYTES == kTagBytes &&
              crypto_aead_xchacha20poly1305_ietf_ABYTES == kTagBytes && crypto_aead_aes256gcm_KEYBYTES == kKeyBytes &&
              crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kKeyBytes);

}  // namespace

namespace {

EVP_CIPHER_CTX* keyed_context(const Key& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (!ctx) throw std::bad_alloc();
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    throw Error(ErrorCode::kInternal, "AES-256-GCM: OpenSSL refused the key");
  }
  return ctx;
}

EVP_CIPHER_CTX* ctx_of(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

constexpr size_t kMaxEvpBytes = static_cast<size_t>(std::numeric_limits<int>::max());

}  // namespace

Aead::Aead(uint8_t cipher, const Key& key) : cipher_(cipher), key_(key) {
  init_sodium();
  if (cipher == kCipherAes256Gcm) {
    // The choice between the ciphers is libsodium's test for AES-NI (security/secret.h), on both
    // ends alike; OpenSSL does the work.
    if (!crypto_aead_aes256gcm_is_available())
      throw Error(ErrorCode::kInvalidArgument, "AES-256-GCM chosen but this CPU has no AES-NI");
    seal_ctx_ = keyed_context(key_, true);
    try {
      open_ctx_ = keyed_context(key_, false);
    } catch (...) {
      EVP_CIPHER_CTX_free(ctx_of(seal_ctx_));
      throw;
    }
  } else if (cipher != kCipherXChaCha20Poly1305) {
    throw Error(ErrorCode::kInvalidArgument, "unknown cipher " + std::to_string(cipher));
  }
}

Aead::~Aead() {
  sodium_memzero(key_.data(), key_.size());
  EVP_CIPHER_CTX_free(ctx_of(seal_ctx_));  // clears the key schedule
  EVP_CIPHER_CTX_free(ctx_of(open_ctx_));
}

void Aead::seal(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
                uint8_t* out) const {
  const Nonce n(counter, record);
  if (seal_ctx_) {
    // OpenSSL counts in int; frames seal records of at most kRecordBytes.
    if (plain.size() > kMaxEvpBytes || ad.size() > kMaxEvpBytes)
      throw Error(ErrorCode::kInvalidArgument, "AES-256-GCM: a record larger than OpenSSL takes");
    EVP_CIPHER_CTX* ctx = ctx_of(seal_ctx_);
    int len = 0;
    const bool ok =
        EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, n.b) == 1 &&
        (ad.empty() || EVP_EncryptUpdate(ctx, nullptr, &len, ad.data(), static_cast<int>(ad.size())) == 1) &&
        (plain.empty() || EVP_EncryptUpdate(ctx, out, &len, plain.data(), static_cast<int>(plain.size())) == 1) &&
        EVP_EncryptFinal_ex(ctx, out + plain.size(), &len) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), out + plain.size()) == 1;
    if (!ok) throw Error(ErrorCode::kInternal, "AES-256-GCM: OpenSSL failed to seal");
    return;
  }
  crypto_aead_xchacha20poly1305_ietf_encrypt_detached(out, out + plain.size(), nullptr, plain.data(), plain.size(),
                                                      ad.data(), ad.size(), nullptr, n.b, key_.data());
}

bool Aead::open(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<const uint8_t> in,
                uint8_t* out) const {
  if (in.size() < kTagBytes) return false;
  const size_t n_plain = in.size() - kTagBytes;
  // The tag is read before the ciphertext may be overwritten by its plaintext (in place).
  uint8_t tag[kTagBytes];
  std::memcpy(tag, in.data() + n_plain, kTagBytes);
  return open_into(counter, record, ad, in.data(), n_plain, tag, out);
}

bool Aead::open_detached(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<uint8_t> data,
                         std::span<const uint8_t, kTagBytes> tag) const {
  uint8_t t[kTagBytes];
  std::memcpy(t, tag.data(), kTagBytes);
  const bool ok = open_into(counter, record, ad, data.data(), data.size(), t, data.data());
  // In place, libsodium's cipher (which verifies first) leaves the ciphertext behind.
  if (!ok && !data.empty()) sodium_memzero(data.data(), data.size());
  return ok;
}

bool Aead::open_into(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, const uint8_t* in, size_t n_plain,
                     const uint8_t* tag, uint8_t* out) const {
  const Nonce n(counter, record);
  if (open_ctx_) {
    if (n_plain > kMaxEvpBytes || ad.size() > kMaxEvpBytes) return false;
    EVP_CIPHER_CTX* ctx = ctx_of(open_ctx_);
    int len = 0;
    const bool ok =
        EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, n.b) == 1 &&
        (ad.empty() || EVP_DecryptUpdate(ctx, nullptr, &len, ad.data(), static_cast<int>(ad.size())) == 1) &&
        (n_plain == 0 || EVP_DecryptUpdate(ctx, out, &len, in, static_cast<int>(n_plain)) == 1) &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), const_cast<uint8_t*>(tag)) == 1 &&
        EVP_DecryptFinal_ex(ctx, out + n_plain, &len) == 1;
    // OpenSSL decrypts before it verifies: a wrong tag leaves no plaintext behind.
    if (!ok && n_plain > 0) sodium_memzero(out, n_plain);
    return ok;
  }
  return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(out, nullptr, in, n_plain, tag, ad.data(), ad.size(), n.b,
                                                             key_.data()) == 0;
}

Key pair_frame_key(const Key& job_key, uint8_t channel, uint32_t sender, uint32_t receiver, uint8_t cipher) {
  init_sodium();
  // The channel's and cipher's master key (each channel numbers its frames from 0: its own keys;
  // a key is never used with both ciphers), then one subkey per pair and direction.
  static constexpr char kContext[] = "geoccl frame keys v1";
  unsigned char msg[sizeof kContext + 2];
  std::memcpy(msg, kContext, sizeof kContext);
  msg[sizeof kContext] = cipher;
  msg[sizeof kContext + 1] = channel;
  Key master{};
  crypto_generichash(master.data(), master.size(), msg, sizeof msg, job_key.data(), job_key.size());
  Key k{};
  crypto_kdf_derive_from_key(k.data(), k.size(), (static_cast<uint64_t>(sender) << 32) | receiver, "geofrmK1",
                             master.data());
  sodium_memzero(master.data(), master.size());
  return k;
}

namespace {

bool is_data(std::span<const uint8_t, protocol::kFrameHeaderSize> header) {
  return header[kFrameTypeOffset] == static_cast<uint8_t>(protocol::FrameType::kData);
}

}  // namespace

uint64_t frame_number(std::span<const uint8_t, protocol::kFrameHeaderSize> header) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | header[kFrameNumberOffset + static_cast<size_t>(i)];
  return v;
}

void seal_record(const Aead& aead, uint64_t counter, std::span<const uint8_t, protocol::kFrameHeaderSize> header,
                 std::span<const uint8_t> payload, uint32_t index, uint8_t* wire) {
  if (index == kHeaderRecord) return aead.seal(counter, kHeaderRecord, header, {}, wire);
  const auto rec = payload.subspan(static_cast<size_t>(index) * kRecordBytes, record_plain_size(payload.size(), index));
  aead.seal(counter, index, header, rec, wire + record_wire_offset(index));
}

void FrameSealer::seal(std::span<const uint8_t, protocol::kFrameHeaderSize> header, std::span<const uint8_t> payload,
                       uint8_t* out) {
  const bool data = is_data(header);
  const Aead& aead = data ? data_ : control_;
  const uint64_t counter = data ? frame_number(header) : control_count_++;
  seal_record(aead, counter, header, payload, kHeaderRecord, out);
  for (uint32_t i = 0; i < record_count(payload.size()); ++i) seal_record(aead, counter, header, payload, i, out);
}

bool FrameOpener::open_header(std::span<const uint8_t, protocol::kFrameHeaderSize> header,
                              std::span<const uint8_t, kTagBytes> tag) {
  const bool data = is_data(header);
  const uint64_t counter = data ? frame_number(header) : control_count_;
  if (data && counter < data_min_) return false;
  uint8_t none[1];
  if (!(data ? data_ : control_).open(counter, kHeaderRecord, header, tag, none)) return false;
  current_data_ = data;
  current_frame_ = counter;
  return true;
}

bool FrameOpener::repeated(std::span<const uint8_t, protocol::kFrameHeaderSize> header) const {
  return is_data(header) && frame_number(header) < data_min_;
}

bool FrameOpener::open_record(std::span<const uint8_t, protocol::kFrameHeaderSize> header, uint32_t index,
                              std::span<const uint8_t> in, uint8_t* out) const {
  if (index == kHeaderRecord) return false;
  return (current_data_ ? data_ : control_).open(current_frame_, index, header, in, out);
}

void FrameOpener::next() {
  if (current_data_) {
    data_min_ = current_frame_ + 1;
    ++data_count_;
  } else {
    ++control_count_;
  }
}

}  // namespace geoccl::security
