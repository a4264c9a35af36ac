// Two TcpTransports in one process over loopback: striped frames of random sizes arrive intact
// with and without MSG_ZEROCOPY, TCP_INFO statistics are filled, buffers are applied, and the
// transport options are read from the environment.
#include <gtest/gtest.h>

#include "geoccl/config.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "geoccl/error.h"
#include "runtime/event_loop.h"
#include "transport/tcp/tcp_transport.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::RequestPtr;
using transport::tcp::TcpOptions;
using transport::tcp::TcpTransport;

namespace {

bool wait_all(const std::vector<RequestPtr>& reqs, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (const auto& r : reqs)
    while (!r->done.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
  return true;
}

struct Pair {
  runtime::EventLoop loop0{"t0"}, loop1{"t1"};
  std::unique_ptr<TcpTransport> t0, t1;

  Pair(int streams, const TcpOptions& o) {
    t0 = std::make_unique<TcpTransport>(loop0, 0, 2, "127.0.0.1", 42, [] {}, "", streams, o);
    t1 = std::make_unique<TcpTransport>(loop1, 1, 2, "127.0.0.1", 42, [] {}, "", streams, o);
    const std::string a0 = t0->address(), a1 = t1->address();
    std::thread c0([&] { t0->connect_all([&](int) { return a1; }, 10s); });
    t1->connect_all([&](int) { return a0; }, 10s);
    c0.join();
  }
  ~Pair() {
    t1.reset();
    t0.reset();
  }
};

protocol::FrameHeader header(uint64_t i, size_t bytes) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kSendRecv;
  h.seq = i;
  h.op_bytes = bytes;
  return h;
}

// Rank 0 sends `frames` frames of random sizes; rank 1 posts its receives in random batches.
void transfer(Pair& p, int frames, std::mt19937_64& rng) {
  std::vector<std::vector<uint8_t>> src(static_cast<size_t>(frames)), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    src[i].resize(rng() % 3 == 0 ? rng() % 64 : rng() % (512 * 1024));
    for (auto& b : src[i]) b = static_cast<uint8_t>(rng());
    dst[i].assign(src[i].size(), 0);
  }
  std::vector<RequestPtr> sends, recvs;
  for (size_t i = 0; i < src.size(); ++i)
    sends.push_back(p.t0->send(1, header(i, src[i].size()), src[i]));
  for (size_t i = 0; i < dst.size();) {
    const size_t batch = 1 + rng() % 16;
    for (size_t j = 0; j < batch && i < dst.size(); ++j, ++i)
      recvs.push_back(p.t1->recv(0, header(i, dst[i].size()), dst[i]));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
  }
  ASSERT_TRUE(wait_all(recvs, 60s));
  ASSERT_TRUE(wait_all(sends, 60s));
  for (const auto& r : recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (const auto& r : sends) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(src[i], dst[i]) << "frame " << i;
}

}  // namespace

TEST(TcpTransport, StripedFramesArriveIntactWithStats) {
  TcpOptions o;
  o.buffer_bytes = 4 << 20;
  o.notsent_lowat = 256 << 10;
  Pair p(4, o);
  std::mt19937_64 rng(1);
  transfer(p, 300, rng);
  const auto stats = p.t0->stats();
  ASSERT_EQ(stats.size(), 1u);
  const auto& s = stats[0];
  EXPECT_EQ(s.peer, 1);
  EXPECT_EQ(s.data_streams, 4);
  ASSERT_EQ(s.streams.size(), 4u);
  EXPECT_FALSE(s.congestion_control.empty());
  uint64_t frames = 0;
  for (const auto& st : s.streams) {
    frames += st.frames_sent;
    EXPECT_GT(st.mss, 0u);
    EXPECT_GT(st.cwnd_segments, 0u);
    // The kernel reports twice the request (its bookkeeping); without CAP_NET_ADMIN the request
    // is capped by net.core.wmem_max, so only check that something was applied.
    EXPECT_GT(st.send_buffer, 0u);
  }
  EXPECT_EQ(frames, 300u);
  EXPECT_GT(s.bytes_sent, 0u);
}

