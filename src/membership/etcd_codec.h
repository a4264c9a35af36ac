// The JSON of etcd v3's HTTP gateway (/v3/kv/put, range, deleterange, txn; /v3/lease/grant and
// keepalive): request bodies and response decoders. I/O-free, so that the decoders are fuzzed
// (fuzz/fuzz_etcd_response.cc).
//
// Keys and values travel base64-encoded. The gateway writes int64 fields as JSON strings
// ("revision": "12") and omits every field at its zero value (an empty value, a false
// `succeeded`, a zero count); the decoders accept both string and number forms and treat an
// absent field as zero.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace geoccl::membership::etcd {

// Responses larger than this, or nested deeper than kMaxDepth, are refused before parsing: the
// gateway's answers for one key are small and flat.
inline constexpr size_t kMaxResponse = 64u << 20;
inline constexpr int kMaxDepth = 32;
// etcd's largest lease TTL (MaxLeaseTTL), in seconds.
inline constexpr int64_t kMaxLeaseTtl = 9'000'000'000;

std::string base64_encode(std::span<const uint8_t> bytes);
// Canonical base64 only (standard alphabet, padded, no whitespace, zero pad bits); nullopt else.
std::optional<std::vector<uint8_t>> base64_decode(std::string_view text);

// `lease`: the lease the key is attached to (it is deleted when the lease expires); 0 for none.
std::string put_request(const std::string& key, std::span<const uint8_t> value, int64_t lease);
std::string range_request(const std::string& key);
// One transaction that reads every key of `keys` (no compare: its success branch always runs),
// so that a batch of reads is one round trip. etcd takes at most kMaxTxnOps of them by default.
inline constexpr size_t kMaxTxnOps = 128;
std::string ranges_request(const std::vector<std::string>& keys);
std::string delete_request(const std::string& key);
// The marker key of a store's adds (etcd_store.h), as one try of an add sees it.
struct Marker {
  std::string key;
  int64_t mod_revision = 0;        // the transaction requires this one (0: the marker is absent)
  std::span<const uint8_t> value;  // what a success puts there
};
// A transaction that puts `value` (attached to `lease`, 0 for none) only while the key's
// mod_revision is `mod_revision` (0: the key does not exist) and otherwise reads the key, so
// that each try of a compare-and-set loop is one round trip. With a `marker`, it also requires
// the marker's mod_revision, a success also puts the marker's value (same lease) in the same
// atomic step, and a failure also reads the marker: tries that carry the same marker revision
// apply at most one of them, and the answer of one that did not says whether another did.
std::string cas_request(const std::string& key, int64_t mod_revision,
                        std::span<const uint8_t> value, int64_t lease,
                        const Marker* marker = nullptr);
// A lease of `ttl_seconds`, and one renewal of lease `id`.
std::string lease_grant_request(int64_t ttl_seconds);
std::string lease_keepalive_request(int64_t id);

struct KeyValue {
  std::vector<uint8_t> value;
  int64_t mod_revision = 0;  // > 0 for a key that exists
  int64_t lease = 0;         // the lease the key is attached to, 0 for none
};

struct Lease {
  int64_t id = 0;  // > 0
  // Seconds, 1..kMaxLeaseTtl: what etcd granted (it raises a TTL below its minimum).
  int64_t ttl = 0;
};

struct TxnResult {
  bool succeeded = false;
  // The store's revision after it: when it succeeded, > 0 and the mod_revision of what it put.
  int64_t revision = 0;
  std::optional<KeyValue> current;  // when it failed: the key as the failure branch read it
  std::optional<KeyValue> marker;   // when it failed and had a marker: the marker, as read
};

// Each returns nullopt when `body` is not what the gateway answers to that request for `key`
// (not JSON, a wrong type, a key other than the one asked for, bad base64, a negative count).
// The range: the key's value, or an empty optional inside when the key does not exist.
std::optional<std::optional<KeyValue>> decode_range_response(std::string_view body,
                                                             const std::string& key);
// The store revision in the response header.
std::optional<int64_t> decode_put_response(std::string_view body);
// The number of keys deleted.
std::optional<int64_t> decode_delete_response(std::string_view body);
// A transaction's answer for `key`, and for `marker` when cas_request had one (the answer of a
// transaction with a marker has one more response in each branch).
std::optional<TxnResult> decode_txn_response(std::string_view body, const std::string& key,
                                             const std::string& marker = {});
// The answer to ranges_request(keys): each key's value in the order asked (an empty optional for
// a key that does not exist); nullopt unless there is exactly one range of each key, in order.
std::optional<std::vector<std::optional<KeyValue>>> decode_ranges_response(std::string_view body,
                                                                          const std::vector<std::string>& keys);
// The lease granted: nullopt also when etcd names an error, grants no positive ID, or a TTL
// outside 1..kMaxLeaseTtl.
std::optional<Lease> decode_lease_grant_response(std::string_view body);
// The seconds lease `id` has left after the renewal, 0 when etcd no longer has it (expired or
// revoked: its keys are gone). The gateway streams the answer as {"result": {...}}; a stream
// error ({"error": {...}}) or an answer about another lease does not decode.
std::optional<int64_t> decode_lease_keepalive_response(std::string_view body, int64_t id);
// The message of the gateway's error body ({"error": ..., "code": N, "message": ...}).
std::optional<std::string> decode_error_response(std::string_view body);

}  // namespace geoccl::membership::etcd
