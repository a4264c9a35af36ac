// The stall detector's rule without sockets (src/transport/tcp/stall.h): figures in, the streams
// to replace out.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "transport/tcp/stall.h"

using namespace std::chrono_literals;
using geoccl::transport::tcp::busy_bound;
using geoccl::transport::tcp::kBusyRtts;
using geoccl::transport::tcp::kBusyTimeouts;
using geoccl::transport::tcp::StallDecision;
using geoccl::transport::tcp::stalled_streams;
using geoccl::transport::tcp::StallReason;
using geoccl::transport::tcp::StallSample;

namespace {

constexpr auto kTimeout = 1000ms;

StallSample stream(uint64_t unacked, std::chrono::milliseconds since_ack,
                   std::chrono::microseconds srtt = 20ms, uint64_t delivery_bps = 100'000'000) {
  StallSample s;
  s.open = true;
  s.unacked_bytes = unacked;
  s.since_ack = since_ack;
  s.waiting = unacked > 0 ? since_ack : 0ms;  // busy since before its last ack
  s.srtt = srtt;
  s.delivery_bps = delivery_bps;
  return s;
}

std::vector<size_t> indices(const std::vector<StallDecision>& d) {
  std::vector<size_t> out;
  for (const auto& x : d) out.push_back(x.stream);
  return out;
}

}  // namespace

TEST(TcpStall, OffWhenTheTimeoutIsZero) {
  const std::vector<StallSample> s = {stream(0, 60s), stream(1 << 20, 60s)};
  EXPECT_TRUE(stalled_streams(s, 0ms).empty());
}

// Every stream of the peer stops hearing back at the same moment (a cut link, t = time since the
// cut). From `timeout` after the cut on, the streams replaced are exactly those the detector
// replaced before it told busy from broken: data in flight, no acknowledgement for
// max(timeout, 8 srtt). Before that nothing is (a stream whose last ack came a little earlier than
// the freshest one waits for it: at most the spacing of the last acks before the cut).
TEST(TcpStall, AnOutageReplacesEveryQuietStreamAsBefore) {
  for (auto srtt : {std::chrono::microseconds(50), std::chrono::microseconds(20ms),
                    std::chrono::microseconds(140ms), std::chrono::microseconds(300ms)}) {
    const auto quiet = std::max<std::chrono::milliseconds>(
        kTimeout, std::chrono::duration_cast<std::chrono::milliseconds>(8 * srtt));
    for (auto t = 0ms; t <= 4000ms; t += 10ms) {
      // Control stream: a heartbeat acknowledged 5 ms before the cut, nothing in flight; stream 3
      // idle since long before; streams 1 and 2 busy when the link went, their last acks at the
      // cut and 30 ms before it.
      const std::vector<StallSample> s = {stream(0, t + 5ms, srtt), stream(256 << 10, t, srtt),
                                          stream(1 << 20, t + 30ms, srtt),
                                          stream(0, t + 9000ms, srtt)};
      const auto d = stalled_streams(s, kTimeout);
      std::vector<size_t> before;  // the rule without the busy/broken distinction
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i].unacked_bytes > 0 && s[i].since_ack >= quiet) before.push_back(i);
      EXPECT_EQ(indices(d), t >= kTimeout ? before : std::vector<size_t>{})
          << "t " << t.count() << " ms, srtt " << srtt.count() << " us";
      for (const auto& x : d) {
        EXPECT_EQ(x.reason, StallReason::kPathSilent);
        EXPECT_EQ(x.bound, quiet);
      }
    }
  }
}

TEST(TcpStall, AQuietControlStreamOnASilentPathIsReplaced) {
  const std::vector<StallSample> s = {stream(80, 1200ms), stream(0, 5000ms), stream(0, 1100ms)};
  const auto d = stalled_streams(s, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{0});
  EXPECT_EQ(d[0].reason, StallReason::kPathSilent);
}

// Deep queue on a shared uplink: stream 2's segments wait (or wait out a retransmission timeout)
// for seconds while streams 1 and 3 are acknowledged: busy, left alone up to the busy bound.
TEST(TcpStall, AQuietStreamWhileTheOthersAreAcknowledgedIsBusyUntilTheBusyBound) {
  for (auto quiet : {1000ms, 1500ms, 3000ms, 9999ms}) {
    const std::vector<StallSample> s = {stream(0, 900ms), stream(1 << 20, 2ms),
                                        stream(1 << 20, quiet), stream(512 << 10, 40ms)};
    EXPECT_TRUE(stalled_streams(s, kTimeout).empty()) << quiet.count() << " ms";
  }
  const std::vector<StallSample> s = {stream(0, 900ms), stream(1 << 20, 2ms),
                                      stream(1 << 20, 10000ms), stream(512 << 10, 40ms)};
  const auto d = stalled_streams(s, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{2});
  EXPECT_EQ(d[0].reason, StallReason::kStreamStuck);
  EXPECT_EQ(d[0].bound, kBusyTimeouts * kTimeout);
}

