// Rendezvous key-value store: an embedded TCP server (rank 0 hosts one by default, or
// `geoccl store --port P`) and its client. Values are opaque bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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
  ~StoreServer();
  uint16_t port() const;

 private:
  std::unique_ptr<StoreServerImpl> impl_;
};

// A blocking client; one TCP connection; safe to use from one thread at a time.
class StoreClient {
 public:
  // Retries the connection until `timeout`; throws Error(kTimeout) / Error(kIo).
  StoreClient(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value);
  // Blocks until the key exists or `timeout` passes (Error(kTimeout)).
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout);
  // Blocks until every key exists, or Error(kTimeout).
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Atomically adds `delta` to a counter (created at 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // Returns whether the key existed.
  bool remove(const std::string& key);
  // Returns whether the key exists now.
  bool check(const std::string& key);

 private:
  int fd_ = -1;
  std::chrono::milliseconds io_timeout_;
  std::vector<uint8_t> call(const std::vector<uint8_t>& request, std::chrono::milliseconds timeout);
};

}  // namespace geoccl