TEST(TcpTransport, ZeroCopySendsCompleteAndArriveIntact) {
  TcpOptions o;
  o.zerocopy = true;
  o.zerocopy_min_bytes = 4096;
  Pair p(3, o);
  std::mt19937_64 rng(2);
  transfer(p, 200, rng);
  // Frame numbering continues across batches.
  transfer(p, 50, rng);
}

TEST(TcpTransport, SingleStreamKeepsWorking) {
  Pair p(1, TcpOptions{});
  std::mt19937_64 rng(3);
  transfer(p, 100, rng);
}

TEST(TcpTransport, OptionsFromEnvironment) {
  ::unsetenv("GEOCCL_DOMAIN");
  ::unsetenv("GEOCCL_TCP_BUF_BYTES");
  ::unsetenv("GEOCCL_TCP_NOTSENT_LOWAT");
  ::unsetenv("GEOCCL_TCP_ZEROCOPY");
  auto o = TcpOptions::from_config(Config::from_env());
  EXPECT_EQ(o.buffer_bytes, 0u);  // one site: kernel autotuning
  EXPECT_EQ(o.notsent_lowat, 0u);
  EXPECT_FALSE(o.zerocopy);
  ::setenv("GEOCCL_DOMAIN", "us-east", 1);
  o = TcpOptions::from_config(Config::from_env());
  EXPECT_EQ(o.buffer_bytes, 32u << 20);  // WAN job defaults
  EXPECT_EQ(o.notsent_lowat, 1u << 20);
  ::setenv("GEOCCL_TCP_BUF_BYTES", "8M", 1);
  ::setenv("GEOCCL_TCP_NOTSENT_LOWAT", "0", 1);
  ::setenv("GEOCCL_TCP_ZEROCOPY", "1", 1);
  o = TcpOptions::from_config(Config::from_env());
  EXPECT_EQ(o.buffer_bytes, 8u << 20);
  EXPECT_EQ(o.notsent_lowat, 0u);
  EXPECT_TRUE(o.zerocopy);
  EXPECT_FALSE(o.round_robin);
  ::setenv("GEOCCL_TCP_STRIPE", "rr", 1);
  EXPECT_TRUE(TcpOptions::from_config(Config::from_env()).round_robin);
  ::setenv("GEOCCL_TCP_STRIPE", "random", 1);
  EXPECT_THROW(Config::from_env().validate(), Error);
  ::unsetenv("GEOCCL_TCP_STRIPE");
  ::setenv("GEOCCL_TCP_BUF_BYTES", "lots", 1);
  EXPECT_THROW(Config::from_env(), Error);
  for (const char* v : {"GEOCCL_DOMAIN", "GEOCCL_TCP_BUF_BYTES", "GEOCCL_TCP_NOTSENT_LOWAT",
                        "GEOCCL_TCP_ZEROCOPY"})
    ::unsetenv(v);
}