// Life on the path counts from any stream, also one with nothing in flight (the control stream's
// heartbeat, acknowledged 100 ms ago), and only from an ack within the timeout.
TEST(TcpStall, AnyRecentAcknowledgementShowsLife) {
  EXPECT_TRUE(
      stalled_streams(std::vector<StallSample>{stream(0, 100ms), stream(1 << 20, 2000ms)}, kTimeout)
          .empty());
  EXPECT_TRUE(
      stalled_streams(std::vector<StallSample>{stream(1 << 20, 2000ms), stream(0, 999ms)}, kTimeout)
          .empty());
  const auto d = stalled_streams(
      std::vector<StallSample>{stream(1 << 20, 2000ms), stream(0, 1000ms)}, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{0});
  EXPECT_EQ(d[0].reason, StallReason::kPathSilent);
}

// A stream idle for 8 s sends again: the kernel's last ack is 8 s old, but its data has waited
// only since it was last seen with nothing in flight (100 ms). Not quiet, on a silent path too
// (every other stream idle as long); quiet once that wait reaches the bound.
TEST(TcpStall, AStreamThatJustSentAfterIdlingIsNotQuiet) {
  StallSample woke = stream(1 << 20, 8000ms);
  woke.waiting = 100ms;
  const std::vector<StallSample> s = {stream(0, 8000ms), woke, stream(0, 8000ms)};
  EXPECT_TRUE(stalled_streams(s, kTimeout).empty());
  auto later = s;
  later[1].waiting = 1000ms;
  const auto d = stalled_streams(later, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{1});
  EXPECT_EQ(d[0].reason, StallReason::kPathSilent);
}

// A closed stream (being re-established) says nothing about the path: its figures are stale.
TEST(TcpStall, ClosedStreamsAreIgnored) {
  StallSample closed = stream(1 << 20, 0ms);
  closed.open = false;
  const auto d =
      stalled_streams(std::vector<StallSample>{closed, stream(1 << 20, 1500ms)}, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{1});
  EXPECT_EQ(d[0].reason, StallReason::kPathSilent);
  closed.since_ack = 60s;
  EXPECT_TRUE(
      stalled_streams(std::vector<StallSample>{closed, stream(1 << 20, 10ms)}, kTimeout).empty());
}

// Nothing in flight: no acknowledgement is owed, however long ago the last one came.
TEST(TcpStall, IdleStreamsAreNeverReplaced) {
  EXPECT_TRUE(
      stalled_streams(std::vector<StallSample>{stream(0, 60s), stream(0, 600s)}, kTimeout).empty());
}

// On a long path one loss repaired by one retransmission takes a few round trips: 8 srtt.
TEST(TcpStall, ALongPathGetsEightRoundTripsOnASilentPath) {
  const std::vector<StallSample> before = {stream(0, 1700ms, 200ms),
                                           stream(1 << 20, 1599ms, 200ms)};
  EXPECT_TRUE(stalled_streams(before, kTimeout).empty());
  const std::vector<StallSample> at = {stream(0, 1700ms, 200ms), stream(1 << 20, 1600ms, 200ms)};
  const auto d = stalled_streams(at, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{1});
  EXPECT_EQ(d[0].bound, 1600ms);
}

// A slow path with much in flight: what waits ahead of a stream takes longer to drain than the
// busy floor, and the bound follows. 64 MiB in flight over streams delivering 10 Mbit/s in all,
// 300 ms RTT: 53687 ms + 4 x 300 ms.
TEST(TcpStall, TheBusyBoundCoversTheDataInFlightAtThePathsRate) {
  const std::vector<StallSample> s = {stream(0, 10ms, 300ms, 0),
                                      stream(32 << 20, 50ms, 300ms, 5'000'000),
                                      stream(32 << 20, 20000ms, 250ms, 5'000'000)};
  const auto want =
      std::chrono::milliseconds((uint64_t{64} << 20) * 8 * 1000 / 10'000'000) + kBusyRtts * 300ms;
  EXPECT_EQ(busy_bound(s, kTimeout), want);
  EXPECT_TRUE(stalled_streams(s, kTimeout).empty());
  auto late = s;
  late[2].since_ack = late[2].waiting = want;
  const auto d = stalled_streams(late, kTimeout);
  ASSERT_EQ(indices(d), std::vector<size_t>{2});
  EXPECT_EQ(d[0].reason, StallReason::kStreamStuck);
  EXPECT_EQ(d[0].bound, want);
}

