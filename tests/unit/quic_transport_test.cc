// Two QuicDevices in one process over loopback: frames of random sizes (empty ones and several
// MiB included) arrive intact whether their receive is posted before or after they arrive, every
// send is acknowledged (delivered), more frames than one connection's stream credit go through,
// statistics are filled; a certificate that is not the published one is refused on either side;
// the options are read and checked.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "api/startup/device_options.h"
#include "geoccl/config.h"
#include "geoccl/error.h"
#include "runtime/event_loop.h"
#include "transport/group.h"
#include "transport/quic/address.h"
#include "transport/quic/device.h"
#include "transport/router.h"
#include "requests.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::RequestPtr;
using transport::quic::QuicDevice;
using transport::quic::QuicOptions;

namespace {

using test_support::wait_for;

struct QuicSide {
  runtime::EventLoop loop;
  transport::Group group;
  std::unique_ptr<QuicDevice> dev;
  QuicSide(const char* name, int r, const QuicOptions& o = {}) : loop(name), group(loop, r, 2, 42, 0, [] {}) {
    dev = std::make_unique<QuicDevice>(group, "127.0.0.1", o);
  }
};

// Connects both sides; each sees the other's published address through `a0` / `a1` (a test may
// give a forged one). Returns the errors of rank 0's and rank 1's connect ("" = connected).
std::pair<std::string, std::string> connect(QuicSide& s0, QuicSide& s1, std::vector<uint8_t> a0, std::vector<uint8_t> a1,
                                            std::chrono::seconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string e0, e1;
  std::thread c0([&] {
    try {
      s0.dev->connect({1}, [&](int) { return a1; }, {}, deadline);
    } catch (const Error& e) {
      e0 = e.what();
    }
  });
  try {
    s1.dev->connect({0}, [&](int) { return a0; }, {}, deadline);
  } catch (const Error& e) {
    e1 = e.what();
  }
  c0.join();
  return {e0, e1};
}

protocol::FrameHeader quic_header(uint64_t i, size_t bytes) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kSendRecv;
  h.seq = i;
  h.op_bytes = bytes;
  return h;
}

TEST(QuicTransport, FramesArriveIntactPostedEarlyOrLateAndAreDelivered) {
  QuicSide s0("q0", 0), s1("q1", 1);
  const auto [e0, e1] = connect(s0, s1, s0.dev->address(), s1.dev->address());
  ASSERT_EQ(e0, "");
  ASSERT_EQ(e1, "");
  std::mt19937_64 rng(7);
  // More frames than the 4096 streams one connection may have open: the credit comes back as
  // streams close.
  const size_t frames = 5000;
  std::vector<std::vector<uint8_t>> src(frames), dst(frames);
  for (size_t i = 0; i < frames; ++i) {
    const size_t n = i == 0 ? 0 : i % 1000 == 1 ? (5u << 20) + 3 : rng() % 3 == 0 ? rng() % 64 : rng() % 20000;
    src[i].resize(n);
    for (auto& b : src[i]) b = static_cast<uint8_t>(rng());
    dst[i].assign(n, 0);
  }
  std::vector<RequestPtr> sends, recvs;
  // Half the receives are posted before the frames are sent, the rest after some arrived.
  for (size_t i = 0; i < frames / 2; ++i) recvs.push_back(s1.dev->recv(0, quic_header(i, dst[i].size()), dst[i]));
  for (size_t i = 0; i < frames; ++i) sends.push_back(s0.dev->send(1, quic_header(i, src[i].size()), src[i]));
  std::this_thread::sleep_for(50ms);
  for (size_t i = frames / 2; i < frames; ++i) recvs.push_back(s1.dev->recv(0, quic_header(i, dst[i].size()), dst[i]));
  ASSERT_TRUE(wait_for(recvs, 60s));
  ASSERT_TRUE(wait_for(sends, 60s, true)) << "not every frame was acknowledged";
  for (size_t i = 0; i < frames; ++i) {
    ASSERT_TRUE(recvs[i]->ok()) << recvs[i]->failure.message;
    ASSERT_EQ(recvs[i]->bytes, src[i].size());
    ASSERT_EQ(src[i], dst[i]) << "frame " << i;
  }
  transport::LinkStats ps;
  ps.peer = 1;
  s0.dev->stats(&ps);
  EXPECT_EQ(ps.frames_sent, frames);
  EXPECT_GT(ps.rtt_ms, 0.0);
  EXPECT_GT(ps.quic.cwnd_bytes, 0u);
  EXPECT_GE(ps.quic.streams_opened, frames);
  EXPECT_EQ(ps.quic.congestion_control, "bbr2");
  // The windows are the ones sized from the figures reported (unmeasured: the configured window).
  const auto sized = transport::quic::size_windows(ps.quic.window_rtt_ns, ps.quic.window_rate_bps,
                                                   QuicOptions{}.window_limits());
  EXPECT_EQ(ps.quic.window_bytes, sized.connection);
  EXPECT_EQ(ps.quic.stream_window_bytes, sized.stream);
  EXPECT_GE(ps.quic.window_bytes, QuicOptions{}.window_bytes);
  EXPECT_GT(ps.quic.max_window_bytes, 0u);
  EXPECT_FALSE(s0.group.failed());
  EXPECT_FALSE(s1.group.failed());
}

