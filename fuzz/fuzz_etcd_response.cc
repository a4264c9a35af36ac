// etcd gateway response decoders (src/membership/etcd_codec.h): never crash or throw on any
// body; base64 that decodes re-encodes to the same text (only the canonical form is accepted);
// what a decoder accepts is in its documented range (revisions and leases, granted TTLs).
#include <cstdlib>
#include <string>
#include <string_view>

#include "membership/etcd_codec.h"

using namespace geoccl::membership::etcd;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  // The key a response must be about: the fuzzer's "a" or an empty one (the decoders compare).
  for (const char* key : {"a", ""}) {
    if (auto r = decode_range_response(body, key);
        r && *r && ((*r)->mod_revision <= 0 || (*r)->lease < 0))
      std::abort();
    // Without a marker and with one ("b", the seeds' marker key).
    for (const char* marker : {"", "b"})
      if (auto t = decode_txn_response(body, key, marker);
          t && t->succeeded && (t->current || t->marker || t->revision <= 0))
        std::abort();
  }
  // A batch of two reads: "a" and "b", in that order.
  if (auto b = decode_ranges_response(body, {"a", "b"})) {
    if (b->size() != 2) std::abort();
    for (const auto& kv : *b)
      if (kv && (kv->mod_revision <= 0 || kv->lease < 0)) std::abort();
  }
  (void)decode_put_response(body);
  if (auto d = decode_delete_response(body); d && *d < 0) std::abort();
  (void)decode_error_response(body);
  if (auto l = decode_lease_grant_response(body);
      l && (l->id <= 0 || l->ttl <= 0 || l->ttl > kMaxLeaseTtl))
    std::abort();
  // The lease the renewal is about: the seeds' ID, or another.
  for (int64_t id : {int64_t{7587883512345678901}, int64_t{5}})
    if (auto t = decode_lease_keepalive_response(body, id); t && *t < 0) std::abort();
  if (auto b = base64_decode(body)) {
    if (base64_encode(*b) != body) std::abort();
  }
  return 0;
}