// Stream recovery (GEOCCL_TCP_RESUME): both ranks send to each other while data streams are reset
// with RSTs from either end at random moments; every frame must arrive exactly once and intact
// and every request succeed. Rank 1 re-dials the streams, rank 0 accepts the replacements.
namespace {

struct Flow {
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<RequestPtr> sends, recvs;
};

void make_flow(Flow& f, int frames, std::mt19937_64& rng) {
  f.src.resize(static_cast<size_t>(frames));
  f.dst.resize(f.src.size());
  for (size_t i = 0; i < f.src.size(); ++i) {
    f.src[i].resize(rng() % 4 == 0 ? rng() % 64 : rng() % (1 << 20));
    for (auto& b : f.src[i]) b = static_cast<uint8_t>(rng());
    f.dst[i].assign(f.src[i].size(), 0);
  }
}

// Every request of the flow succeeded and every frame arrived intact.
void expect_delivered(Flow& f) {
  ASSERT_TRUE(wait_all(f.recvs, 60s));
  ASSERT_TRUE(wait_all(f.sends, 60s));
  for (const auto& r : f.recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (const auto& r : f.sends) ASSERT_TRUE(r->ok()) << r->failure.message;
  for (size_t i = 0; i < f.src.size(); ++i) ASSERT_EQ(f.src[i], f.dst[i]) << "frame " << i;
}

void reset_while_transferring(int streams, uint64_t seed, bool zerocopy = false) {
  TcpOptions o;
  o.resume = true;
  o.zerocopy = zerocopy;
  o.zerocopy_min_bytes = 4096;
  o.resume_timeout = 10s;
  o.buffer_bytes = 1 << 20;  // small buffers: more of each transfer is in flight at a reset
  Pair p(streams, o);
  std::mt19937_64 rng(seed);
  Flow up, down;  // 0 -> 1 and 1 -> 0
  make_flow(up, 200, rng);
  make_flow(down, 200, rng);
  for (size_t i = 0; i < up.src.size(); ++i) up.sends.push_back(p.t0->send(1, header(i, up.src[i].size()), up.src[i]));
  for (size_t i = 0; i < down.src.size(); ++i)
    down.sends.push_back(p.t1->send(0, header(i, down.src[i].size()), down.src[i]));
  int resets = 0;
  for (size_t i = 0; i < up.dst.size();) {
    const size_t batch = 1 + rng() % 12;
    for (size_t j = 0; j < batch && i < up.dst.size(); ++j, ++i) {
      up.recvs.push_back(p.t1->recv(0, header(i, up.dst[i].size()), up.dst[i]));
      down.recvs.push_back(p.t0->recv(1, header(i, down.dst[i].size()), down.dst[i]));
    }
    if (rng() % 3 == 0) {  // an RST on a random data stream, from a random end
      const int stream = 1 + static_cast<int>(rng() % static_cast<uint64_t>(streams));
      if (rng() % 2) p.t0->reset_stream_for_test(1, stream); else p.t1->reset_stream_for_test(0, stream);
      ++resets;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  }
  expect_delivered(up);
  expect_delivered(down);
  EXPECT_FALSE(p.t0->failure().has_value());
  EXPECT_FALSE(p.t1->failure().has_value());
  uint64_t reconnects = 0, resent = 0;
  for (TcpTransport* t : {p.t0.get(), p.t1.get()})
    for (const auto& ps : t->stats())
      for (const auto& st : ps.streams) {
        reconnects += st.reconnects;
        resent += st.frames_resent;
      }
  EXPECT_GT(resets, 0);
  EXPECT_GT(reconnects, 0u);
  EXPECT_GT(resent, 0u);  // resets hit frames in flight, which were re-sent
  // The transports keep working after the storm, with frame numbering intact.
  transfer(p, 50, rng);
}

}  // namespace

TEST(TcpTransport, ResetStreamsAreReestablishedWithoutLossOrDuplicates) {
  reset_while_transferring(4, 11);
}

TEST(TcpTransport, ResetOfTheOnlyDataStreamIsRecovered) { reset_while_transferring(1, 12); }

TEST(TcpTransport, ResetStreamsWithZeroCopySendsAreRecovered) { reset_while_transferring(3, 13, true); }

// Without resume a broken data stream fails the group on both ends with peer-lost, promptly.
TEST(TcpTransport, ResetWithoutResumeFailsBothRanks) {
  Pair p(2, TcpOptions{});
  std::vector<uint8_t> big(64 << 20, 7), dst(big.size());
  auto s = p.t0->send(1, header(0, big.size()), big);
  auto r = p.t1->recv(0, header(0, dst.size()), dst);
  p.t1->reset_stream_for_test(0, 1);
  p.t1->reset_stream_for_test(0, 2);
  ASSERT_TRUE(wait_all({s, r}, 10s));
  EXPECT_EQ(r->failure.code, ErrorCode::kPeerLost);
  EXPECT_EQ(s->failure.code, ErrorCode::kPeerLost);
  ASSERT_TRUE(p.t0->failure().has_value());
  ASSERT_TRUE(p.t1->failure().has_value());
}

TEST(TcpTransport, ResumeOptionFromEnvironment) {
  ::unsetenv("GEOCCL_DOMAIN");
  ::unsetenv("GEOCCL_TCP_RESUME");
  EXPECT_FALSE(TcpOptions::from_config(Config::from_env()).resume);  // one site: off
  ::setenv("GEOCCL_DOMAIN", "eu", 1);
  EXPECT_TRUE(TcpOptions::from_config(Config::from_env()).resume);  // WAN job: on
  ::setenv("GEOCCL_TCP_RESUME", "off", 1);
  EXPECT_FALSE(TcpOptions::from_config(Config::from_env()).resume);
  ::setenv("GEOCCL_TCP_RESUME", "maybe", 1);
  EXPECT_THROW(Config::from_env().validate(), Error);
  ::unsetenv("GEOCCL_DOMAIN");
  ::setenv("GEOCCL_TCP_RESUME", "on", 1);
  ::setenv("GEOCCL_TCP_RESUME_TIMEOUT_MS", "1500", 1);
  const auto o = TcpOptions::from_config(Config::from_env());
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.resume_timeout.count(), 1500);
  ::unsetenv("GEOCCL_TCP_RESUME");
  ::unsetenv("GEOCCL_TCP_RESUME_TIMEOUT_MS");
}

// A NAT forgets the flow of a data stream: the higher rank (which dials) loses it without the
// lower rank noticing. The lower rank takes the new connection for that stream as its replacement
// (closing a socket that still looked healthy), and everything arrives exactly once.
TEST(TcpTransport, SilentlyForgottenStreamIsReplacedByThePeer) {
  TcpOptions o;
  o.resume = true;
  o.resume_timeout = 10s;
  o.buffer_bytes = 1 << 20;
  Pair p(2, o);
  std::mt19937_64 rng(21);
  Flow up, down;
  make_flow(up, 120, rng);
  make_flow(down, 120, rng);
  for (size_t i = 0; i < up.src.size(); ++i) {
    up.sends.push_back(p.t0->send(1, header(i, up.src[i].size()), up.src[i]));
    down.sends.push_back(p.t1->send(0, header(i, down.src[i].size()), down.src[i]));
  }
  for (size_t i = 0; i < up.dst.size(); ++i) {
    up.recvs.push_back(p.t1->recv(0, header(i, up.dst[i].size()), up.dst[i]));
    down.recvs.push_back(p.t0->recv(1, header(i, down.dst[i].size()), down.dst[i]));
    if (i == 30 || i == 70) p.t1->reset_stream_for_test(0, i == 30 ? 1 : 2, /*silent=*/true);
    if (i % 8 == 0) std::this_thread::sleep_for(2ms);
  }
  expect_delivered(up);
  expect_delivered(down);
  uint64_t replaced = 0;
  for (const auto& ps : p.t0->stats())  // the lower rank saw its streams replaced
    for (const auto& st : ps.streams) replaced += st.reconnects;
  EXPECT_EQ(replaced, 2u);
}

// The lower rank loses a stream the peer does not know is gone: nobody re-dials, and after
// the resume timeout both ranks fail with peer-lost instead of waiting.
TEST(TcpTransport, StreamNotReestablishedInTimeFailsBothRanks) {
  TcpOptions o;
  o.resume = true;
  o.resume_timeout = 300ms;
  Pair p(1, o);
  std::vector<uint8_t> dst(1024);
  auto r = p.t0->recv(1, header(0, dst.size()), dst);
  const auto t0 = std::chrono::steady_clock::now();
  p.t0->reset_stream_for_test(1, 1, /*silent=*/true);
  ASSERT_TRUE(wait_all({r}, 10s));
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r->failure.code, ErrorCode::kPeerLost);
  EXPECT_NE(r->failure.message.find("did not re-establish"), std::string::npos) << r->failure.message;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);
  for (int i = 0; i < 500 && !p.t1->failure(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(p.t1->failure().has_value());  // told through the control stream
}