// Rank 1's published fingerprint is forged: rank 0 (the acceptor) refuses its handshake, both
// connects fail with a clear error, and the refusal is counted.
TEST(QuicTransport, AcceptorRefusesACertificateThatIsNotThePublishedOne) {
  QuicSide s0("q0", 0), s1("q1", 1), other("q2", 1);
  transport::quic::Address forged;
  ASSERT_TRUE(transport::quic::decode_address(s1.dev->address(), &forged));
  transport::quic::Address theirs;
  ASSERT_TRUE(transport::quic::decode_address(other.dev->address(), &theirs));
  forged.fingerprint = theirs.fingerprint;  // rank 1's endpoint, somebody else's key
  const auto [e0, e1] = connect(s0, s1, s0.dev->address(), transport::quic::encode_address(forged), 3s);
  EXPECT_NE(e1, "");
  EXPECT_NE(e1.find("refused"), std::string::npos) << e1;
  EXPECT_NE(e0, "");  // rank 0 never got a peer
  EXPECT_GE(s0.dev->rejected_connections(), 1u);
}

// Rank 0's published fingerprint is forged: the dialler sees a certificate that is not the one
// published and gives up with a message that says so.
TEST(QuicTransport, DiallerRefusesACertificateThatIsNotThePublishedOne) {
  QuicSide s0("q0", 0), s1("q1", 1), other("q2", 0);
  transport::quic::Address forged, theirs;
  ASSERT_TRUE(transport::quic::decode_address(s0.dev->address(), &forged));
  ASSERT_TRUE(transport::quic::decode_address(other.dev->address(), &theirs));
  forged.fingerprint = theirs.fingerprint;
  const auto [e0, e1] = connect(s0, s1, transport::quic::encode_address(forged), s1.dev->address(), 3s);
  EXPECT_NE(e1.find("certificate"), std::string::npos) << e1;
  EXPECT_NE(e0, "");
}

TEST(QuicTransport, AddressesRoundTripAndRejectGarbage) {
  transport::quic::Address a{"10.1.2.3:4567", {}};
  for (size_t i = 0; i < a.fingerprint.size(); ++i) a.fingerprint[i] = static_cast<uint8_t>(i * 7);
  transport::quic::Address b;
  ASSERT_TRUE(transport::quic::decode_address(transport::quic::encode_address(a), &b));
  EXPECT_EQ(b.endpoint, a.endpoint);
  EXPECT_EQ(b.fingerprint, a.fingerprint);
  auto bytes = transport::quic::encode_address(a);
  bytes.pop_back();
  EXPECT_FALSE(transport::quic::decode_address(bytes, &b));
  EXPECT_FALSE(transport::quic::decode_address(transport::quic::encode_address({"no-port", {}}), &b));
}

// Frames each way in each round of redial_with_frames_in_flight().
constexpr size_t kRedialFrames = 24;

