#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "geoccl/error.h"
#include "geoccl/store.h"
#include "protocol/store_codec.h"
#include "protocol/wire.h"
#include "security/store_seal.h"
#include "runtime/socket.h"

namespace geoccl {

using protocol::StoreCommand;
using protocol::StoreRequest;
using protocol::StoreStatus;
using Clock = std::chrono::steady_clock;

namespace {
// Slack on top of a request's own timeout before the client gives up on the server.
constexpr auto kIoSlack = std::chrono::seconds(30);
}  // namespace

StoreClient::StoreClient(const std::string& host, uint16_t port, std::chrono::milliseconds timeout)
    : address_(host + ":" + std::to_string(port)), io_timeout_(timeout) {
  const auto deadline = Clock::now() + timeout;
  // The server may not be up yet (rank 0 starting): retry until the deadline.
  while (fd_ < 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      throw Error(ErrorCode::kTimeout, "cannot reach the rendezvous store at " + address_ +
                                           " (is rank 0 / MASTER_ADDR up?)");
    fd_ = runtime::connect_with_timeout(host, port, std::min(left, std::chrono::milliseconds(1000)));
    if (fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  try {
    runtime::set_nodelay(fd_);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreClient::authenticate(const std::array<uint8_t, 32>& secret) {
  Auth a;
  a.key = security::store_request_key(secret);
  randombytes_buf(a.client.data(), a.client.size());
  auth_ = a;
}

std::vector<uint8_t> StoreClient::call(const std::vector<uint8_t>& body, std::chrono::milliseconds timeout,
                                       bool in_clear) {
  std::vector<uint8_t> request;
  if (auth_ && !in_clear) {
    protocol::AuthenticatedStoreRequest q;
    q.client = auth_->client;
    q.counter = ++auth_->counter;
    q.body = body;
    q.mac = security::store_request_mac(auth_->key, q.client, q.counter, body);
    request = protocol::encode_authenticated_store_request(q);
  } else {
    request.reserve(body.size() + 4);
    protocol::Writer w(&request);
    w.u32(static_cast<uint32_t>(body.size()));
    w.bytes(body);
  }
  const auto deadline = Clock::now() + timeout + kIoSlack;
  if (!runtime::write_all(fd_, request, deadline))
    throw Error(ErrorCode::kIo, "store " + address_ + ": write failed: " + std::strerror(errno));
  uint8_t lenb[4];
  if (!runtime::read_all(fd_, lenb, deadline))
    throw Error(ErrorCode::kIo, "store " + address_ + ": read failed: " + std::strerror(errno));
  protocol::Reader r(lenb);
  uint32_t len = 0;
  r.u32(&len);
  if (len > protocol::kMaxStoreMessage) throw Error(ErrorCode::kProtocol, "store " + address_ + ": response too large");
  std::vector<uint8_t> response(len);
  if (!runtime::read_all(fd_, response, deadline))
    throw Error(ErrorCode::kIo, "store " + address_ + ": read failed: " + std::strerror(errno));
  return response;
}

namespace {
protocol::StoreResponse decode(const std::vector<uint8_t>& body, const std::string& address) {
  auto r = protocol::decode_store_response(body);
  if (!r) throw Error(ErrorCode::kProtocol, "malformed response from the store at " + address);
  if (r->status == StoreStatus::kBadRequest)
    throw Error(ErrorCode::kInvalidArgument, "the store at " + address + " rejected the request");
  if (r->status == StoreStatus::kUnauthenticated)
    throw Error(ErrorCode::kProtocol, "the store at " + address +
                                          " refused the request as unauthenticated: it requires the group secret, and "
                                          "this process has another one or none (GEOCCL_SECRET)");
  return std::move(*r);
}
}  // namespace

void StoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  if (key.size() > protocol::kMaxKey || value.size() > protocol::kMaxValue)
    throw Error(ErrorCode::kInvalidArgument, "store key or value too large for the store at " + address_);
  StoreRequest q{StoreCommand::kSet, key, value, 0, 0};
  decode(call(protocol::encode_store_request_body(q), io_timeout_), address_);
}

std::vector<uint8_t> StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  StoreRequest q{StoreCommand::kGet, key, {}, 0, static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 1))};
  auto r = decode(call(protocol::encode_store_request_body(q), timeout, protocol::is_public_read(q)), address_);
  if (r.status != StoreStatus::kOk)
    throw Error(ErrorCode::kTimeout, "store key '" + key + "' did not appear at " + address_ + " within " +
                                         std::to_string(timeout.count()) + " ms");
  return std::move(r.value);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& k : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    get(k, std::max(left, std::chrono::milliseconds(1)));
  }
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  StoreRequest q{StoreCommand::kAdd, key, {}, delta, 0};
  return decode(call(protocol::encode_store_request_body(q), io_timeout_), address_).number;
}

bool StoreClient::remove(const std::string& key) {
  StoreRequest q{StoreCommand::kDelete, key, {}, 0, 0};
  return decode(call(protocol::encode_store_request_body(q), io_timeout_), address_).status == StoreStatus::kOk;
}

bool StoreClient::check(const std::string& key) {
  StoreRequest q{StoreCommand::kCheck, key, {}, 0, 0};
  return decode(call(protocol::encode_store_request_body(q), io_timeout_, protocol::is_public_read(q)), address_)
             .status == StoreStatus::kOk;
}

}  // namespace geoccl
