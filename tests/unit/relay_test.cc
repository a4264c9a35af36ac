// Relays (transport/tcp/relay.h): three TcpDevices in one process over loopback, where rank 2
// cannot reach rank 0 directly. Rank 2 is handed, for rank 0, the address of a black hole: a
// listening socket whose accept queue is full, so the kernel drops every SYN and a connection
// attempt gets no answer at all, as behind a firewall that drops. Rank 1 reaches both, and its
// relay carries the pair; the streams stay authenticated and sealed end to end.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "geoccl/config.h"
#include "geoccl/error.h"
#include "runtime/event_loop.h"
#include "security/secret.h"
#include "transport/group.h"
#include "transport/tcp/address.h"
#include "transport/tcp/device.h"
#include "transport/tcp/relay.h"
#include "runtime/socket.h"
#include "black_hole.h"
#include "device_ticker.h"
#include "netns_child.h"
#include "requests.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::RequestPtr;
using transport::tcp::TcpDevice;
using transport::tcp::TcpOptions;

namespace {

using test_support::BlackHole;

struct Rank {
  runtime::EventLoop loop;
  transport::Group group;
  std::unique_ptr<TcpDevice> dev;
  Rank(int r, int n, const TcpOptions& o, const std::optional<security::GroupKey>& key)
      : loop("relay-test"), group(loop, r, n, 42, 0, [] {}) {
    group.set_security(key);
    dev = std::make_unique<TcpDevice>(group, "127.0.0.1", o);
  }
  transport::LinkStats stats(int peer) const {
    transport::LinkStats ps;
    ps.peer = peer;
    dev->stats(&ps);
    return ps;
  }
};

// Ranks 0..n-1; `address_for(viewer, rank)` is the endpoint `viewer` is told for `rank`.
struct Group3 {
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::exception_ptr> errors;
  Group3(int n, TcpOptions o, const std::function<std::string(int, int, const std::string&)>& address_for,
         std::chrono::seconds limit = 20s, bool secret = true) {
    const std::optional<security::GroupKey> key =
        secret ? std::optional<security::GroupKey>(test_support::job_key_of("relay test secret")) : std::nullopt;
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<Rank>(r, n, o, key));
    errors.resize(static_cast<size_t>(n));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        std::vector<int> peers;
        for (int q = 0; q < n; ++q)
          if (q != r) peers.push_back(q);
        try {
          ranks[static_cast<size_t>(r)]->dev->connect(
              peers,
              [&](int q) {
                return transport::tcp::encode_address(
                    address_for(r, q, ranks[static_cast<size_t>(q)]->dev->endpoint()));
              },
              {}, deadline);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
  }
  ~Group3() {
    for (auto it = ranks.rbegin(); it != ranks.rend(); ++it) it->reset();
  }
  bool connected() const {
    for (const auto& e : errors)
      if (e) return false;
    return true;
  }
  Rank& operator[](int r) { return *ranks[static_cast<size_t>(r)]; }
  // Every pair across a WAN: striping, stream resume, two-hop paths.
  void all_wan() {
    for (size_t r = 0; r < ranks.size(); ++r)
      for (size_t q = 0; q < ranks.size(); ++q)
        if (r != q) ranks[r]->dev->set_wan_peer(static_cast<int>(q), true);
    for (auto& r : ranks) r->dev->await_wan_streams(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  }
};

protocol::FrameHeader relayed_header(uint64_t i, size_t bytes) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kSendRecv;
  h.seq = i;
  h.op_bytes = bytes;
  return h;
}

// Random frame sizes: a quarter under 64 bytes, the rest under 1 MiB.
std::vector<size_t> random_sizes(int frames, std::mt19937_64& rng) {
  std::vector<size_t> sizes(static_cast<size_t>(frames));
  for (auto& n : sizes) n = rng() % 4 == 0 ? rng() % 64 : rng() % (1 << 20);
  return sizes;
}

// Frames of `sizes` from `a` to `b`, checked byte for byte.
void transfer(Rank& a, int ra, Rank& b, int rb, const std::vector<size_t>& sizes, uint64_t first_seq,
              std::mt19937_64& rng) {
  std::vector<std::vector<uint8_t>> src(sizes.size()), dst(src.size());
  std::vector<RequestPtr> sends, recvs;
  for (size_t i = 0; i < src.size(); ++i) {
    src[i].resize(sizes[i]);
    for (auto& x : src[i]) x = static_cast<uint8_t>(rng());
    dst[i].assign(src[i].size(), 0);
  }
  for (size_t i = 0; i < src.size(); ++i) recvs.push_back(b.dev->recv(ra, relayed_header(first_seq + i, dst[i].size()), dst[i]));
  for (size_t i = 0; i < src.size(); ++i) sends.push_back(a.dev->send(rb, relayed_header(first_seq + i, src[i].size()), src[i]));
  ASSERT_TRUE(test_support::wait_for(recvs, 60s));
  ASSERT_TRUE(test_support::wait_for(sends, 60s));
  for (const auto& r : recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (const auto& r : sends) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(src[i], dst[i]) << "frame " << i;
}

void transfer(Rank& a, int ra, Rank& b, int rb, int frames, uint64_t first_seq, std::mt19937_64& rng) {
  transfer(a, ra, b, rb, random_sizes(frames, rng), first_seq, rng);
}

// Waits until every data stream of `r` to `peer` from `first` on is open through `via`.
bool streams_through(Rank& r, int peer, int first, int via, std::chrono::seconds limit = 10s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto ps = r.stats(peer);
    bool all = !ps.streams.each.empty();
    for (const auto& st : ps.streams.each)
      if (st.index >= first && (st.via != via || st.rtt_ms <= 0)) all = false;
    if (all) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Both ends of pair (0, 2) send their bulk frames through rank 1 (a two-hop path), and every data
// stream from 2 on is open through it.
void take_two_hop(Group3& g, size_t bulk) {
  ASSERT_TRUE(g[0].dev->set_two_hop(2, 1, bulk));
  ASSERT_TRUE(g[2].dev->set_two_hop(0, 1, bulk));
  ASSERT_TRUE(streams_through(g[2], 0, 2, 1));
  ASSERT_TRUE(streams_through(g[0], 2, 2, 1));
}

TcpOptions relay_options() {
  TcpOptions o;
  o.data_streams = 2;
  o.relay_after = 300ms;
  o.resume = true;
  o.resume_timeout = 10s;
  return o;
}

}  // namespace

TEST(Relay, APairWithoutADirectPathGoesThroughTheThirdRank) {
  BlackHole hole;
  Group3 g(3, relay_options(), [&](int viewer, int rank, const std::string& real) {
    return viewer == 2 && rank == 0 ? hole.endpoint : real;
  });
  for (size_t r = 0; r < g.errors.size(); ++r)
    if (g.errors[r]) std::rethrow_exception(g.errors[r]);
  g.all_wan();
  // Both ends know the pair is relayed, and by whom; the other pairs are direct.
  EXPECT_EQ(g[2].stats(0).relay, 1);
  EXPECT_EQ(g[0].stats(2).relay, 1);
  EXPECT_EQ(g[2].stats(1).relay, -1);
  EXPECT_EQ(g[1].stats(0).relay, -1);
  // One tunnel per stream of the pair (control + 2 data), all open.
  const auto before = g[1].dev->relay_counters();
  EXPECT_EQ(before.tunnels, 3u);
  EXPECT_EQ(before.open, 3u);
  std::mt19937_64 rng(7);
  transfer(g[2], 2, g[0], 0, 40, 0, rng);
  transfer(g[0], 0, g[2], 2, 40, 0, rng);
  transfer(g[1], 1, g[0], 0, 10, 0, rng);  // a direct pair beside it
  const auto after = g[1].dev->relay_counters(0);
  EXPECT_GT(after.bytes, 40u * 100 * 1024);  // the relayed frames went through rank 1
  EXPECT_EQ(g[1].stats(2).relayed_bytes, after.bytes);
  EXPECT_EQ(g[1].dev->relay_counters(2).bytes, after.bytes);
  EXPECT_FALSE(g[0].group.failure());
  EXPECT_FALSE(g[2].group.failure());
}

TEST(Relay, AStreamThatBreaksIsReestablishedThroughTheRelay) {
  BlackHole hole;
  Group3 g(3, relay_options(), [&](int viewer, int rank, const std::string& real) {
    return viewer == 2 && rank == 0 ? hole.endpoint : real;
  });
  ASSERT_TRUE(g.connected());
  g.all_wan();
  std::mt19937_64 rng(8);
  transfer(g[2], 2, g[0], 0, 10, 0, rng);
  // Rank 0's end of a data stream is reset (an RST, as from a middlebox): the tunnel passes it
  // on, rank 2 dials the stream again, through the relay (it still has no direct path).
  g[0].dev->reset_stream_for_test(2, 1);
  transfer(g[2], 2, g[0], 0, 30, 10, rng);
  transfer(g[0], 0, g[2], 2, 30, 0, rng);
  const auto c = g[1].dev->relay_counters();
  EXPECT_GE(c.tunnels, 4u);  // the re-dialled stream's tunnel beside the first three
  EXPECT_EQ(c.open, 3u);
  EXPECT_FALSE(g[0].group.failure());
  EXPECT_FALSE(g[2].group.failure());
}

TEST(Relay, NoRankReachingThePeerIsATypedTimeoutOnBothSides) {
  // Neither rank 2 nor the relay reaches rank 0.
  BlackHole hole;
  TcpOptions o = relay_options();
  o.relay_after = 200ms;
  Group3 g(
      3, o,
      [&](int viewer, int rank, const std::string& real) { return viewer != 0 && rank == 0 ? hole.endpoint : real; },
      4s, /*secret=*/false);
  ASSERT_TRUE(g.errors[2]);
  try {
    std::rethrow_exception(g.errors[2]);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("no rank relayed to it"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(g.errors[0]);  // rank 0 waited for ranks that never came
  try {
    std::rethrow_exception(g.errors[0]);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  }
  EXPECT_GE(g[1].dev->relay_counters().refused, 1u);  // the relay was asked and said it cannot
}

// Two-hop paths (TcpDevice::set_two_hop; collectives/detour.h decides when): every pair is direct,
// and the pair 0-2 is told to send its bulk frames through rank 1. Rank 2 (the dialler) moves data
// streams 2..S onto rank 1's relay, resumed; frames of 64 KiB and more go there both ways, smaller
// ones stay on the direct stream 1.
TEST(Relay, ATwoHopPathCarriesTheBulkFramesAndSmallOnesStayDirect) {
  TcpOptions o = relay_options();
  o.data_streams = 3;
  Group3 g(3, o, [](int, int, const std::string& real) { return real; });
  ASSERT_TRUE(g.connected());
  g.all_wan();
  std::mt19937_64 rng(9);
  transfer(g[2], 2, g[0], 0, 10, 0, rng);  // in flight beside the switch: nothing lost
  EXPECT_EQ(g[1].dev->relay_counters().tunnels, 0u);
  constexpr size_t kBulk = 64 << 10;
  // Neither a self relay nor a LAN peer nor the relay as the peer take a two-hop path.
  EXPECT_FALSE(g[2].dev->set_two_hop(0, 2, kBulk));
  EXPECT_FALSE(g[2].dev->set_two_hop(0, 0, kBulk));
  ASSERT_TRUE(g[0].dev->set_two_hop(2, 1, kBulk));
  ASSERT_TRUE(g[2].dev->set_two_hop(0, 1, kBulk));
  ASSERT_TRUE(streams_through(g[2], 0, 2, 1));
  ASSERT_TRUE(streams_through(g[0], 2, 2, 1));
  EXPECT_EQ(g[1].dev->relay_counters().open, 2u);  // streams 2 and 3
  EXPECT_EQ(g[2].stats(0).two_hop, 1);
  EXPECT_EQ(g[0].stats(2).two_hop, 1);
  EXPECT_EQ(g[2].stats(0).two_hop_min_bytes, kBulk);
  EXPECT_EQ(g[2].stats(0).relay, -1);  // the pair itself is direct
  EXPECT_EQ(g[2].stats(1).two_hop, -1);
  auto stream1_frames = [&](Rank& r, int peer) { return r.stats(peer).streams.each.at(0).frames_sent; };
  const uint64_t s1_2 = stream1_frames(g[2], 0), s1_0 = stream1_frames(g[0], 2);
  const uint64_t relayed0 = g[1].dev->relay_counters(0).bytes;
  std::vector<size_t> sizes;
  size_t small = 0, bulk_bytes = 0;
  for (int i = 0; i < 30; ++i) {
    sizes.push_back(i % 3 == 0 ? 100 + rng() % 4000 : kBulk + rng() % (1 << 20));
    if (sizes.back() < kBulk) ++small;
    else bulk_bytes += sizes.back();
  }
  transfer(g[2], 2, g[0], 0, sizes, 10, rng);
  transfer(g[0], 0, g[2], 2, sizes, 0, rng);
  // The small frames went direct on stream 1, the bulk ones through the relay, both ways.
  EXPECT_EQ(stream1_frames(g[2], 0) - s1_2, small);
  EXPECT_EQ(stream1_frames(g[0], 2) - s1_0, small);
  EXPECT_GE(g[1].dev->relay_counters(0).bytes - relayed0, 2 * bulk_bytes);
  EXPECT_FALSE(g[0].group.failure());
  EXPECT_FALSE(g[2].group.failure());
}

// The relay cannot reach the far end (rank 1 is handed a black hole for rank 0, and reaches rank 0
// itself through rank 2's relay): the two-hop streams come back direct, and nothing is lost.
TEST(Relay, ATwoHopPathWhoseRelayCannotReachThePeerFallsBackToDirect) {
  BlackHole hole;
  TcpOptions o = relay_options();
  o.data_streams = 3;
  Group3 g(3, o, [&](int viewer, int rank, const std::string& real) {
    return viewer == 1 && rank == 0 ? hole.endpoint : real;
  });
  ASSERT_TRUE(g.connected());
  g.all_wan();
  ASSERT_EQ(g[1].stats(0).relay, 2);
  std::mt19937_64 rng(10);
  ASSERT_TRUE(g[0].dev->set_two_hop(2, 1, 64 << 10));
  ASSERT_TRUE(g[2].dev->set_two_hop(0, 1, 64 << 10));
  transfer(g[2], 2, g[0], 0, 30, 0, rng);  // while the streams try the relay and come back
  ASSERT_TRUE(streams_through(g[2], 0, 2, -1));
  transfer(g[0], 0, g[2], 2, 30, 0, rng);
  transfer(g[2], 2, g[0], 0, 30, 30, rng);
  EXPECT_EQ(g[2].stats(0).two_hop, -1);
  EXPECT_FALSE(g[0].group.failure());
  EXPECT_FALSE(g[2].group.failure());
  // The ends of the pair rank 2 relays go first, so that its tunnels close before it does.
  g.ranks[0].reset();
  g.ranks[1].reset();
}

// The relay's leg to the far end is cut while a two-hop path carries bulk frames (iptables in a
// namespace of the test's own drops every packet of the relay's sockets to rank 0). The relay
// acknowledges what rank 2 sends, so neither end sees the cut: the relay's stall check ends the
// tunnels, the streams come back, and every frame arrives once. Without it they would wait on a
// full tunnel for as long as TCP retries.
TEST(Relay, ATunnelWhoseLegToTheFarEndIsCutEndsAndTheStreamsComeBack) {
  if (!test_support::can_cut_packets()) GTEST_SKIP() << "needs root and iptables";
  const int rc = test_support::run_in_netns(
      [] {
        TcpOptions o = relay_options();
        o.data_streams = 3;
        Group3 g(3, o, [](int, int, const std::string& real) { return real; });
        ASSERT_TRUE(g.connected());
        g.all_wan();
        take_two_hop(g, 64 << 10);
        if (::testing::Test::HasFatalFailure()) return;
        std::mt19937_64 rng(11);
        const std::vector<size_t> bulk(16, 1 << 20);
        transfer(g[2], 2, g[0], 0, bulk, 0, rng);
        const auto ports = g[1].dev->relay_ports_for_test(0);
        ASSERT_EQ(ports.size(), 2u);  // streams 2 and 3
        for (uint16_t port : ports) {
          test_support::iptables("-I INPUT -p tcp --sport " + std::to_string(port) + " -j DROP");
          test_support::iptables("-I INPUT -p tcp --dport " + std::to_string(port) + " -j DROP");
        }
        // Frames both ways across the cut, checked byte for byte, every request done.
        std::thread back([&] {
          std::mt19937_64 rng2(12);
          transfer(g[0], 0, g[2], 2, bulk, 100, rng2);
        });
        transfer(g[2], 2, g[0], 0, bulk, 16, rng);
        back.join();
        EXPECT_GE(g[1].dev->relay_counters(0).stalled, 1u);
        for (uint16_t port : g[1].dev->relay_ports_for_test(0))
          for (uint16_t cut : ports) EXPECT_NE(port, cut);  // the streams came back on new tunnels
        EXPECT_FALSE(g[0].group.failure());
        EXPECT_FALSE(g[2].group.failure());
      },
      90s);
  EXPECT_EQ(rc, 0);
}

// A relay's device finds the path to one end of a tunnel down (set_paths_down): the tunnel ends at
// its next check, with nothing in flight on it, and both its sockets close; a rank at neither end
// leaves it alone.
TEST(Relay, ATunnelToARankWhosePathIsDownEnds) {
  transport::tcp::Relay relay([](int) {});
  relay.set_stall_timeout(200ms);
  const int target = runtime::listen_on("127.0.0.1", 0, 4), front = runtime::listen_on("127.0.0.1", 0, 4);
  const int requester = runtime::connect_with_timeout("127.0.0.1", runtime::local_port(front), 2s);
  ASSERT_GE(requester, 0);
  const int served = ::accept(front, nullptr, nullptr);
  ASSERT_GE(served, 0);
  std::array<uint8_t, protocol::kReplySize> accepted{}, unreachable{};
  accepted[0] = 1;
  relay.serve(served, 2, 0, transport::tcp::join_host_port("127.0.0.1", runtime::local_port(target)), 2s, accepted,
              unreachable);
  pollfd wait{target, POLLIN, 0};
  ASSERT_EQ(::poll(&wait, 1, 10000), 1);  // the relay connected on
  const int far = ::accept(target, nullptr, nullptr);
  ASSERT_GE(far, 0);
  for (int fd : {requester, far}) runtime::set_nonblocking(fd, false);
  std::array<uint8_t, protocol::kReplySize> reply{};
  ASSERT_EQ(::recv(requester, reply.data(), reply.size(), MSG_WAITALL), static_cast<ssize_t>(reply.size()));
  EXPECT_EQ(reply, accepted);
  auto round_trip = [&] {
    char out = 'x', in = 0;
    if (::send(requester, &out, 1, 0) != 1 || ::recv(far, &in, 1, MSG_WAITALL) != 1 || in != out) return false;
    return ::send(far, &out, 1, 0) == 1 && ::recv(requester, &in, 1, MSG_WAITALL) == 1 && in == out;
  };
  ASSERT_TRUE(round_trip());
  relay.set_paths_down({5});
  std::this_thread::sleep_for(300ms);  // several checks
  ASSERT_TRUE(round_trip());
  EXPECT_EQ(relay.counters().open, 1u);
  relay.set_paths_down({0});
  // Both ends see the tunnel close (bounded: a receive timeout fails the test instead of hanging).
  const timeval limit{10, 0};
  for (int fd : {requester, far}) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    char c = 0;
    const ssize_t n = ::recv(fd, &c, 1, 0);
    EXPECT_TRUE(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) << n << " " << std::strerror(errno);
  }
  for (int i = 0; i < 500 && relay.counters().open > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(relay.counters().open, 0u);
  EXPECT_EQ(relay.counters(0).stalled, 1u);
  for (int fd : {requester, far, target, front}) ::close(fd);
}

// The relay of a two-hop path loses its path to the dialling end of the pair (iptables drops every
// packet between rank 2 and rank 1, the relay) while rank 0 sends bulk frames through it. The
// relay's stall check ends the tunnels, and rank 0's ends of the streams wait for rank 2 to dial
// them again; the relay's close cannot reach rank 2 across the cut, and rank 2 only receives on
// those streams, so nothing of theirs tells it. Rank 2's own path to rank 1 goes silent (a frame
// it sends rank 1 is not acknowledged, as its heartbeats would not be): it replaces its streams
// through rank 1, they come back direct, and every frame arrives once.
TEST(Relay, ATwoHopPathWhoseRelayLosesTheDiallingEndComesBackDirect) {
  if (!test_support::can_cut_packets()) GTEST_SKIP() << "needs root and iptables";
  const int rc = test_support::run_in_netns(
      [] {
        TcpOptions o = relay_options();
        o.data_streams = 3;
        o.resume_timeout = 20s;
        Group3 g(3, o, [](int, int, const std::string& real) { return real; });
        ASSERT_TRUE(g.connected());
        g.all_wan();
        take_two_hop(g, 64 << 10);
        if (::testing::Test::HasFatalFailure()) return;
        test_support::DeviceTicker<Rank> t0(g[0]), t1(g[1]), t2(g[2]);
        std::mt19937_64 rng(13);
        const std::vector<size_t> bulk(16, 1 << 20);
        transfer(g[0], 0, g[2], 2, bulk, 0, rng);
        EXPECT_GT(g[1].dev->relay_counters(0).bytes, 0u);
        std::string host;
        uint16_t port = 0;
        runtime::split_host_port(g[1].dev->endpoint(), &host, &port);
        test_support::iptables("-I INPUT -p tcp --sport " + std::to_string(port) + " -j DROP");
        test_support::iptables("-I INPUT -p tcp --dport " + std::to_string(port) + " -j DROP");
        std::vector<uint8_t> ping(1000), pong(1000, 0);
        for (auto& x : ping) x = static_cast<uint8_t>(rng());
        std::vector<RequestPtr> pings{g[1].dev->recv(2, relayed_header(0, pong.size()), pong),
                                      g[2].dev->send(1, relayed_header(0, ping.size()), ping)};
        transfer(g[0], 0, g[2], 2, bulk, 16, rng);
        EXPECT_EQ(g[2].stats(0).two_hop, -1);
        EXPECT_TRUE(streams_through(g[2], 0, 2, -1));
        // The cut mends before rank 2's stream to rank 1 gives up (rank 0's relay cannot help: on
        // loopback the cut is of rank 1's port, for every rank): the frame arrives once.
        test_support::iptables("-D INPUT -p tcp --sport " + std::to_string(port) + " -j DROP");
        test_support::iptables("-D INPUT -p tcp --dport " + std::to_string(port) + " -j DROP");
        ASSERT_TRUE(test_support::wait_for(pings, 60s));
        for (const auto& r : pings) EXPECT_TRUE(r->ok()) << r->failure.message;
        EXPECT_EQ(ping, pong);
        EXPECT_FALSE(g[0].group.failure());
        EXPECT_FALSE(g[2].group.failure());
      },
      90s);
  EXPECT_EQ(rc, 0);
}

// Striping while a rank sends to several WAN peers at once (TcpOptions::narrow_fan_out, on by
// default: GEOCCL_EXPERIMENT=stripe=backlog): rank 0 posts 1 MiB frames to ranks 1 and 2 in turn before
// either posts a receive, so both peers have frames unsent from the start; each peer's frames then
// keep to S / 2 = 2 of its 4 data streams. With wide striping they spread over all 4. Small
// socket buffers (256 KiB) keep both peers' frames unsent whatever the pace of the posts: with the
// kernel's loopback autotuning the buffers took whole frames, and a slow poster (ASan) left a
// peer idle between its frames, so they spread wide.
TEST(Relay, FramesToTwoBusyWanPeersTakeHalfTheStreamsEach) {
  for (const bool narrow : {true, false}) {
    TcpOptions o = relay_options();
    o.data_streams = 4;
    o.narrow_fan_out = narrow;
    o.wan_buffer_bytes = 256 << 10;
    Group3 g(3, o, [](int, int, const std::string& real) { return real; }, 20s, false);
    ASSERT_TRUE(g.connected());
    g.all_wan();
    // Every data stream of rank 0 to both peers open and striped over before the first frame: a
    // stream still being set up, or re-dialled, under load would take its frames elsewhere.
    const auto all_open = [&] {
      for (int peer : {1, 2}) {
        const auto ps = g[0].stats(peer);
        if (ps.streams.open != 4 || ps.streams.width != 4) return false;
      }
      return true;
    };
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!all_open() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(all_open());
    constexpr int kFrames = 24;
    std::vector<std::vector<uint8_t>> src(2 * kFrames, std::vector<uint8_t>(1 << 20)), dst(src.size(), std::vector<uint8_t>(1 << 20));
    for (size_t i = 0; i < src.size(); ++i) std::fill(src[i].begin(), src[i].end(), static_cast<uint8_t>(i));
    std::vector<RequestPtr> sends, recvs;
    for (int i = 0; i < kFrames; ++i)
      for (int peer : {1, 2}) {
        const size_t k = static_cast<size_t>(2 * i + peer - 1);
        sends.push_back(g[0].dev->send(peer, relayed_header(static_cast<uint64_t>(i), src[k].size()), src[k]));
      }
    std::this_thread::sleep_for(200ms);  // the kernel holds what the receivers have not taken
    for (int i = 0; i < kFrames; ++i)
      for (int peer : {1, 2}) {
        const size_t k = static_cast<size_t>(2 * i + peer - 1);
        recvs.push_back(g[peer].dev->recv(0, relayed_header(static_cast<uint64_t>(i), dst[k].size()), dst[k]));
      }
    ASSERT_TRUE(test_support::wait_for(recvs, 60s));
    ASSERT_TRUE(test_support::wait_for(sends, 60s));
    for (const auto& r : recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
    for (size_t k = 0; k < src.size(); ++k) ASSERT_EQ(src[k], dst[k]) << "frame " << k;
    for (int peer : {1, 2}) {
      const auto ps = g[0].stats(peer);
      int used = 0;
      uint64_t beyond = 0;  // frames on streams 3 and 4
      for (const auto& st : ps.streams.each) {
        used += st.frames_sent > 0;
        if (st.index > 2) beyond += st.frames_sent;
      }
      if (narrow) {
        // The first frame to peer 1 went before peer 2 was busy: at most that one beyond.
        std::string per_stream;
        for (const auto& st : ps.streams.each)
          per_stream += " [stream " + std::to_string(st.index) + ": " + std::to_string(st.frames_sent) + " frames, " +
                        std::to_string(st.reconnects) + " reconnects]";
        EXPECT_LE(beyond, 1u) << "peer " << peer << ", width " << ps.streams.width << ":" << per_stream;
      } else {
        EXPECT_EQ(used, 4) << "peer " << peer;
      }
    }
  }
}
