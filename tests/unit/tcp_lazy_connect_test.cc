// Connections on demand (TcpOptions::lazy): eight TcpDevices in one process over loopback, with a
// group secret. connect() sets up only the pairs 1, 2, 4 apart round the ring; a pair 3 apart
// (0-3, 1-6, 4-7, ...) is connected when a frame first needs it: by the higher rank's dial when
// it sends, and by its dial back when the lower rank sends first. Each test forces the order of
// events it checks by waiting for the pair's streams to show (or not) before the next step.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "api/startup/device_options.h"
#include "geoccl/config.h"
#include "geoccl/error.h"
#include "protocol/handshake_machine.h"
#include "runtime/socket.h"
#include "protocol/liveness.h"
#include "runtime/event_loop.h"
#include "security/secret.h"
#include "transport/group.h"
#include "transport/tcp/address.h"
#include "transport/tcp/device.h"
#include "black_hole.h"
#include "requests.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::RequestPtr;
using transport::tcp::TcpDevice;
using transport::tcp::TcpOptions;

namespace {

constexpr int kLazyRanks = 8;

struct LazyRank {
  runtime::EventLoop loop;
  transport::Group group;
  std::unique_ptr<TcpDevice> dev;
  LazyRank(int r, const TcpOptions& o, const security::GroupKey& key) : loop("lazy-test"), group(loop, r, kLazyRanks, 42, 0, [] {}) {
    group.set_security(key);
    dev = std::make_unique<TcpDevice>(group, "127.0.0.1", o);
  }
  // Data streams open to `peer` now.
  int open_to(int peer) const {
    transport::LinkStats ps;
    ps.peer = peer;
    dev->stats(&ps);
    return ps.streams.open;
  }
};

struct LazyJob {
  std::vector<std::unique_ptr<LazyRank>> ranks;
  // `initial_streams` 0: every pair's data streams fixed at 2; else measured from that many up.
  // `address_for(viewer, q)`: the endpoint `viewer` is told for rank q ("": its own).
  explicit LazyJob(bool lazy = true, int data_streams = 2, int initial_streams = 0,
                   const std::function<std::string(int, int)>& address_for = {}) {
    TcpOptions o;
    o.data_streams = data_streams;
    o.initial_streams = initial_streams;
    o.wan_resume = true;
    o.lazy = lazy;
    o.relay_after = 300ms;
    const auto key = test_support::job_key_of("lazy connect test secret");
    for (int r = 0; r < kLazyRanks; ++r) ranks.push_back(std::make_unique<LazyRank>(r, o, key));
    auto address = [&](int viewer, int q) {
      const std::string other = address_for ? address_for(viewer, q) : "";
      return other.empty() ? ranks[static_cast<size_t>(q)]->dev->address() : transport::tcp::encode_address(other);
    };
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(kLazyRanks);
    for (int r = 0; r < kLazyRanks; ++r)
      threads.emplace_back([&, r] {
        std::vector<int> peers;
        for (int q = 0; q < kLazyRanks; ++q)
          if (q != r) peers.push_back(q);
        try {
          ranks[static_cast<size_t>(r)]->dev->connect(
              peers, [&](int q) { return address(r, q); }, {}, deadline);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  ~LazyJob() {
    for (auto it = ranks.rbegin(); it != ranks.rend(); ++it) it->reset();
  }
  LazyRank& operator[](int r) { return *ranks[static_cast<size_t>(r)]; }
  // Waits until `a` has a data stream open to `b` (false after 10 s).
  bool await_open(int a, int b) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((*this)[a].open_to(b) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
};

protocol::FrameHeader lazy_header(uint64_t i, size_t bytes) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kSendRecv;
  h.seq = i;
  h.op_bytes = bytes;
  return h;
}

std::vector<std::vector<uint8_t>> lazy_frames(int n, std::mt19937_64& rng) {
  std::vector<std::vector<uint8_t>> f(static_cast<size_t>(n));
  for (auto& v : f) {
    v.resize(rng() % 4 == 0 ? rng() % 64 : rng() % (300 * 1024));
    for (auto& b : v) b = static_cast<uint8_t>(rng());
  }
  return f;
}

// What a process claiming rank 0 of the LazyJob says in its handshake, with `key`.
protocol::HandshakeSetup rank_zero_setup(const security::GroupKey* key) {
  protocol::HandshakeSetup me;
  me.rank = 0;
  me.world_size = kLazyRanks;
  me.session_id = 42;
  me.streams = 3;
  me.relays = true;
  me.key = key;
  return me;
}

// Runs `d` over the blocking socket `fd` until it ends (kDone or kRefused); false on an I/O
// failure or at `deadline`.
bool run_dialler(int fd, protocol::HandshakeDialler& d, std::chrono::steady_clock::time_point deadline) {
  std::array<uint8_t, 512> buf;
  while (d.state() == protocol::HandshakeState::kRunning) {
    const auto out = d.take_output();
    if (!out.empty() && !runtime::write_all(fd, out, deadline)) return false;
    const auto in = std::span<uint8_t>(buf.data(), std::min(buf.size(), d.want()));
    if (!runtime::read_all(fd, in, deadline)) return false;
    d.feed(in);
  }
  return true;
}

// `from` sends `frames` to `to`; `to` posts its receives only once the pair is connected (the
// connection is made by the send alone), then every frame is checked byte for byte.
void lazy_send_first(LazyJob& job, int from, int to, const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<RequestPtr> sends, recvs;
  for (size_t i = 0; i < frames.size(); ++i) sends.push_back(job[from].dev->send(to, lazy_header(i, frames[i].size()), frames[i]));
  ASSERT_TRUE(job.await_open(to, from)) << "rank " << to << " never connected to rank " << from;
  std::vector<std::vector<uint8_t>> got(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    got[i].assign(frames[i].size(), 0);
    recvs.push_back(job[to].dev->recv(from, lazy_header(i, got[i].size()), got[i]));
  }
  ASSERT_TRUE(test_support::wait_for(recvs, 30s));
  ASSERT_TRUE(test_support::wait_for(sends, 30s));
  for (const auto& r : recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (const auto& r : sends) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (size_t i = 0; i < frames.size(); ++i) ASSERT_EQ(frames[i], got[i]) << "frame " << i;
}

// Whether the other end closes `fd` within 5 s (what it sends before is read past).
bool closed_by_peer(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::array<uint8_t, 512> buf;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) <= 0) continue;
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

}  // namespace

TEST(LazyConnect, StartUpConnectsOnlyThePairsAPowerOfTwoApart) {
  LazyJob job;
  for (int r = 0; r < kLazyRanks; ++r)
    for (int q = 0; q < kLazyRanks; ++q) {
      if (q == r) continue;
      EXPECT_EQ(job[r].open_to(q) > 0, protocol::power_of_two_apart(r, q, kLazyRanks)) << r << " -> " << q;
    }
  // Without it, the full mesh.
  LazyJob eager(false);
  for (int q = 1; q < kLazyRanks; ++q) EXPECT_GT(eager[0].open_to(q), 0) << q;
}

// 7 -> 4: the higher rank sends first and dials the pair; 0 -> 3: the lower rank sends first and
// is dialled back.
TEST(LazyConnect, EitherEndSendingFirstConnectsThePair) {
  LazyJob job;
  std::mt19937_64 rng(1);
  for (auto [from, to] : {std::pair{7, 4}, std::pair{0, 3}}) {
    SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
    ASSERT_EQ(job[from].open_to(to), 0);
    lazy_send_first(job, from, to, lazy_frames(40, rng));
    EXPECT_GT(job[from].open_to(to), 0);
  }
}

TEST(LazyConnect, BothEndsSendingAtOnceGetEveryFrameOnce) {
  LazyJob job;
  std::mt19937_64 rng(3);
  const auto a = lazy_frames(30, rng), b = lazy_frames(30, rng);
  std::vector<RequestPtr> reqs;
  std::vector<std::vector<uint8_t>> got_a(a.size()), got_b(b.size());
  // Receives first on both ends, then sends from both: each end triggers the connection.
  for (size_t i = 0; i < a.size(); ++i) {
    got_a[i].assign(a[i].size(), 0);
    reqs.push_back(job[6].dev->recv(1, lazy_header(i, a[i].size()), got_a[i]));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    got_b[i].assign(b[i].size(), 0);
    reqs.push_back(job[1].dev->recv(6, lazy_header(i, b[i].size()), got_b[i]));
  }
  for (size_t i = 0; i < a.size(); ++i) reqs.push_back(job[1].dev->send(6, lazy_header(i, a[i].size()), a[i]));
  for (size_t i = 0; i < b.size(); ++i) reqs.push_back(job[6].dev->send(1, lazy_header(i, b[i].size()), b[i]));
  ASSERT_TRUE(test_support::wait_for(reqs, 30s));
  for (const auto& r : reqs) ASSERT_TRUE(r->ok()) << r->failure.message;
  EXPECT_EQ(a, got_a);
  EXPECT_EQ(b, got_b);
}

// Ranks 0 and 3 do not reach each other directly (each is told a black hole for the other): rank
// 0's request goes through a relay, and rank 3 dials back through one.
TEST(LazyConnect, APairWithoutADirectPathIsConnectedThroughARelay) {
  test_support::BlackHole hole;
  LazyJob job(true, 2, 0, [&](int viewer, int q) {
    return (viewer == 0 && q == 3) || (viewer == 3 && q == 0) ? hole.endpoint : std::string();
  });
  std::mt19937_64 rng(5);
  lazy_send_first(job, 0, 3, lazy_frames(20, rng));
  EXPECT_FALSE(job[0].group.failure().has_value());
  transport::LinkStats ps;
  ps.peer = 0;
  job[3].dev->stats(&ps);
  EXPECT_GE(ps.relay, 0) << "the pair is not relayed";
}

// The lower rank asking (0 -> 3) and the higher rank dialling (7 -> 4): a refused connection is a
// gone process, reported at once (well inside the resume timeout).
TEST(LazyConnect, ASendToARankThatIsGoneFailsTheGroupWithPeerLost) {
  for (auto [from, to] : {std::pair{0, 3}, std::pair{7, 4}}) {
    SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
    LazyJob job;
    job.ranks[static_cast<size_t>(to)].reset();  // its listening socket closes: a connection there is refused
    std::vector<uint8_t> payload(1000, 7);
    const auto send = job[from].dev->send(to, lazy_header(0, payload.size()), payload);
    ASSERT_TRUE(test_support::wait_for({send}, 10s));
    EXPECT_FALSE(send->ok());
    const auto f = job[from].group.failure();
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->code, ErrorCode::kPeerLost) << f->message;
    EXPECT_NE(f->message.find("rank " + std::to_string(to)), std::string::npos) << f->message;
  }
}

// Every pair a WAN pair (set before any frame): the pair connected on demand carries its frames
// and the dialling end then opens its other data streams, with the count fixed (2) and measured
// (starting at 2 of 4).
TEST(LazyConnect, AWanPairConnectedOnDemandOpensItsStripedStreams) {
  for (int initial : {0, 2}) {
    SCOPED_TRACE(initial ? "measured" : "fixed");
    LazyJob job(true, initial ? 4 : 2, initial);
    for (int r = 0; r < kLazyRanks; ++r)
      for (int q = 0; q < kLazyRanks; ++q)
        if (q != r) job[r].dev->set_wan_peer(q, true);
    std::mt19937_64 rng(4);
    for (auto [from, to] : {std::pair{7, 4}, std::pair{0, 3}}) {
      lazy_send_first(job, from, to, lazy_frames(60, rng));
      const int dialler = std::max(from, to), other = std::min(from, to);
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (job[dialler].open_to(other) < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      EXPECT_GE(job[dialler].open_to(other), 2) << from << " -> " << to;
      EXPECT_FALSE(job[from].group.failure().has_value());
      // And more frames after the streams changed.
      lazy_send_first(job, to, from, lazy_frames(30, rng));
    }
  }
}

TEST(LazyConnect, ARankThatConnectsAtStartUpRefusesADialBackRequestWithItsReason) {
  LazyJob job(false);
  const auto key = test_support::job_key_of("lazy connect test secret");
  const auto me = rank_zero_setup(&key);
  std::string host;
  uint16_t port = 0;
  runtime::split_host_port(job[3].dev->endpoint(), &host, &port);
  const int fd = runtime::connect_with_timeout(host, port, 5s);
  ASSERT_GE(fd, 0);
  protocol::HandshakeDialler d(me, 3, 0, {}, protocol::kHelloFlagDialBack);
  ASSERT_TRUE(run_dialler(fd, d, std::chrono::steady_clock::now() + 5s));
  ::close(fd);
  ASSERT_EQ(d.state(), protocol::HandshakeState::kRefused);
  EXPECT_NE(d.why().find("not on demand"), std::string::npos) << d.why();
}

// A dial-back request makes a rank connect out, so with a secret only a holder of it is served.
// Strangers claim rank 0 and ask rank 3 (a pair left to connect on demand) to dial it: with
// another secret, with no proof at all, and as an older minor that sends none. Each is refused
// and closed by rank 3, which connects to nobody; rank 0's own send then connects the pair.
TEST(LazyConnect, AStrangersDialBackRequestDoesNotMakeARankConnect) {
  LazyJob job;
  ASSERT_EQ(job[3].open_to(0), 0);
  std::string host;
  uint16_t port = 0;
  runtime::split_host_port(job[3].dev->endpoint(), &host, &port);
  const auto guess = test_support::job_key_of("a stranger's guess at it");
  auto me = rank_zero_setup(&guess);
  const uint64_t rejected_before = job[3].dev->rejected_connections();
  {
    // Another secret: the whole handshake runs, and rank 3 refuses the proof.
    const int fd = runtime::connect_with_timeout(host, port, 5s);
    ASSERT_GE(fd, 0);
    protocol::HandshakeDialler d(me, 3, 0, {}, protocol::kHelloFlagDialBack);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    ASSERT_TRUE(run_dialler(fd, d, deadline));
    const auto fin = d.take_output();  // our (wrong) proof: rank 3 judges it
    ASSERT_TRUE(fin.empty() || runtime::write_all(fd, fin, deadline));
    EXPECT_EQ(d.state(), protocol::HandshakeState::kRefused);
    EXPECT_TRUE(d.auth_failed()) << d.why();
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  for (uint16_t minor : {protocol::kProtocolMinor, uint16_t{4}}) {
    // The Hello alone (the auth flag set, no AuthInit behind it), then nothing more.
    protocol::Hello h;
    h.rank = 0;
    h.world_size = kLazyRanks;
    h.session_id = 42;
    h.minor = minor;
    h.flags = protocol::kHelloFlagAuth | protocol::kHelloFlagDialBack;
    const int fd = runtime::connect_with_timeout(host, port, 5s);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(runtime::write_all(fd, protocol::encode_hello(h), std::chrono::steady_clock::now() + 5s));
    ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(closed_by_peer(fd)) << "minor " << minor;
    ::close(fd);
  }
  // Rank 3 has closed every one of them, and counted each as rejected: a dial it started would
  // show within this time.
  EXPECT_EQ(job[3].dev->rejected_connections(), rejected_before + 3);
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(job[3].open_to(0), 0) << "a stranger made rank 3 connect to rank 0";
    ASSERT_EQ(job[0].open_to(3), 0) << "a stranger made rank 3 connect to rank 0";
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(job[3].group.failure().has_value());
  EXPECT_FALSE(job[0].group.failure().has_value());
  // Rank 0 itself asks, with the secret: the pair connects.
  std::mt19937_64 rng(6);
  lazy_send_first(job, 0, 3, lazy_frames(10, rng));
}

TEST(LazyConnect, OnByDefaultPastThirtyTwoRanks) {
  Config c;
  for (auto [setting, ranks, lazy] : {std::tuple{"auto", 32, false}, std::tuple{"auto", 33, true},
                                      std::tuple{"on", 2, true}, std::tuple{"off", 1024, false}}) {
    c.lazy_connect = setting;
    c.world_size = ranks;
    EXPECT_EQ(api::startup::tcp_options(c, 4).lazy, lazy) << setting << " at " << ranks << " ranks";
  }
}
