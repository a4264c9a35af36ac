// The rendezvous store on etcd v3, through its HTTP/JSON gateway (etcd://host:port/prefix).
// Keys live under the URL's prefix. Blocking get() polls with a bounded backoff (5 ms growing
// to 100 ms): one range request per try, so a group of N ranks waiting costs etcd at most
// 10 N requests per second, and a key is seen at most 100 ms after it is set.
// add() is a compare-and-set loop on the key's mod_revision (one transaction per try; a failed
// try returns the current value), atomic across every client of the cluster, and each add is
// applied exactly once: every try also requires the store's marker key (prefix/.adds/<random
// id>) to be as the previous add left it, and puts there, in the same atomic step, the add's
// number and the counter's new value. Of the tries of one add, however their answers were lost
// (etcd restarted, the connection broke, a 5xx) and whenever etcd commits them (it may commit a
// proposal after it answered 5xx), at most one applies; a try that fails reads the marker in the
// same transaction, so its answer says whether an earlier try of the add was applied, and with
// what value. An add that ends in an error may still be applied later, once. add(key, 0) is a
// read (it writes nothing, so polling a counter does not starve its adders; unlike the TCP
// store's, it does not create the key).
//
// Every key is attached to a lease (TTL kLeaseTtl) that a background thread renews at a third
// of its TTL for as long as a store of this process on that etcd is open: the keys of a process
// that died, or closed its last store, are deleted by etcd one TTL later instead of staying
// there. One lease serves every store of the process on the same etcd (and TTL), because a
// rank's keys must outlive any one of its stores: each communicator opens its own, and the
// per-session group counter that a rank's communicators advance in turn numbers its next one;
// were the counter to expire with a closed subgroup's store, that rank would count from 1 again
// while its peers did not.
// Closing a store never revokes the lease (which would delete its keys at once): others read what
// a rank wrote after that rank's store is gone. A rank whose group parameters differ leaves its
// setup error and throws, closing its store, before the others read the error; an elastic
// decider's decision and "latest" epoch are read by a joiner that arrives after the decider left.
// The TTL removes them soon enough.
//
// Limits: etcd refuses requests over its --max-request-bytes (1.5 MiB by default), and values
// travel base64-encoded (4/3 of their size): a value of more than about 1 MiB needs a larger
// setting. Errors: kTimeout (etcd not reachable within the deadline, a key that did not
// appear), kIo (a broken connection, a 5xx answer), kProtocol (a 4xx answer, or a body that does
// not decode), kInvalidArgument (add() on a key that holds something other than a counter), and
// kIo from every operation once the lease is gone (etcd no longer had it when it was renewed, or
// no renewal succeeded for a whole TTL): the keys this process wrote go with it. Each names the
// address.
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

class EtcdLease;  // etcd_store.cc: one granted lease and the thread that renews it

// Safe to use from several threads: requests are serialized on one HTTP connection, and a
// blocking get() holds it only while a request is in flight.
class EtcdStore final : public Store {
 public:
  // Long enough that an etcd leader election or a short cut between a rank and etcd does not
  // delete a live job's keys, and that the survivors of a failure (detected within seconds)
  // rewrite what they need long before a dead rank's keys expire; short enough that a dead
  // job's keys are gone within a minute. A renewal every 20 s costs etcd nothing.
  static constexpr std::chrono::seconds kLeaseTtl{60};

  // `prefix` as parse_store_url() gives it ("/job/"). Retries reaching etcd until `timeout`,
  // which also bounds each later request, then joins this process's lease on that etcd or grants
  // one of `lease_ttl` (etcd raises a TTL below its minimum, 2 s by default); throws
  // Error(kTimeout) when etcd never answers.
  EtcdStore(const std::string& host, uint16_t port, std::string prefix,
            std::chrono::milliseconds timeout, std::chrono::seconds lease_ttl = kLeaseTtl);
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool remove(const std::string& key) override;
  bool check(const std::string& key) override;
  // One transaction per kMaxTxnOps keys.
  std::vector<std::optional<std::vector<uint8_t>>> get_present(const std::vector<std::string>& keys) override;

  // The ID of the lease this store's keys are attached to.
  int64_t lease_id() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Whether a failed request may be sent again: a read or a put may; a transaction or a delete
  // only when it never left this host (the connection was refused), since it may have applied.
  enum class Retry { kIdempotent, kUnsent };

  // POSTs `body` to `path` and returns the body of a 200 answer, retrying as `retry` allows
  // until `deadline`. Throws kTimeout / kIo / kProtocol naming the address and the path; with
  // `maybe_applied`, a kUnsent request that failed after it was sent (a broken connection, a 5xx
  // answer) sets it and returns "" instead of throwing.
  std::string call(const char* path, const std::string& body, Clock::time_point deadline,
                   Retry retry, bool* maybe_applied = nullptr);
  // One range request for the key (full etcd key): its value, or nullopt when it does not exist.
  std::optional<etcd::KeyValue> range(const std::string& full_key, Clock::time_point deadline);
  [[noreturn]] void undecodable(const char* path, const std::string& body) const;
  // This process's lease on this etcd with this TTL while one is open and held, else a new one.
  std::shared_ptr<EtcdLease> open_lease(std::chrono::seconds ttl, Clock::time_point deadline);
  // Throws kIo when the lease is gone.
  void check_lease() const;

  std::string address_;  // "etcd at host:port", named in every error
  std::string prefix_;
  std::chrono::milliseconds io_timeout_;
  std::mutex http_mu_;  // guards http_
  std::unique_ptr<httplib::Client> http_;
  std::string host_;
  uint16_t port_;
  std::shared_ptr<EtcdLease> lease_;
  // add(): one at a time per store, each numbered. Its tries require this store's marker key
  // (prefix/.adds/<random id>) at marker_revision_ and put the add's number and result there:
  // the first try etcd commits moves the marker, so no other try of the add applies.
  std::mutex add_mu_;  // guards add_seq_ and marker_revision_
  uint64_t add_seq_ = 0;
  std::string add_marker_;
  // The marker's mod_revision as the last add left it or a failed try read it (0: absent). One
  // that is out of date (an add that ended in an error was applied late) costs a failed try.
  int64_t marker_revision_ = 0;
};

}  // namespace geoccl::membership
