#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "geoccl/error.h"
#include "geoccl/store.h"
#include "protocol/store_codec.h"

using namespace geoccl;
using namespace std::chrono_literals;

TEST(Store, SetGetAddDeleteCheck) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  c.set("a", {1, 2});
  EXPECT_EQ(c.get("a", 1s), (std::vector<uint8_t>{1, 2}));
  EXPECT_TRUE(c.check("a"));
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -2), 3);
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  EXPECT_FALSE(c.check("a"));
}

TEST(Store, GetWaitsForALaterSet) {
  StoreServer server("127.0.0.1", 0);
  StoreClient reader("127.0.0.1", server.port(), 5s);
  std::thread writer([&] {
    StoreClient w("127.0.0.1", server.port(), 5s);
    std::this_thread::sleep_for(50ms);
    w.set("late", {7});
  });
  EXPECT_EQ(reader.get("late", 5s), (std::vector<uint8_t>{7}));
  writer.join();
  reader.wait({"late"}, 1s);
}

TEST(Store, GetTimesOutWithTypedError) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.get("never", 200ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  // The connection stays usable after a timed-out get.
  c.set("k", {1});
  EXPECT_TRUE(c.check("k"));
}

TEST(Store, ConnectTimesOutWhenNoServer) {
  int port;
  {
    StoreServer s("127.0.0.1", 0);
    port = s.port();
  }
  try {
    StoreClient c("127.0.0.1", static_cast<uint16_t>(port), 300ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
}

TEST(Store, ManyClientsCountTogether) {
  StoreServer server("127.0.0.1", 0);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] {
      StoreClient c("127.0.0.1", server.port(), 5s);
      for (int k = 0; k < 50; ++k) c.add("ctr", 1);
    });
  for (auto& t : ts) t.join();
  StoreClient c("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(c.add("ctr", 0), 400);
}

// A client that resets its connection while the server still has output queued for it: the
// server sees EPOLLOUT and EPOLLIN/ERR together, and its failed send and failed recv both want
// to drop the client. The client's fd must be closed once: a second close() closes whatever fd
// another thread opened with that number in the meantime. The test opens such an fd (a dup of a
// pipe) the moment the server's fd number becomes free, and checks that it survives.
namespace {

// The server's end of the TCP connection whose local end is `client`: the socket in this
// process whose peer address is the client's own address.
int server_side_fd(int client, uint16_t server_port) {
  sockaddr_in mine{};
  socklen_t len = sizeof mine;
  if (getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len) != 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int fd = 0; fd < 4096; ++fd) {
      if (fd == client) continue;
      sockaddr_in local{}, peer{};
      socklen_t l1 = sizeof local, l2 = sizeof peer;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &l1) != 0 || local.sin_family != AF_INET) continue;
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &l2) != 0) continue;
      if (ntohs(local.sin_port) == server_port && peer.sin_port == mine.sin_port) return fd;
    }
    std::this_thread::sleep_for(1ms);
  }
  return -1;
}

}  // namespace

