#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

void StoreClient::frame(const std::vector<uint8_t>& body, bool in_clear, std::vector<uint8_t>* out) {
  if (auth_ && !in_clear) {
    protocol::AuthenticatedStoreRequest q;
    q.client = auth_->client;
    q.counter = ++auth_->counter;
    q.body = body;
    q.mac = security::store_request_mac(auth_->key, q.client, q.counter, body);
    const auto env = protocol::encode_authenticated_store_request(q);
    out->insert(out->end(), env.begin(), env.end());
  } else {
    protocol::Writer w(out);
    w.u32(static_cast<uint32_t>(body.size()));
    w.bytes(body);
  }
}

std::vector<uint8_t> StoreClient::read_response(Clock::time_point deadline) {
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

std::vector<uint8_t> StoreClient::call(const std::vector<uint8_t>& body, std::chrono::milliseconds timeout,
                                       bool in_clear) {
  std::vector<uint8_t> request;
  request.reserve(body.size() + 64);
  frame(body, in_clear, &request);
  const auto deadline = Clock::now() + timeout + kIoSlack;
  if (!runtime::write_all(fd_, request, deadline))
    throw Error(ErrorCode::kIo, "store " + address_ + ": write failed: " + std::strerror(errno));
  return read_response(deadline);
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

std::vector<std::optional<std::vector<uint8_t>>> StoreClient::get_present(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::vector<uint8_t>>> out;
  out.reserve(keys.size());
  // A GET with no timeout is answered at once (found or not), so the answers come in the order
  // asked. Batches bound what is in flight, and what the server buffers for us.
  constexpr size_t kBatch = 512;
  for (size_t first = 0; first < keys.size(); first += kBatch) {
    const size_t end = std::min(keys.size(), first + kBatch);
    std::vector<uint8_t> requests;
    for (size_t i = first; i < end; ++i) {
      if (keys[i].size() > protocol::kMaxKey)
        throw Error(ErrorCode::kInvalidArgument, "store key too large for the store at " + address_);
      const StoreRequest q{StoreCommand::kGet, keys[i], {}, 0, 0};
      frame(protocol::encode_store_request_body(q), protocol::is_public_read(q), &requests);
    }
    const auto deadline = Clock::now() + io_timeout_ + kIoSlack;
    if (!runtime::write_all(fd_, requests, deadline))
      throw Error(ErrorCode::kIo, "store " + address_ + ": write failed: " + std::strerror(errno));
    // Every answer read before any is judged: a refusal must not leave the rest unread.
    std::vector<std::vector<uint8_t>> answers;
    for (size_t i = first; i < end; ++i) answers.push_back(read_response(deadline));
    for (size_t i = first; i < end; ++i) {
      auto r = decode(answers[i - first], address_);
      if (r.status == StoreStatus::kOk)
        out.emplace_back(std::move(r.value));
      else if (r.status == StoreStatus::kNotFound)
        out.emplace_back(std::nullopt);
      else
        throw Error(ErrorCode::kProtocol, "store " + address_ + ": unexpected answer to a read of '" + keys[i] + "'");
    }
  }
  return out;
}

}  // namespace geoccl
