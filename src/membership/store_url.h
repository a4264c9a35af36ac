// The URL of a rendezvous store (GEOCCL_STORE): tcp://host:port or etcd://host:port/prefix.
// Parsing is separate from connecting so that a malformed URL fails at once, naming its bad part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace geoccl::membership {

struct StoreUrl {
  enum class Scheme { kTcp, kEtcd };
  Scheme scheme = Scheme::kTcp;
  std::string host;    // without IPv6 brackets
  uint16_t port = 0;   // 1..65535
  std::string prefix;  // etcd: "/a/b/" (leading and trailing slash, no empty segment); tcp: ""

  // host:port as it is written in the URL (brackets kept), for messages.
  std::string address() const;
};

// Throws Error(kInvalidArgument) naming `source` (where the URL came from: "store URL",
// "GEOCCL_STORE"), the URL and its malformed part: an unknown scheme, a missing or non-numeric
// port, an empty host, a path on tcp://, a missing or empty-segment prefix on etcd://, a query
// or fragment.
StoreUrl parse_store_url(const std::string& url, std::string_view source = "store URL");

}  // namespace geoccl::membership