TEST(Store, ClientResetWithQueuedOutputIsClosedOnce) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  c.set("big", std::vector<uint8_t>(4u << 20, 0xab));
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  struct stat probe_st{};
  ASSERT_EQ(fstat(pipefd[0], &probe_st), 0);
  const auto request = protocol::encode_store_request({protocol::StoreCommand::kGet, "big", {}, 0, 0});
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  int in_window = 0;  // rounds in which the test's fd got the number between the two closes
  for (int round = 0; round < 30 && std::chrono::steady_clock::now() < deadline; ++round) {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    const int small = 4096;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const int n = server_side_fd(s, server.port());
    ASSERT_GE(n, 0) << "the server did not accept the connection";
    // 16 MiB of responses that the client never reads: the server's send fills up.
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(send(s, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    int queued = 0;
    while (queued == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
      ioctl(s, FIONREAD, &queued);
    }
    std::this_thread::sleep_for(20ms);  // the server reaches EAGAIN and waits for EPOLLOUT

    std::atomic<bool> stop{false};
    int grabbed = -1;
    std::thread grabber([&] {
      while (!stop.load()) {
        const int f = fcntl(pipefd[0], F_DUPFD_CLOEXEC, n);
        if (f == n) {
          grabbed = f;
          return;
        }
        if (f >= 0) close(f);
      }
    });
    const linger reset{1, 0};
    setsockopt(s, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    close(s);  // RST: the server's send and recv both fail
    // A round trip behind the reset: the server has handled it when this returns.
    EXPECT_FALSE(c.check("nothing"));
    std::this_thread::sleep_for(2ms);
    stop.store(true);
    grabber.join();
    if (grabbed < 0) continue;
    EXPECT_FALSE(c.check("nothing"));
    struct stat st{};
    const bool alive = fstat(grabbed, &st) == 0 && st.st_ino == probe_st.st_ino && st.st_dev == probe_st.st_dev;
    ++in_window;
    if (alive) close(grabbed);
    ASSERT_TRUE(alive) << "the store server closed fd " << n
                       << " twice: the second close() closed an fd the test had opened meanwhile";
  }
  close(pipefd[0]);
  close(pipefd[1]);
  // The server is still healthy.
  EXPECT_EQ(c.add("ctr", 1), 1);
  std::cerr << "rounds in which the test took the freed fd number: " << in_window << "\n";
}

TEST(Store, OwnerRecordIsReadableAndCannotBeChanged) {
  const protocol::StoreOwner me{"job-a", 4, 0x1234567890abcdefull};
  StoreServer owned("127.0.0.1", 0, protocol::encode_store_owner(me));
  StoreClient c("127.0.0.1", owned.port(), 5s);
  const std::string key(protocol::kOwnerKey);
  ASSERT_TRUE(c.check(key));
  const auto got = protocol::decode_store_owner(c.get(key, 1s));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->session, "job-a");
  EXPECT_EQ(got->world_size, 4u);
  EXPECT_EQ(got->token, me.token);
  EXPECT_THROW(c.set(key, {}), Error);
  EXPECT_THROW(c.add(key, 1), Error);
  EXPECT_THROW(c.remove(key), Error);
  EXPECT_EQ(protocol::decode_store_owner(c.get(key, 1s))->token, me.token);
  // A standalone store has no owner.
  StoreServer standalone("127.0.0.1", 0);
  StoreClient s("127.0.0.1", standalone.port(), 5s);
  EXPECT_FALSE(s.check(key));
  // Malformed records do not decode.
  auto bytes = protocol::encode_store_owner(me);
  EXPECT_FALSE(protocol::decode_store_owner(std::span<const uint8_t>(bytes).first(bytes.size() - 1)));
  bytes.push_back(0);
  EXPECT_FALSE(protocol::decode_store_owner(bytes));
}

// ---- get_present: many keys in one round trip, in the order asked, absent ones as nullopt.

TEST(Store, GetPresentAnswersManyKeysInTheOrderAsked) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  // More keys than one batch holds, every third one absent.
  std::vector<std::string> keys;
  for (int i = 0; i < 1300; ++i) {
    keys.push_back("k/" + std::to_string(i));
    if (i % 3 != 0) c.set(keys.back(), std::vector<uint8_t>(static_cast<size_t>(i % 50 + 1), static_cast<uint8_t>(i)));
  }
  const auto got = c.get_present(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (int i = 0; i < 1300; ++i) {
    if (i % 3 == 0) {
      EXPECT_FALSE(got[static_cast<size_t>(i)].has_value()) << i;
    } else {
      ASSERT_TRUE(got[static_cast<size_t>(i)].has_value()) << i;
      EXPECT_EQ(*got[static_cast<size_t>(i)],
                std::vector<uint8_t>(static_cast<size_t>(i % 50 + 1), static_cast<uint8_t>(i)));
    }
  }
  EXPECT_TRUE(c.get_present({}).empty());
  // The connection is in step afterwards: the next answers are the next requests'.
  c.set("after", {9});
  EXPECT_EQ(c.get("after", 1s), (std::vector<uint8_t>{9}));
  EXPECT_EQ(c.add("n", 2), 2);
}

// The base class's one-key-at-a-time form gives the same answers.
TEST(Store, GetPresentDefaultFormMatchesTheBatchedOne) {
  struct OneByOne final : Store {
    explicit OneByOne(StoreClient& c) : c(c) {}
    void set(const std::string& k, const std::vector<uint8_t>& v) override { c.set(k, v); }
    std::vector<uint8_t> get(const std::string& k, std::chrono::milliseconds t) override { return c.get(k, t); }
    void wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override { c.wait(k, t); }
    int64_t add(const std::string& k, int64_t d) override { return c.add(k, d); }
    bool remove(const std::string& k) override { return c.remove(k); }
    bool check(const std::string& k) override { return c.check(k); }
    StoreClient& c;
  };
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  c.set("a", {1});
  c.set("c", {3, 3});
  OneByOne slow(c);
  const std::vector<std::string> keys{"a", "b", "c"};
  EXPECT_EQ(slow.get_present(keys), c.get_present(keys));
  EXPECT_EQ(c.get_present(keys)[1], std::nullopt);
}
