#include "security/store_seal.h"

#include <sodium.h>

#include <cstring>

namespace geoccl::security {

namespace {

constexpr char kStoreKeyContext[] = "geoccl store key v1";
constexpr char kAdContext[] = "geoccl store v1";
constexpr char kRequestContext[] = "geoccl store request v1";
constexpr char kRequestKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "geostreq";
static_assert(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES == 24 && crypto_aead_xchacha20poly1305_ietf_ABYTES == 16);

std::vector<uint8_t> associated_data(std::string_view name) {
  std::vector<uint8_t> ad(sizeof kAdContext + name.size());
  std::memcpy(ad.data(), kAdContext, sizeof kAdContext);
  if (!name.empty()) std::memcpy(ad.data() + sizeof kAdContext, name.data(), name.size());
  return ad;
}

}  // namespace

Key store_key(const Key& secret) {
  init_sodium();
  Key k{};
  crypto_generichash(k.data(), k.size(), reinterpret_cast<const unsigned char*>(kStoreKeyContext),
                     sizeof kStoreKeyContext, secret.data(), secret.size());
  return k;
}

std::vector<uint8_t> seal_store_value(const Key& key, std::string_view name, std::span<const uint8_t> value) {
  init_sodium();
  std::vector<uint8_t> out(kStoreValueOverhead + value.size());
  out[0] = kStoreValueVersion;
  uint8_t* nonce = out.data() + 1;
  randombytes_buf(nonce, 24);
  const auto ad = associated_data(name);
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + 25, nullptr, value.data(), value.size(), ad.data(),
                                             ad.size(), nullptr, nonce, key.data());
  return out;
}

std::optional<std::vector<uint8_t>> open_store_value(const Key& key, std::string_view name,
                                                     std::span<const uint8_t> sealed) {
  if (sealed.size() < kStoreValueOverhead || sealed[0] != kStoreValueVersion) return std::nullopt;
  init_sodium();
  std::vector<uint8_t> out(sealed.size() - kStoreValueOverhead);
  const auto ad = associated_data(name);
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(out.data(), nullptr, nullptr, sealed.data() + 25, sealed.size() - 25,
                                                 ad.data(), ad.size(), sealed.data() + 1, key.data()) != 0)
    return std::nullopt;
  return out;
}

Key store_request_key(const Key& secret) {
  init_sodium();
  Key k{};
  crypto_kdf_derive_from_key(k.data(), k.size(), 1, kRequestKdfContext, secret.data());
  return k;
}

StoreMac store_request_mac(const Key& request_key, const StoreClientId& client, uint64_t counter,
                           std::span<const uint8_t> request) {
  init_sodium();
  uint8_t c[8];
  for (int i = 0; i < 8; ++i) c[i] = static_cast<uint8_t>(counter >> (8 * i));
  StoreMac mac{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, request_key.data(), request_key.size(), mac.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kRequestContext), sizeof kRequestContext);
  crypto_generichash_update(&st, client.data(), client.size());
  crypto_generichash_update(&st, c, sizeof c);
  crypto_generichash_update(&st, request.data(), request.size());
  crypto_generichash_final(&st, mac.data(), mac.size());
  return mac;
}

bool store_request_mac_ok(const Key& request_key, const StoreClientId& client, uint64_t counter,
                          std::span<const uint8_t> request, const StoreMac& mac) {
  const StoreMac want = store_request_mac(request_key, client, counter, request);
  return crypto_verify_32(want.data(), mac.data()) == 0;
}

bool StoreReplayGuard::fresh(const StoreClientId& client, uint64_t counter) {
  auto [it, inserted] = last_.try_emplace(client, counter);
  if (inserted) return counter > 0;
  if (counter <= it->second) return false;
  it->second = counter;
  return true;
}

}  // namespace geoccl::security
