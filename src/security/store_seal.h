// Sealed store values and authenticated store requests.
//
// Sealed store values: what a rank with a group secret writes to the rendezvous store is
// encrypted and authenticated, so a store dump reveals no session id and no address, and a value
// written by someone without the secret is refused when read (docs/security.md).
//
//   sealed value = version (1) || 24-byte random nonce || XChaCha20-Poly1305(value) || tag,
//   associated data = "geoccl store v1" || the key's name (a value cannot be moved to a key).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "security/secret.h"

namespace geoccl::security {

inline constexpr uint8_t kStoreValueVersion = 1;
inline constexpr size_t kStoreValueOverhead = 1 + 24 + 16;

// The key of store values: BLAKE2b keyed with the secret (not the session id, which is in the
// store).
Key store_key(const Key& secret);
std::vector<uint8_t> seal_store_value(const Key& store_key, std::string_view name, std::span<const uint8_t> value);
// nullopt when the bytes are no value sealed with this key for this name.
std::optional<std::vector<uint8_t>> open_store_value(const Key& store_key, std::string_view name,
                                                     std::span<const uint8_t> sealed);

// Authenticated store requests (a StoreServer hosted with the group secret; StoreClient::
// authenticate): every request carries a random id of its client, that client's request counter
// (1, 2, ...) and a MAC over both and the request's bytes:
//
//   mac = BLAKE2b-256(key = crypto_kdf(secret, 1, "geostreq"), "geoccl store request v1" ||
//                     client id || counter (u64 LE) || request body)
//
// The server refuses a request without a MAC, with a wrong one, or whose counter is not above the
// last one it accepted from that client (a captured request replayed, on any connection).
using StoreClientId = std::array<uint8_t, 16>;
using StoreMac = std::array<uint8_t, 32>;
Key store_request_key(const Key& secret);
StoreMac store_request_mac(const Key& request_key, const StoreClientId& client, uint64_t counter,
                           std::span<const uint8_t> request);
// Constant-time comparison of a request's MAC with the right one.
bool store_request_mac_ok(const Key& request_key, const StoreClientId& client, uint64_t counter,
                          std::span<const uint8_t> request, const StoreMac& mac);

// The server's memory of the last counter accepted from each client (only clients whose MAC was
// right are remembered, so a stranger cannot grow it).
class StoreReplayGuard {
 public:
  // True, and remembered, when `counter` is above the last one accepted from `client`.
  bool fresh(const StoreClientId& client, uint64_t counter);

 private:
  std::map<StoreClientId, uint64_t> last_;
};

}  // namespace geoccl::security
