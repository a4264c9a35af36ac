// Rendezvous key-value store. `Store` is what rendezvous (and elastic membership) needs; two
// backends implement it: the embedded TCP store (rank 0 hosts a StoreServer by default, or
// `geoccl store --port P` runs a standalone one) through StoreClient, and etcd v3 (open_store).
// Values are opaque bytes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace geoccl {

class StoreServerImpl;

class StoreServer {
 public:
  // Listens on bind_addr:port (port 0 = any; see port()). Throws Error(kIo) on failure.
  // A standalone store: several groups (sessions) may share it on purpose.
  StoreServer(const std::string& bind_addr, uint16_t port);
  // A store owned by one job: a job's rank 0 hosts it with its owner record (see
  // membership/rendezvous.h), which another job's rank 0 reads and refuses.
  StoreServer(const std::string& bind_addr, uint16_t port, const std::vector<uint8_t>& owner);
  // With `secret` (the hashed group secret, as the ranks load it): every request must be
  // authenticated with it (docs/security.md); others are answered kUnauthenticated and logged.
  StoreServer(const std::string& bind_addr, uint16_t port, const std::vector<uint8_t>& owner,
              const std::optional<std::array<uint8_t, 32>>& secret);
  ~StoreServer();
  uint16_t port() const;
  // Requests refused as unauthenticated or replayed so far (any thread).
  uint64_t refused_requests() const;

 private:
  std::unique_ptr<StoreServerImpl> impl_;
};

// A blocking key-value store shared by the ranks of a group. Every call either succeeds or
// throws a typed Error (kTimeout, kIo, kProtocol; kInvalidArgument for a key or value the
// backend cannot hold), whose message names the store's address.
//
// First writer wins: add(key, 1) returns 1 to exactly one caller, on every backend, which is
// how a group elects one rank for a task (a leader of an epoch, the writer of a record) without
// a separate compare-and-set primitive.
class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Blocks until the key exists or `timeout` passes (Error(kTimeout)).
  virtual std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Blocks until every key exists, or Error(kTimeout).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically (across every client of the store) adds `delta` to a counter (created at 0) and
  // returns the new value. The counter's value, read with get(), is 8 bytes: i64 little-endian.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Returns whether the key existed.
  virtual bool remove(const std::string& key) = 0;
  // Returns whether the key exists now.
  virtual bool check(const std::string& key) = 0;
  // The values of `keys` that exist now, in the order asked (nullopt: absent), without waiting.
  // The TCP store and etcd answer many keys per round trip; this default asks for one key after
  // another.
  virtual std::vector<std::optional<std::vector<uint8_t>>> get_present(const std::vector<std::string>& keys);
};

// Connects to the store a URL names, retrying until `timeout` (which also bounds each later
// request's I/O):
//   tcp://host:port          a StoreServer (`geoccl store`, or a rank 0 hosting one)
//   etcd://host:port/prefix  etcd v3 through its HTTP/JSON gateway; every key lives under
//                            /prefix/ (several jobs share one etcd with distinct prefixes)
// An IPv6 host is written in brackets: tcp://[::1]:29500.
// Throws Error(kInvalidArgument) naming the malformed part of the URL, Error(kTimeout) when the
// store does not answer within `timeout`, Error(kIo) / Error(kProtocol) on other failures.
std::unique_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout);

// The TCP store's client: one TCP connection; safe to use from one thread at a time.
class StoreClient final : public Store {
 public:
  // Retries the connection until `timeout`; throws Error(kTimeout) / Error(kIo).
  StoreClient(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  bool check(const std::string& key) override;
  // Every request written before the first answer is read: one round trip for all of them.
  std::vector<std::optional<std::vector<uint8_t>>> get_present(const std::vector<std::string>& keys) override;
  // From now on every request is authenticated with `secret` (the hashed group secret): a random
  // client id, a counter and a MAC (docs/security.md). A store that requires it answers a request
  // of a client with another secret, or none, with Error(kProtocol).
  void authenticate(const std::array<uint8_t, 32>& secret);

 private:
  struct Auth {
    std::array<uint8_t, 32> key{};
    std::array<uint8_t, 16> client{};
    uint64_t counter = 0;
  };
  std::optional<Auth> auth_;
  int fd_ = -1;
  std::string address_;  // host:port, named in every error
  std::chrono::milliseconds io_timeout_;
  // Sends a request body (framed, or wrapped in an authenticated envelope) and returns the
  // response body.
  // `in_clear`: without the MAC even when authenticating (reads of the server's own keys).
  std::vector<uint8_t> call(const std::vector<uint8_t>& body, std::chrono::milliseconds timeout, bool in_clear = false);
  // call()'s halves: a request body framed (or enveloped) onto `out`, and one response read.
  void frame(const std::vector<uint8_t>& body, bool in_clear, std::vector<uint8_t>* out);
  std::vector<uint8_t> read_response(std::chrono::steady_clock::time_point deadline);
};

}  // namespace geoccl
