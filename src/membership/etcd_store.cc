#include "membership/etcd_store.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <random>
#include <thread>

#include "core/logging.h"
#include "geoccl/error.h"
#include "protocol/wire.h"

namespace geoccl::membership {
namespace {

using std::chrono::milliseconds;

std::span<const uint8_t> bytes_of(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

std::string excerpt(const std::string& body) {
  return body.size() <= 200 ? body : body.substr(0, 200) + "...";
}

milliseconds until(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
}

}  // namespace

// A granted lease and the thread that renews it, on a connection of its own (a store's blocking
// get() does not delay a renewal). The lease is gone when etcd answers a renewal without a TTL,
// or when no renewal succeeded for a whole TTL after the last one that did (etcd expires a lease
// a TTL after it last renewed it, which was before that answer arrived). Destruction stops the
// thread, cutting a renewal in flight short, without revoking the lease (etcd_store.h says why):
// it does not wait for etcd beyond the bounds of one renewal (1 s to connect, 5 s to answer).
class EtcdLease {
 public:
  EtcdLease(const std::string& host, uint16_t port, etcd::Lease granted)
      : lease_(granted), http_(std::make_unique<httplib::Client>(host, port)) {
    http_->set_keep_alive(true);
    http_->set_tcp_nodelay(true);
    // A renewal answers in milliseconds; a bound well under the TTL keeps retries coming.
    http_->set_connection_timeout(std::min(period(), milliseconds(1000)));
    http_->set_read_timeout(std::min(period(), milliseconds(5000)));
    http_->set_write_timeout(std::min(period(), milliseconds(5000)));
    thread_ = std::thread([this] { keep_alive(); });
  }
  ~EtcdLease() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    http_->stop();  // ends a renewal in flight
    thread_.join();
  }
  EtcdLease(const EtcdLease&) = delete;
  EtcdLease& operator=(const EtcdLease&) = delete;

  int64_t id() const { return lease_.id; }
  // Why the lease is gone; nullopt while it is held.
  std::optional<std::string> lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

 private:
  milliseconds period() const { return milliseconds(lease_.ttl * 1000 / 3); }

  void keep_alive() {
    auto renewed = std::chrono::steady_clock::now();  // the grant's answer came just now
    milliseconds wait = period();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (cv_.wait_for(lock, wait, [this] { return stop_; })) return;
      lock.unlock();
      std::string why;
      const std::optional<int64_t> left = renew(&why);
      const auto now = std::chrono::steady_clock::now();
      lock.lock();
      if (stop_) return;
      if (left && *left > 0) {
        renewed = now;
        wait = period();
        continue;
      }
      if (left)
        lost_ = "etcd no longer has it (it expired or was revoked)";
      else if (now - renewed >= std::chrono::seconds(lease_.ttl))
        lost_ = "no renewal succeeded for its TTL of " + std::to_string(lease_.ttl) +
                " s, after which etcd expires it; the last one: " + why;
      if (lost_) {
        GEOCCL_LOG(kWarn, "etcd lease " << lease_.id << " is gone: " << *lost_);
        return;
      }
      wait = std::min(period(), milliseconds(1000));  // failed: try again soon
    }
  }

  // One renewal: the TTL etcd answered (0: it no longer has the lease), or nullopt with `why`.
  std::optional<int64_t> renew(std::string* why) {
    const auto res = http_->Post("/v3/lease/keepalive", etcd::lease_keepalive_request(lease_.id),
                                 "application/json");
    if (!res) {
      *why = "the connection failed (" + httplib::to_string(res.error()) + ")";
      return std::nullopt;
    }
    if (res->status != 200) {
      const auto msg = etcd::decode_error_response(res->body);
      *why = "HTTP " + std::to_string(res->status) + ": " + (msg ? *msg : excerpt(res->body));
      return std::nullopt;
    }
    auto left = etcd::decode_lease_keepalive_response(res->body, lease_.id);
    if (!left) *why = "the answer does not decode: " + excerpt(res->body);
    return left;
  }

