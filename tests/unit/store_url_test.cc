// GEOCCL_STORE URLs: what parses, and that every malformed one is kInvalidArgument naming the
// part that is wrong, before any connection is tried.
#include "membership/store_url.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "geoccl/error.h"
#include "geoccl/store.h"

using namespace geoccl;
using membership::parse_store_url;
using membership::StoreUrl;

TEST(StoreUrl, TcpAndEtcdParse) {
  const StoreUrl t = parse_store_url("tcp://10.0.0.5:29500");
  EXPECT_EQ(t.scheme, StoreUrl::Scheme::kTcp);
  EXPECT_EQ(t.host, "10.0.0.5");
  EXPECT_EQ(t.port, 29500);
  EXPECT_EQ(t.prefix, "");
  EXPECT_EQ(parse_store_url("tcp://store.example:1/").port, 1);

  const StoreUrl e = parse_store_url("etcd://etcd-0.internal:2379/jobs/llama//");
  EXPECT_EQ(e.scheme, StoreUrl::Scheme::kEtcd);
  EXPECT_EQ(e.host, "etcd-0.internal");
  EXPECT_EQ(e.port, 2379);
  EXPECT_EQ(e.prefix, "/jobs/llama/");
  EXPECT_EQ(e.address(), "etcd-0.internal:2379");

  const StoreUrl v6 = parse_store_url("etcd://[::1]:2379/x");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.address(), "[::1]:2379");
}

TEST(StoreUrl, MalformedUrlsNameTheirBadPart) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "no scheme"},
      {"127.0.0.1:2379", "no scheme"},
      {"http://127.0.0.1:2379/x", "unknown scheme 'http'"},
      {"etcd://127.0.0.1/x", "missing port"},
      {"etcd://127.0.0.1:/x", "bad port ''"},
      {"etcd://127.0.0.1:23x9/x", "bad port '23x9'"},
      {"tcp://127.0.0.1:0", "bad port '0'"},
      {"tcp://127.0.0.1:65536", "bad port '65536'"},
      {"etcd://:2379/x", "empty host"},
      {"etcd://127.0.0.1:2379", "missing prefix"},
      {"etcd://127.0.0.1:2379/", "missing prefix"},
      {"etcd://127.0.0.1:2379/a//b", "empty segment"},
      {"tcp://127.0.0.1:29500/x", "takes no path"},
      {"etcd://user:pw@127.0.0.1:2379/x", "credentials"},
      {"etcd://127.0.0.1:2379/x?y=1", "query or fragment"},
      {"etcd://::1:2379/x", "in brackets"},
      {"etcd://[::1:2379/x", "unclosed"},
  };
  for (const auto& [url, part] : cases) {
    try {
      parse_store_url(url, "GEOCCL_STORE");
      ADD_FAILURE() << "'" << url << "' parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << url;
      const std::string what = e.what();
      EXPECT_NE(what.find(part), std::string::npos) << url << ": " << what;
      EXPECT_NE(what.find("GEOCCL_STORE '" + std::string(url) + "'"), std::string::npos) << what;
    }
  }
}

TEST(StoreUrl, OpenStoreRefusesAMalformedUrlWithoutConnecting) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    open_store("etcd://127.0.0.1/nope", std::chrono::seconds(30));
    ADD_FAILURE() << "opened a store without a port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("missing port"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}
