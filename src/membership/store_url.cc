#include "membership/store_url.h"

#include <charconv>
#include <string_view>

#include "geoccl/error.h"

namespace geoccl::membership {
namespace {

// The error for a malformed URL, naming where it came from and what is wrong.
struct Bad {
  std::string_view source;
  const std::string& url;
  [[noreturn]] void operator()(const std::string& why) const {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(source) + " '" + url + "': " + why +
                    " (expected tcp://host:port or etcd://host:port/prefix)");
  }
};

}  // namespace

std::string StoreUrl::address() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StoreUrl parse_store_url(const std::string& url, std::string_view source) {
  const Bad bad{source, url};
  StoreUrl out;
  std::string_view rest(url);
  const size_t sep = rest.find("://");
  if (sep == std::string_view::npos) bad("no scheme");
  const std::string_view scheme = rest.substr(0, sep);
  if (scheme == "tcp") {
    out.scheme = StoreUrl::Scheme::kTcp;
  } else if (scheme == "etcd") {
    out.scheme = StoreUrl::Scheme::kEtcd;
  } else {
    bad("unknown scheme '" + std::string(scheme) + "'");
  }
  rest.remove_prefix(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) bad("a query or fragment is not allowed");
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  const std::string_view path =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos)
    bad("credentials in the URL are not supported");

  // host[:port], host in brackets when it is an IPv6 address.
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) bad("unclosed '[' in the host");
    out.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':') bad("junk after the IPv6 host");
    if (authority.empty()) bad("missing port");
    port_text = authority.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == std::string_view::npos) bad("missing port");
    out.host = std::string(authority.substr(0, colon));
    port_text = authority.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) bad("an IPv6 host must be in brackets");
  }
  if (out.host.empty()) bad("empty host");
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port == 0 || port > 65535)
    bad("bad port '" + std::string(port_text) + "' (1..65535)");
  out.port = static_cast<uint16_t>(port);

  if (out.scheme == StoreUrl::Scheme::kTcp) {
    if (!path.empty() && path != "/") bad("tcp:// takes no path ('" + std::string(path) + "')");
    return out;
  }
  // etcd: the prefix is the job's key space; an empty one would spread keys over the whole
  // cluster's root, among other applications' keys.
  std::string_view p = path;
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  if (p.size() <= 1) bad("missing prefix (etcd://host:port/prefix)");
  if (p.find("//") != std::string_view::npos)
    bad("empty segment in the prefix '" + std::string(path) + "'");
  out.prefix = std::string(p) + "/";
  return out;
}

}  // namespace geoccl::membership