  const etcd::Lease lease_;
  std::unique_ptr<httplib::Client> http_;  // used by the thread only (and stop())
  mutable std::mutex mu_;                  // guards stop_ and lost_
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<std::string> lost_;
  std::thread thread_;
};

EtcdStore::EtcdStore(const std::string& host, uint16_t port, std::string prefix,
                     milliseconds timeout, std::chrono::seconds lease_ttl)
    : address_("etcd at " + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
               std::to_string(port)),
      prefix_(std::move(prefix)),
      io_timeout_(timeout),
      http_(std::make_unique<httplib::Client>(host, port)),
      host_(host),
      port_(port) {
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);
  {
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
    add_marker_ = prefix_ + ".adds/" + id;
  }
  // etcd may still be starting (or electing a leader): the first request retries until the
  // deadline, like the TCP store's connect.
  try {
    range(prefix_, Clock::now() + timeout);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    // e.what() without its "timeout: " (the code is said once).
    const std::string why = std::string(e.what()).substr(error_code_name(e.code()).size() + 2);
    throw Error(ErrorCode::kTimeout, "cannot reach the rendezvous store within " +
                                         std::to_string(timeout.count()) +
                                         " ms (is etcd up?): " + why);
  }
  lease_ = open_lease(lease_ttl, Clock::now() + timeout);
}

EtcdStore::~EtcdStore() = default;

std::shared_ptr<EtcdLease> EtcdStore::open_lease(std::chrono::seconds ttl,
                                                 Clock::time_point deadline) {
  static std::mutex mu;  // held across a grant: two stores opened at once share its lease
  static std::map<std::string, std::weak_ptr<EtcdLease>> leases;
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(leases, [](const auto& entry) { return entry.second.expired(); });
  const std::string key = address_ + " ttl " + std::to_string(ttl.count());
  if (auto it = leases.find(key); it != leases.end())
    if (auto held = it->second.lock(); held && !held->lost()) return held;
  // A grant retried after a lost answer leaves an unused lease, which expires with its TTL.
  const std::string body =
      call("/v3/lease/grant", etcd::lease_grant_request(ttl.count()), deadline, Retry::kIdempotent);
  const auto granted = etcd::decode_lease_grant_response(body);
  if (!granted) undecodable("/v3/lease/grant", body);
  auto lease = std::make_shared<EtcdLease>(host_, port_, *granted);
  leases[key] = lease;
  return lease;
}

int64_t EtcdStore::lease_id() const { return lease_->id(); }

void EtcdStore::check_lease() const {
  if (auto why = lease_->lost())
    throw Error(ErrorCode::kIo, address_ + ": the lease of this process's keys there (" +
                                    std::to_string(lease_->id()) +
                                    ") is lost, and the keys with it: " + *why);
}

std::string EtcdStore::call(const char* path, const std::string& body, Clock::time_point deadline,
                            Retry retry, bool* maybe_applied) {
  milliseconds backoff(20);
  std::string last;
  for (;;) {
    const milliseconds left = std::max(until(deadline), milliseconds(1));
    httplib::Result res{nullptr, httplib::Error::Unknown};
    {
      std::lock_guard<std::mutex> lock(http_mu_);
      http_->set_connection_timeout(std::min(left, milliseconds(1000)));
      http_->set_read_timeout(left);
      http_->set_write_timeout(left);
      res = http_->Post(path, body, "application/json");
    }
    bool may_retry = false;
    if (!res) {
      const auto err = res.error();
      const bool unsent =
          err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout;
      last = (unsent ? "could not connect (" : "the connection failed (") +
             httplib::to_string(err) + ")";
      if (!unsent && retry == Retry::kUnsent) {
        if (maybe_applied) {
          *maybe_applied = true;
          return {};
        }
        throw Error(ErrorCode::kIo, address_ + ": " + path + " failed: " + last +
                                        "; it may or may not have been applied");
      }
      may_retry = true;
    } else if (res->status == 200) {
      return std::move(res->body);
    } else {
      const auto why = etcd::decode_error_response(res->body);
      last = "HTTP " + std::to_string(res->status) + ": " + (why ? *why : excerpt(res->body));
      // 5xx: etcd is there but cannot serve now (no leader yet, overloaded). A rejected request
      // (4xx) stays rejected.
      if (res->status < 500)
        throw Error(ErrorCode::kProtocol, address_ + " refused " + path + ": " + last);
      if (retry == Retry::kUnsent) {
        if (maybe_applied) {
          *maybe_applied = true;
          return {};
        }
        throw Error(ErrorCode::kIo, address_ + ": " + path + " failed: " + last);
      }
      may_retry = true;
    }
    const auto now = Clock::now();
    if (!may_retry || now >= deadline)
      throw Error(res ? ErrorCode::kIo : ErrorCode::kTimeout,
                  address_ + ": " + path + " failed: " + last);
    // The last try is at the deadline, not one backoff before it.
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(200));
  }
}

