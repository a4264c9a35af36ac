// Messages of the rendezvous store. Each message is framed as u32 body length + body.
//
// Request body:  u8 command | str key (u32 len + bytes) | blob value | i64 delta | u64 timeout_ms
// Response body: u8 status  | blob value | i64 number
//
// A store with a group secret takes only authenticated requests (security/store_seal.h), whose
// body is an envelope around a request body:
//   u8 kAuthenticatedRequest | 16-byte client id | u64 counter | blob request body | 32-byte MAC
// and answers kUnauthenticated to anything else, or to a wrong MAC or a replayed counter.
//
// Keys are at most kMaxKey bytes and values kMaxValue bytes; anything longer is rejected before
// allocation.
//
// A store that a job's rank 0 hosts holds its owner record under kOwnerKey from the moment it
// listens, and refuses requests that would change that key. A standalone store has none.
// Owner record: u32 world size | u64 job token | str session
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geoccl::protocol {

inline constexpr size_t kMaxKey = 4096;
inline constexpr size_t kMaxValue = 64u << 20;
inline constexpr size_t kMaxStoreMessage = kMaxKey + kMaxValue + 64;

enum class StoreCommand : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kDelete = 4, kCheck = 5 };
enum class StoreStatus : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kBadRequest = 3, kUnauthenticated = 4 };
inline constexpr uint8_t kAuthenticatedRequest = 0x80;

struct StoreRequest {
  StoreCommand command = StoreCommand::kGet;
  std::string key;
  std::vector<uint8_t> value;
  int64_t delta = 0;
  uint64_t timeout_ms = 0;  // kGet: how long the server waits for the key to appear
};

struct StoreResponse {
  StoreStatus status = StoreStatus::kOk;
  std::vector<uint8_t> value;
  int64_t number = 0;
};

inline constexpr std::string_view kOwnerKey = "geoccl/.owner";
// A store with a group secret notes under kRefusedKey + "/" + session, in clear, the first
// request of a session it refused for a wrong or missing MAC (a rank with another secret or none),
// so that the ranks of that session setting up fail with it; other jobs on the store never see it.
// Like kOwnerKey, written by the server only.
inline constexpr std::string_view kRefusedKey = "geoccl/.refused";
// Keys under this prefix are the server's own (kOwnerKey, kRefusedKey): clients only read them,
// and may read them in clear from a store with a secret (they hold nothing secret).
inline constexpr std::string_view kServerKeyPrefix = "geoccl/.";

// The session a job's key belongs to ("geoccl/<session>/..."), or empty for the server's own
// keys and keys of no session.
inline std::string_view key_session(std::string_view key) {
  constexpr std::string_view root = "geoccl/";
  if (!key.starts_with(root)) return {};
  key.remove_prefix(root.size());
  const size_t end = key.find('/');
  if (end == std::string_view::npos || end == 0 || key.front() == '.') return {};
  return key.substr(0, end);
}

// A read of the server's own keys: a store with a secret serves it without a MAC.
inline bool is_public_read(const StoreRequest& q) {
  return (q.command == StoreCommand::kGet || q.command == StoreCommand::kCheck) &&
         q.key.starts_with(kServerKeyPrefix);
}

// The note kRefusedKey keeps for `session`.
inline std::string refused_key(std::string_view session) {
  return std::string(kRefusedKey) + "/" + std::string(session);
}

// The job whose rank 0 hosts a store.
struct StoreOwner {
  std::string session;
  uint32_t world_size = 0;
  uint64_t token = 0;  // random per job: tells two jobs of the same session and size apart
};

struct AuthenticatedStoreRequest {
  std::array<uint8_t, 16> client{};
  uint64_t counter = 0;
  std::vector<uint8_t> body;  // a request body (decode_store_request)
  std::array<uint8_t, 32> mac{};
};

// Both return the framed message (length prefix included).
std::vector<uint8_t> encode_store_request(const StoreRequest& r);
// The body alone (what an authenticated request wraps and its MAC covers).
std::vector<uint8_t> encode_store_request_body(const StoreRequest& r);
std::vector<uint8_t> encode_authenticated_store_request(const AuthenticatedStoreRequest& r);
std::vector<uint8_t> encode_store_response(const StoreResponse& r);

// Decode a body (without the length prefix). nullopt when malformed or trailing bytes remain.
std::optional<StoreRequest> decode_store_request(std::span<const uint8_t> body);
std::optional<StoreResponse> decode_store_response(std::span<const uint8_t> body);
// Whether a body is an authenticated envelope (its first byte), and its decoder: nullopt when
// malformed, the wrapped body longer than a request can be, or trailing bytes remain.
inline bool is_authenticated_store_request(std::span<const uint8_t> body) {
  return !body.empty() && body[0] == kAuthenticatedRequest;
}
std::optional<AuthenticatedStoreRequest> decode_authenticated_store_request(std::span<const uint8_t> body);

// The owner record, unframed (it is a value). nullopt when malformed or trailing bytes remain.
std::vector<uint8_t> encode_store_owner(const StoreOwner& o);
std::optional<StoreOwner> decode_store_owner(std::span<const uint8_t> value);

}  // namespace geoccl::protocol
