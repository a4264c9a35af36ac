// Messages of the rendezvous store. Each message is framed as u32 body length + body.
//
// Request body:  u8 command | str key (u32 len + bytes) | blob value | i64 delta | u64 timeout_ms
// Response body: u8 status  | blob value | i64 number
//
// Keys are at most kMaxKey bytes and values kMaxValue bytes; anything longer is rejected before
// allocation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace geoccl::protocol {

inline constexpr size_t kMaxKey = 4096;
inline constexpr size_t kMaxValue = 64u << 20;
inline constexpr size_t kMaxStoreMessage = kMaxKey + kMaxValue + 64;

enum class StoreCommand : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kDelete = 4, kCheck = 5 };
enum class StoreStatus : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kBadRequest = 3 };

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

// Both return the framed message (length prefix included).
std::vector<uint8_t> encode_store_request(const StoreRequest& r);
std::vector<uint8_t> encode_store_response(const StoreResponse& r);

// Decode a body (without the length prefix). nullopt when malformed or trailing bytes remain.
std::optional<StoreRequest> decode_store_request(std::span<const uint8_t> body);
std::optional<StoreResponse> decode_store_response(std::span<const uint8_t> body);

}  // namespace geoccl::protocol