void EtcdStore::undecodable(const char* path, const std::string& body) const {
  throw Error(ErrorCode::kProtocol,
              "the answer of " + address_ + " to " + path + " does not decode: " + excerpt(body));
}

std::optional<etcd::KeyValue> EtcdStore::range(const std::string& full_key,
                                               Clock::time_point deadline) {
  const std::string body =
      call("/v3/kv/range", etcd::range_request(full_key), deadline, Retry::kIdempotent);
  auto kv = etcd::decode_range_response(body, full_key);
  if (!kv) undecodable("/v3/kv/range", body);
  return std::move(*kv);
}

void EtcdStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  check_lease();
  const std::string body =
      call("/v3/kv/put", etcd::put_request(prefix_ + key, bytes_of(value), lease_->id()),
           Clock::now() + io_timeout_, Retry::kIdempotent);
  if (!etcd::decode_put_response(body)) undecodable("/v3/kv/put", body);
}

std::vector<uint8_t> EtcdStore::get(const std::string& key, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  milliseconds backoff(5);
  for (;;) {
    check_lease();
    // Each try may take the I/O bound, as the TCP store's get may: a short timeout still gets
    // one answer from a slow etcd.
    if (auto kv = range(prefix_ + key, Clock::now() + io_timeout_)) return std::move(kv->value);
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, milliseconds(100));
  }
  throw Error(ErrorCode::kTimeout, "store key '" + key + "' did not appear at " + address_ +
                                       " within " + std::to_string(timeout.count()) + " ms");
}

