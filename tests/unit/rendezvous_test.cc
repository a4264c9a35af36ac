// join_store: a job's rank 0 owns the store it hosts, so that a second job on the same port (two
// parallel runs, two parallel tests) fails at once with a clear error instead of joining the
// first job's group; a standalone store is shared by several groups on purpose.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>

#include "etcd_server.h"
#include "geoccl/config.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "membership/rendezvous.h"
#include "runtime/socket.h"

using namespace geoccl;
using namespace std::chrono_literals;
using membership::join_store;

namespace {

Config member(int rank, int world, uint16_t port, const std::string& session = "default") {
  Config c;
  c.rank = rank;
  c.world_size = world;
  c.master_addr = "127.0.0.1";
  c.master_port = port;
  c.session = session;
  c.connect_timeout = 2s;
  return c;
}

// The typed error join_store throws, checked to name every string in `names`.
void expect_refused(const Config& c, ErrorCode code, const std::vector<std::string>& names) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    join_store(c);
    ADD_FAILURE() << "rank " << c.rank << " (world size " << c.world_size << ", session '" << c.session
                  << "') joined a store it does not belong to";
    return;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    std::cerr << "refused: " << e.what() << "\n";
    for (const auto& n : names) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms) << "refused only after waiting";
}

}  // namespace

TEST(Rendezvous, SecondJobOnTheSamePortIsRefused) {
  const uint16_t port = runtime::pick_free_port();
  // Job A: rank 0 hosts the store and publishes its group.
  auto a0 = join_store(member(0, 2, port));
  ASSERT_TRUE(a0.server) << "job A's rank 0 did not host the store";
  // Job B, same session name and size, same port: its rank 0 cannot host, and must not join A.
  expect_refused(member(0, 2, port), ErrorCode::kProtocol,
                 {std::to_string(port), "another job", "'default'", "world size 2"});
  // A rank of a group of another size (or another session) is refused on A's store at once.
  expect_refused(member(1, 3, port), ErrorCode::kInvalidArgument, {std::to_string(port), "world size", "3", "2"});
  expect_refused(member(1, 2, port, "other"), ErrorCode::kInvalidArgument,
                 {std::to_string(port), "session", "'other'", "'default'"});
  // Job A's own rank 1 still joins, with rank 0's group parameters.
  auto a1 = join_store(member(1, 2, port));
  EXPECT_EQ(a1.prefix, a0.prefix);
  EXPECT_EQ(a1.session_id, a0.session_id);
}

TEST(Rendezvous, StandaloneStoreIsSharedByTwoGroups) {
  StoreServer shared("127.0.0.1", 0);
  const uint16_t port = shared.port();
  auto x0 = join_store(member(0, 2, port, "x"));
  auto y0 = join_store(member(0, 3, port, "y"));
  EXPECT_FALSE(x0.server);
  EXPECT_FALSE(y0.server);
  auto x1 = join_store(member(1, 2, port, "x"));
  auto y1 = join_store(member(1, 3, port, "y"));
  EXPECT_EQ(x1.prefix, x0.prefix);
  EXPECT_EQ(x1.session_id, x0.session_id);
  EXPECT_EQ(y1.prefix, y0.prefix);
  EXPECT_EQ(y1.session_id, y0.session_id);
  EXPECT_NE(x0.prefix, y0.prefix);
  // A second group of session x on the same shared store gets a prefix of its own.
  auto x0b = join_store(member(0, 2, port, "x"));
  EXPECT_NE(x0b.prefix, x0.prefix);
  // With no owner to ask, a rank checks rank 0's group parameters.
  auto z0 = join_store(member(0, 2, port, "z"));
  expect_refused(member(1, 3, port, "z"), ErrorCode::kInvalidArgument, {"world size", "3", "2", z0.prefix});
}

namespace {
Config external(int rank, int world, const std::string& url, const std::string& session = "default") {
  Config c = member(rank, world, runtime::pick_free_port(), session);  // nobody listens on master_port
  c.store = url;
  return c;
}
}  // namespace

TEST(Rendezvous, ExternalStoresNeedNoRankToHostThem) {
  test::EtcdServer etcd;
  StoreServer standalone("127.0.0.1", 0);
  for (const std::string& url : {etcd.url("job"), "tcp://127.0.0.1:" + std::to_string(standalone.port())}) {
    auto r0 = join_store(external(0, 2, url));
    auto r1 = join_store(external(1, 2, url));
    EXPECT_FALSE(r0.server) << url;
    EXPECT_EQ(r1.prefix, r0.prefix) << url;
    EXPECT_EQ(r1.session_id, r0.session_id) << url;
    // The next group of the session (the survivors' next epoch) gets a prefix of its own.
    auto n0 = join_store(external(0, 2, url));
    auto n1 = join_store(external(1, 2, url));
    EXPECT_NE(n0.prefix, r0.prefix) << url;
    EXPECT_EQ(n1.session_id, n0.session_id) << url;
    // A rank of another session size is refused by rank 0's parameters.
    join_store(external(0, 2, url, "z"));
    expect_refused(external(1, 3, url, "z"), ErrorCode::kInvalidArgument, {"world size", "3", "2", url});
  }
}

TEST(Rendezvous, MalformedStoreUrlIsNamedByItsVariable) {
  expect_refused(external(1, 2, "etcd://127.0.0.1/job"), ErrorCode::kInvalidArgument,
                 {"GEOCCL_STORE", "etcd://127.0.0.1/job", "missing port"});
}

TEST(Rendezvous, ExternalStoreHostedByAnotherJobsRankZeroIsRefused) {
  const uint16_t port = runtime::pick_free_port();
  auto a0 = join_store(member(0, 2, port));  // job A's rank 0 hosts (and owns) the store
  ASSERT_TRUE(a0.server);
  expect_refused(external(0, 2, "tcp://127.0.0.1:" + std::to_string(port)), ErrorCode::kProtocol,
                 {"GEOCCL_STORE", "another job", std::to_string(port)});
}