// Rank 1 re-dials rank 0 while frames are in flight both ways: its connection has gone deaf (it
// hears nothing, as after a cut of the path towards it), so none of the frames sent either way
// on it is acknowledged, and the new connection resumes the first one's TLS session and carries
// them all. Returns rank 1's and rank 0's view of each other once every frame arrived; every
// frame is checked, and each arrives exactly once.
std::pair<transport::LinkStats, transport::LinkStats> redial_with_frames_in_flight(QuicSide& s0, QuicSide& s1) {
  const auto [e0, e1] = connect(s0, s1, s0.dev->address(), s1.dev->address());
  EXPECT_EQ(e0, "");
  EXPECT_EQ(e1, "");
  std::mt19937_64 rng(11);
  const size_t rounds = 3, frames = kRedialFrames;
  size_t seq = 0;
  for (size_t round = 0; round < rounds; ++round) {
    // Round 0 brings the session ticket; in round 1 rank 1 stops hearing its connection before
    // the frames are sent and re-dials once every one of them is on it; round 2 runs on the new
    // connection.
    std::vector<std::vector<uint8_t>> src(2 * frames), dst(2 * frames);
    std::vector<RequestPtr> reqs;
    for (size_t i = 0; i < 2 * frames; ++i) {
      const size_t n = i % 6 == 0 ? (1u << 20) + 5 : rng() % 3 == 0 ? rng() % 64 : rng() % 30000;
      src[i].resize(n);
      for (auto& b : src[i]) b = static_cast<uint8_t>(rng());
      dst[i].assign(n, 0);
    }
    for (size_t i = 0; i < frames; ++i) {
      reqs.push_back(s0.dev->recv(1, quic_header(seq + i, dst[i].size()), dst[i]));
      reqs.push_back(s1.dev->recv(0, quic_header(seq + i, dst[frames + i].size()), dst[frames + i]));
    }
    if (round == 1) s1.dev->deafen_for_test(0);
    std::vector<RequestPtr> sends;
    for (size_t i = 0; i < frames; ++i) {
      sends.push_back(s1.dev->send(0, quic_header(seq + i, src[i].size()), src[i]));
      sends.push_back(s0.dev->send(1, quic_header(seq + i, src[frames + i].size()), src[frames + i]));
    }
    if (round == 1) {
      // Every frame is numbered and handed to the deaf connection (a send's first completion),
      // so none can be acknowledged before the new connection replaces it.
      EXPECT_TRUE(wait_for(sends, 30s)) << "round 1: frames not handed to the connection";
      s1.dev->redial_now(0);
    }
    EXPECT_TRUE(wait_for(reqs, 30s)) << "round " << round;
    EXPECT_TRUE(wait_for(sends, 30s, true)) << "round " << round << ": not every frame was acknowledged";
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(reqs[i]->ok()) << reqs[i]->failure.message;
    for (size_t i = 0; i < 2 * frames; ++i) EXPECT_EQ(src[i], dst[i]) << "round " << round << " frame " << i;
    seq += frames;
    if (round == 0) std::this_thread::sleep_for(100ms);  // the ticket follows the handshake
  }
  transport::LinkStats p1, p0;
  p1.peer = 0;
  s1.dev->stats(&p1);
  p0.peer = 1;
  s0.dev->stats(&p0);
  EXPECT_EQ(p1.frames_received, rounds * frames);  // exactly once: no copy was taken twice
  EXPECT_EQ(p0.frames_received, rounds * frames);
  EXPECT_EQ(p1.quic.reconnects, 1u);
  EXPECT_EQ(p0.quic.reconnects, 1u);
  // Rank 1 acknowledged none of rank 0's frames of round 1: all go again on the new connection.
  // (Rank 1's own frames ride its 0-RTT flight, where rank 0 may acknowledge some before the
  // new connection is established.)
  EXPECT_EQ(p0.quic.frames_resent, frames);
  EXPECT_FALSE(s0.group.failed());
  EXPECT_FALSE(s1.group.failed());
  return {p1, p0};
}

TEST(QuicTransport, ARedialResumesTheSessionAndSendsItsFramesAsZeroRtt) {
  QuicSide s0("q0", 0), s1("q1", 1);
  const auto [p1, p0] = redial_with_frames_in_flight(s0, s1);
  EXPECT_EQ(p1.quic.zero_rtt, 1u);  // the dialler's early data was accepted
  EXPECT_EQ(p0.quic.zero_rtt, 1u);  // and the acceptor took it
  EXPECT_EQ(p1.quic.zero_rtt_refused, 0u);
}

TEST(QuicTransport, ARedialFallsBackToAFullHandshakeWhenTheAcceptorRefusesZeroRtt) {
  QuicOptions no0rtt;
  no0rtt.zero_rtt = false;
  QuicSide s0("q0", 0, no0rtt), s1("q1", 1);
  const auto [p1, p0] = redial_with_frames_in_flight(s0, s1);
  EXPECT_EQ(p1.quic.zero_rtt, 0u);
  EXPECT_EQ(p1.quic.zero_rtt_refused, 1u);
  EXPECT_EQ(p0.quic.zero_rtt, 0u);
  // The early data were discarded and nothing goes before the full handshake's Reply: every
  // frame of round 1 was unacknowledged when the new connection was established.
  EXPECT_EQ(p1.quic.frames_resent, kRedialFrames);
}

TEST(QuicTransport, OptionsAndTransportChoiceFromEnvironment) {
  ::setenv("GEOCCL_EXPERIMENT", "quic_cc=cubic,quic_window=16M", 1);
  Config c = Config::from_env();
  EXPECT_EQ(api::startup::quic_options(c).congestion_control, "cubic");
  EXPECT_EQ(api::startup::quic_options(c).window_bytes, 16u << 20);
  ::setenv("GEOCCL_EXPERIMENT", "quic_cc=vegas", 1);
  EXPECT_THROW(
      {
        try {
          Config::from_env().validate();
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
          throw;
        }
      },
      Error);
  ::unsetenv("GEOCCL_EXPERIMENT");
  EXPECT_TRUE(api::startup::quic_options(Config::from_env()).zero_rtt);
  ::setenv("GEOCCL_EXPERIMENT", "quic_0rtt=0", 1);
  EXPECT_FALSE(api::startup::quic_options(Config::from_env()).zero_rtt);
  ::unsetenv("GEOCCL_EXPERIMENT");
  const auto q = transport::PathChoice::parse("quic");
  EXPECT_EQ(q.host, "quic");
  EXPECT_EQ(q.remote, "quic");
  const auto r = transport::PathChoice::parse("remote=quic");
  EXPECT_EQ(r.host, "shm");
  EXPECT_EQ(r.remote, "quic");
  EXPECT_THROW((void)transport::PathChoice::parse("remote=shm"), Error);
}

}  // namespace
