// The etcd store against a real etcd (tests/support/etcd_server.h): the Store contract, blocking
// reads, atomic counters across clients, prefixes that keep jobs apart, and typed errors within
// the timeout when etcd is gone or is not etcd.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "etcd_server.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "transport/tcp/socket_util.h"

using namespace geoccl;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { etcd_ = std::make_unique<test::EtcdServer>(); }
  std::unique_ptr<Store> open(const std::string& prefix = "job",
                              std::chrono::milliseconds timeout = 5s) {
    return open_store(etcd_->url(prefix), timeout);
  }
  std::unique_ptr<test::EtcdServer> etcd_;
};

// The typed error `f` throws, after at most `within`.
template <class F>
Error error_of(F&& f, std::chrono::milliseconds within) {
  const auto t0 = Clock::now();
  try {
    f();
  } catch (const Error& e) {
    EXPECT_LT(Clock::now() - t0, within) << "the error took too long: " << e.what();
    std::cerr << "error: " << e.what() << "\n";
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::kOk, "none");
}

}  // namespace

TEST_F(EtcdStoreTest, SetGetCheckRemove) {
  auto s = open();
  std::vector<uint8_t> every_byte(256);
  for (size_t i = 0; i < every_byte.size(); ++i) every_byte[i] = static_cast<uint8_t>(i);
  s->set("a", every_byte);
  EXPECT_EQ(s->get("a", 1s), every_byte);
  EXPECT_TRUE(s->check("a"));
  s->set("a", {9});  // overwrite
  EXPECT_EQ(s->get("a", 1s), std::vector<uint8_t>{9});
  s->set("empty", {});
  EXPECT_TRUE(s->check("empty"));
  EXPECT_TRUE(s->get("empty", 1s).empty());
  EXPECT_TRUE(s->remove("a"));
  EXPECT_FALSE(s->remove("a"));
  EXPECT_FALSE(s->check("a"));
  EXPECT_FALSE(s->check("never-set"));
}

TEST_F(EtcdStoreTest, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = open();
  auto writer = open();
  const auto t0 = Clock::now();
  std::thread w([&] {
    std::this_thread::sleep_for(300ms);
    writer->set("late", {7, 8});
  });
  EXPECT_EQ(reader->get("late", 10s), (std::vector<uint8_t>{7, 8}));
  const auto took = Clock::now() - t0;
  w.join();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1500ms) << "the key was seen long after it was set";
}

TEST_F(EtcdStoreTest, WaitReturnsOnceEveryKeyExists) {
  auto s = open();
  auto writer = open();
  std::thread w([&] {
    for (const char* k : {"w3", "w1", "w2"}) {
      std::this_thread::sleep_for(100ms);
      writer->set(k, {1});
    }
  });
  const auto t0 = Clock::now();
  s->wait({"w1", "w2", "w3"}, 10s);
  EXPECT_GE(Clock::now() - t0, 300ms);
  w.join();
  const Error e = error_of([&] { s->wait({"w1", "w4", "w2"}, 300ms); }, 1500ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("w4"), std::string::npos) << e.what();
}

TEST_F(EtcdStoreTest, GetTimesOutPromptlyWithTheAddress) {
  auto s = open();
  const auto t0 = Clock::now();
  const Error e = error_of([&] { s->get("never", 400ms); }, 1500ms);
  EXPECT_GE(Clock::now() - t0, 400ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(etcd_->port())),
            std::string::npos)
      << e.what();
  s->set("k", {1});  // still usable
  EXPECT_TRUE(s->check("k"));
}

TEST_F(EtcdStoreTest, ConcurrentAddsFromManyClientsSumExactly) {
  // Six threads: four with a client each, two sharing one (the etcd store is thread-safe). Each
  // add must return a value no other add returned: together they are exactly 1..total.
  constexpr int kThreads = 6, kAdds = 40;
  std::vector<std::unique_ptr<Store>> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(open());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Store& s = *clients[static_cast<size_t>(std::min(t, 4))];
      for (int i = 0; i < kAdds; ++i) seen[static_cast<size_t>(t)].push_back(s.add("counter", 1));
    });
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(clients[0]->add("counter", -5), kThreads * kAdds - 5);
  // The counter reads as the TCP store's does: 8 bytes, i64 little-endian.
  const auto raw = clients[1]->get("counter", 1s);
  ASSERT_EQ(raw.size(), 8u);
  int64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | raw[static_cast<size_t>(i)];
  EXPECT_EQ(v, kThreads * kAdds - 5);
  // add() on a key that holds something else is refused, not reinterpreted.
  clients[0]->set("text", {'h', 'i'});
  const Error e = error_of([&] { clients[0]->add("text", 1); }, 2s);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
}

TEST_F(EtcdStoreTest, PrefixesKeepJobsApart) {
  auto a = open("a");
  auto ab = open("ab");
  auto a2 = open("a/");  // the same prefix, written with a trailing slash
  a->set("k", {1});
  EXPECT_TRUE(a2->check("k"));
  EXPECT_FALSE(ab->check("k"));
  EXPECT_EQ(ab->add("k", 5), 5);
  EXPECT_EQ(a->get("k", 1s), std::vector<uint8_t>{1});
  EXPECT_TRUE(ab->remove("k"));
  EXPECT_TRUE(a->check("k"));
  const Error e = error_of([&] { ab->get("k", 200ms); }, 1500ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
}

TEST_F(EtcdStoreTest, StoppedEtcdGivesATypedErrorWithinTheTimeout) {
  auto s = open("job", 1s);
  s->set("k", {1});
  etcd_->kill();
  for (auto op : {+[](Store& st) { st.set("k", {2}); }, +[](Store& st) { st.check("k"); },
                  +[](Store& st) { st.add("n", 1); },
                  +[](Store& st) { st.get("k", std::chrono::milliseconds(100)); }}) {
    const Error e = error_of([&] { op(*s); }, 3s);
    EXPECT_TRUE(e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(etcd_->port())), std::string::npos)
        << e.what();
  }
}

TEST(EtcdStore, UnreachableEtcdGivesTimeoutWithinTheTimeout) {
  const uint16_t port = transport::tcp::pick_free_port();  // nothing listens there
  const Error e =
      error_of([&] { open_store("etcd://127.0.0.1:" + std::to_string(port) + "/x", 700ms); }, 2s);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << e.what();
}

TEST(EtcdStore, AnHttpServerThatIsNotEtcdIsAProtocolError) {
  // A 404 (no gateway there) and a 200 whose body is not the gateway's JSON.
  httplib::Server http;
  std::atomic<bool> not_found{false};
  http.Post("/v3/kv/range", [&](const httplib::Request&, httplib::Response& res) {
    if (not_found)
      res.status = 404;
    else
      res.set_content("<html>not etcd</html>", "text/html");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve(
      [&] { http.listen_after_bind(); });  // connections wait in the backlog until then
  const std::string url = "etcd://127.0.0.1:" + std::to_string(port) + "/x";
  Error e = error_of([&] { open_store(url, 2s); }, 3s);
  EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  EXPECT_NE(std::string(e.what()).find("does not decode"), std::string::npos) << e.what();
  not_found = true;
  e = error_of([&] { open_store(url, 2s); }, 3s);
  EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  EXPECT_NE(std::string(e.what()).find("404"), std::string::npos) << e.what();
  http.stop();
  serve.join();
}