void EtcdStore::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& k : keys) get(k, std::max(until(deadline), milliseconds(1)));
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const std::string full = prefix_ + key;
  auto deadline = Clock::now() + io_timeout_;
  auto counter = [&](const std::vector<uint8_t>& value) {
    int64_t v = 0;
    protocol::Reader reader(value);
    if (value.size() != 8 || !reader.i64(&v))
      throw Error(ErrorCode::kInvalidArgument, "store key '" + key + "' at " + address_ + " holds " +
                                                   std::to_string(value.size()) + " bytes, not a counter (8)");
    return v;
  };
  if (delta == 0) {
    // A read: no write, so a poller (the elastic decider reads its candidate count every few
    // ms) does not move the key's revision under the adders' compare-and-set, which a writer one
    // WAN round trip away would lose every time.
    check_lease();
    const auto kv = range(full, deadline);
    return kv ? counter(kv->value) : 0;
  }
  std::lock_guard<std::mutex> serial(add_mu_);
  deadline = Clock::now() + io_timeout_;  // the bound starts once the add before it is done
  const uint64_t seq = ++add_seq_;
  // Start from "absent, 0": a new counter costs one transaction, and a failed try returns the
  // current value and revision for the next.
  int64_t cur = 0, mod_revision = 0;
  for (;;) {
    check_lease();
    // Two's-complement wrap, as the TCP store's int64 addition on the same counter would give.
    const int64_t next =
        static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
    std::vector<uint8_t> encoded, marked;
    protocol::Writer(&encoded).i64(next);
    {
      protocol::Writer w(&marked);
      w.u64(seq);
      w.i64(next);
    }
    // Every try of this add requires the marker as the add before it left it (or as a failed
    // try read it): whichever try etcd commits first moves the marker, and every other try of
    // the add fails, however late etcd gets to it.
    const etcd::Marker marker{add_marker_, marker_revision_, bytes_of(marked)};
    bool maybe_applied = false;
    const std::string body =
        call("/v3/kv/txn",
             etcd::cas_request(full, mod_revision, bytes_of(encoded), lease_->id(), &marker),
             deadline, Retry::kUnsent, &maybe_applied);
    if (maybe_applied) {
      // The answer was lost: this try may have been applied, or may be yet (etcd answers 5xx
      // while the proposal is in flight and can still commit it). The next try carries the same
      // compares: it applies only if no earlier try did, and fails otherwise, its answer showing
      // the marker with this add's number.
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::kTimeout,
                    "store key '" + key + "' at " + address_ +
                        ": add() got no answer etcd applied it within " +
                        std::to_string(io_timeout_.count()) +
                        " ms (a try still in flight there may apply it later, once)");
      std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(50), deadline - Clock::now()));
      continue;
    }
    auto r = etcd::decode_txn_response(body, full, add_marker_);
    if (!r) undecodable("/v3/kv/txn", body);
    if (r->succeeded) {
      marker_revision_ = r->revision;  // the marker was put with the counter
      return next;
    }
    // Failed: an earlier try of this add was applied (the marker holds this add's number and
    // the value that try gave the counter), or the counter or the marker moved (another client
    // added; an earlier add of this store that ended in an error was applied late).
    marker_revision_ = r->marker ? r->marker->mod_revision : 0;
    if (r->marker) {
      uint64_t applied_seq = 0;
      int64_t applied_value = 0;
      protocol::Reader reader(r->marker->value);
      if (reader.u64(&applied_seq) && reader.i64(&applied_value) && reader.remaining() == 0 &&
          applied_seq == seq)
        return applied_value;
    }
    if (!r->current) {  // deleted between two tries: start again from 0
      cur = mod_revision = 0;
    } else {
      cur = counter(r->current->value);
      mod_revision = r->current->mod_revision;
    }
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout, "store key '" + key + "' at " + address_ +
                                           ": add() lost every race for " +
                                           std::to_string(io_timeout_.count()) + " ms");
  }
}

bool EtcdStore::remove(const std::string& key) {
  check_lease();
  const std::string body = call("/v3/kv/deleterange", etcd::delete_request(prefix_ + key),
                                Clock::now() + io_timeout_, Retry::kUnsent);
  const auto deleted = etcd::decode_delete_response(body);
  if (!deleted) undecodable("/v3/kv/deleterange", body);
  return *deleted > 0;
}

bool EtcdStore::check(const std::string& key) {
  check_lease();
  return range(prefix_ + key, Clock::now() + io_timeout_).has_value();
}

std::vector<std::optional<std::vector<uint8_t>>> EtcdStore::get_present(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::vector<uint8_t>>> out;
  out.reserve(keys.size());
  for (size_t first = 0; first < keys.size(); first += etcd::kMaxTxnOps) {
    std::vector<std::string> full;
    for (size_t i = first; i < std::min(keys.size(), first + etcd::kMaxTxnOps); ++i) full.push_back(prefix_ + keys[i]);
    check_lease();
    const std::string body = call("/v3/kv/txn", etcd::ranges_request(full), Clock::now() + io_timeout_, Retry::kIdempotent);
    auto kvs = etcd::decode_ranges_response(body, full);
    if (!kvs) undecodable("/v3/kv/txn", body);
    for (auto& kv : *kvs) out.push_back(kv ? std::optional(std::move(kv->value)) : std::nullopt);
  }
  return out;
}

}  // namespace geoccl::membership