// A fast path: the floor holds; without any rate sample too.
TEST(TcpStall, TheBusyBoundIsAtLeastTenTimeouts) {
  EXPECT_EQ(busy_bound(std::vector<StallSample>{stream(1 << 20, 10ms), stream(1 << 20, 3000ms)},
                       kTimeout),
            kBusyTimeouts * kTimeout);
  EXPECT_EQ(busy_bound(std::vector<StallSample>{stream(1 << 20, 10ms, 20ms, 0)}, 300ms),
            kBusyTimeouts * 300ms);
}

// A short timeout on a long path: the busy bound is never shorter than the quiet bound (8 srtt),
// so a stream is not called stuck before it would be called quiet.
TEST(TcpStall, TheBusyBoundIsNeverBelowTheQuietBound) {
  const std::vector<StallSample> s = {stream(0, 10ms, 400ms), stream(1 << 20, 3100ms, 400ms)};
  EXPECT_TRUE(stalled_streams(s, 100ms).empty());  // quiet bound 3200 ms
  auto at = s;
  at[1].since_ack = at[1].waiting = 3200ms;
  const auto d = stalled_streams(at, 100ms);
  ASSERT_EQ(indices(d), std::vector<size_t>{1});
  EXPECT_EQ(d[0].reason, StallReason::kStreamStuck);
  EXPECT_EQ(d[0].bound, 3200ms);
}

// The path a relay's tunnels ride on (TcpDevice::tick): down only when a stream has waited past its
// bound and nothing to the rank was acknowledged within the timeout; an idle path, or one where
// any stream is acknowledged, is not.
TEST(TcpStall, APathIsSilentOnlyWithDataWaitingAndNoAcknowledgement) {
  using geoccl::transport::tcp::path_silent;
  EXPECT_FALSE(path_silent(std::vector<StallSample>{stream(0, 60s), stream(0, 60s)}, kTimeout));  // idle
  EXPECT_TRUE(path_silent(std::vector<StallSample>{stream(0, 5s), stream(100, 1500ms)}, kTimeout));
  EXPECT_FALSE(path_silent(std::vector<StallSample>{stream(0, 200ms), stream(100, 1500ms)}, kTimeout));
  EXPECT_FALSE(path_silent(std::vector<StallSample>{stream(0, 5s), stream(100, 900ms)}, kTimeout));
  EXPECT_FALSE(path_silent(std::vector<StallSample>{stream(0, 5s), stream(100, 1500ms)}, 0ms));  // off
  EXPECT_FALSE(path_silent(std::vector<StallSample>{StallSample{}, StallSample{}}, kTimeout));   // closed
}

// The direct path's state across ticks (TcpDevice::tick): down from the outage until a stream is
// acknowledged again; streams replaced meanwhile (closed) keep it down; an open path with nothing
// unacknowledged, or one stream acknowledged while another waits (busy), is up.
TEST(TcpStall, APathStaysDownUntilAStreamIsAcknowledgedAgain) {
  using geoccl::transport::tcp::path_down_after;
  const std::vector<StallSample> outage = {stream(100, 1500ms), stream(0, 5s)};
  const std::vector<StallSample> closed = {StallSample{}, StallSample{}};
  const std::vector<StallSample> back = {stream(100, 50ms), StallSample{}};
  const std::vector<StallSample> idle = {stream(0, 30s), stream(0, 30s)};
  const std::vector<StallSample> busy = {stream(100, 3s), stream(100, 100ms)};
  EXPECT_FALSE(path_down_after(false, closed, kTimeout));
  EXPECT_TRUE(path_down_after(false, outage, kTimeout));
  EXPECT_TRUE(path_down_after(true, outage, kTimeout));
  EXPECT_TRUE(path_down_after(true, closed, kTimeout));  // replaced, re-dialling
  EXPECT_FALSE(path_down_after(true, back, kTimeout));
  EXPECT_FALSE(path_down_after(true, idle, kTimeout));
  EXPECT_FALSE(path_down_after(false, busy, kTimeout));
  EXPECT_FALSE(path_down_after(true, busy, kTimeout));
}
