// The rendezvous store on etcd v3, through its HTTP/JSON gateway (etcd://host:port/prefix).
// Keys live under the URL's prefix. Blocking get() polls with a bounded backoff (5 ms growing
// to 100 ms): one range request per try, so a group of N ranks waiting costs etcd at most
// 10 N requests per second, and a key is seen at most 100 ms after it is set.
// add() is a compare-and-set loop on the key's mod_revision (one transaction per try; a failed
// try returns the current value), atomic across every client of the cluster.
//
// Limits: etcd refuses requests over its --max-request-bytes (1.5 MiB by default), and values
// travel base64-encoded (4/3 of their size): a value of more than about 1 MiB needs a larger
// setting. Errors: kTimeout (etcd not reachable within the deadline, a key that did not
// appear), kIo (a broken connection, a 5xx answer), kProtocol (a 4xx answer, or a body that does
// not decode), kInvalidArgument (add() on a key that holds something other than a counter);
// each names the address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "geoccl/store.h"
#include "membership/etcd_codec.h"

namespace httplib {
class Client;
}

namespace geoccl::membership {

// Safe to use from several threads: requests are serialized on one HTTP connection, and a
// blocking get() holds it only while a request is in flight.
class EtcdStore final : public Store {
 public:
  // `prefix` as parse_store_url() gives it ("/job/"). Retries reaching etcd until `timeout`,
  // which also bounds each later request; throws Error(kTimeout) when etcd never answers.
  EtcdStore(const std::string& host, uint16_t port, std::string prefix,
            std::chrono::milliseconds timeout);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  bool check(const std::string& key) override;

 private:
  using Clock = std::chrono::steady_clock;
  // Whether a failed request may be sent again: a read or a put may; a transaction or a delete
  // only when it never left this host (the connection was refused), since it may have applied.
  enum class Retry { kIdempotent, kUnsent };

  // POSTs `body` to `path` and returns the body of a 200 answer, retrying as `retry` allows
  // until `deadline`. Throws kTimeout / kIo / kProtocol naming the address and the path.
  std::string call(const char* path, const std::string& body, Clock::time_point deadline,
                   Retry retry);
  // One range request for the key (full etcd key): its value, or nullopt when it does not exist.
  std::optional<etcd::KeyValue> range(const std::string& full_key, Clock::time_point deadline);
  [[noreturn]] void undecodable(const char* path, const std::string& body) const;

  std::string address_;  // "etcd at host:port", named in every error
  std::string prefix_;
  std::chrono::milliseconds io_timeout_;
  std::mutex http_mu_;  // guards http_
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace geoccl::membership
