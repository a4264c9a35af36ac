#include "protocol/store_codec.h"

#include "protocol/wire.h"

namespace geoccl::protocol {
namespace {

std::vector<uint8_t> with_length(std::vector<uint8_t> body) {
  std::vector<uint8_t> out;
  out.reserve(body.size() + 4);
  Writer w(&out);
  w.u32(static_cast<uint32_t>(body.size()));
  w.bytes(body);
  return out;
}

}  // namespace

std::vector<uint8_t> encode_store_request_body(const StoreRequest& r) {
  std::vector<uint8_t> body;
  Writer w(&body);
  w.u8(static_cast<uint8_t>(r.command));
  w.str(r.key);
  w.blob(r.value);
  w.i64(r.delta);
  w.u64(r.timeout_ms);
  return body;
}

std::vector<uint8_t> encode_store_request(const StoreRequest& r) { return with_length(encode_store_request_body(r)); }

std::vector<uint8_t> encode_authenticated_store_request(const AuthenticatedStoreRequest& r) {
  std::vector<uint8_t> body;
  Writer w(&body);
  w.u8(kAuthenticatedRequest);
  w.bytes(r.client);
  w.u64(r.counter);
  w.blob(r.body);
  w.bytes(r.mac);
  return with_length(std::move(body));
}

std::optional<AuthenticatedStoreRequest> decode_authenticated_store_request(std::span<const uint8_t> body) {
  Reader r(body);
  AuthenticatedStoreRequest q;
  uint8_t tag = 0;
  if (!r.u8(&tag) || tag != kAuthenticatedRequest) return {};
  for (auto& b : q.client)
    if (!r.u8(&b)) return {};
  if (!r.u64(&q.counter) || !r.blob(&q.body, kMaxStoreMessage)) return {};
  for (auto& b : q.mac)
    if (!r.u8(&b)) return {};
  if (r.remaining() != 0) return {};
  return q;
}

std::vector<uint8_t> encode_store_response(const StoreResponse& r) {
  std::vector<uint8_t> body;
  Writer w(&body);
  w.u8(static_cast<uint8_t>(r.status));
  w.blob(r.value);
  w.i64(r.number);
  return with_length(std::move(body));
}

std::optional<StoreRequest> decode_store_request(std::span<const uint8_t> body) {
  Reader r(body);
  StoreRequest q;
  uint8_t cmd = 0;
  if (!r.u8(&cmd) || cmd < 1 || cmd > static_cast<uint8_t>(StoreCommand::kCheck)) return {};
  q.command = static_cast<StoreCommand>(cmd);
  if (!r.str(&q.key, kMaxKey) || !r.blob(&q.value, kMaxValue) || !r.i64(&q.delta) ||
      !r.u64(&q.timeout_ms) || r.remaining() != 0)
    return {};
  return q;
}

std::optional<StoreResponse> decode_store_response(std::span<const uint8_t> body) {
  Reader r(body);
  StoreResponse s;
  uint8_t st = 0;
  if (!r.u8(&st) || st > static_cast<uint8_t>(StoreStatus::kUnauthenticated)) return {};
  s.status = static_cast<StoreStatus>(st);
  if (!r.blob(&s.value, kMaxValue) || !r.i64(&s.number) || r.remaining() != 0) return {};
  return s;
}

std::vector<uint8_t> encode_store_owner(const StoreOwner& o) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.u32(o.world_size);
  w.u64(o.token);
  w.str(o.session);
  return out;
}

std::optional<StoreOwner> decode_store_owner(std::span<const uint8_t> value) {
  Reader r(value);
  StoreOwner o;
  if (!r.u32(&o.world_size) || !r.u64(&o.token) || !r.str(&o.session, kMaxKey) || r.remaining() != 0)
    return {};
  return o;
}

}  // namespace geoccl::protocol
