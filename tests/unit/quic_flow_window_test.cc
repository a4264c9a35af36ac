// size_windows (transport/quic/flow_window.h): the flow-control windows follow the path's
// bandwidth-delay product (twice it to start, four times it as ngtcp2's auto-tuning ceiling),
// stay within their bounds for any input, and an unmeasured path keeps the configured window
// (GEOCCL_EXPERIMENT quic_window).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "transport/quic/flow_window.h"

using geoccl::transport::quic::FlowWindows;
using geoccl::transport::quic::size_windows;
using geoccl::transport::quic::WindowLimits;

namespace {

constexpr uint64_t kMs = 1000000;  // ns
constexpr uint64_t kMiB = 1u << 20;

void expect_within(const FlowWindows& w, const WindowLimits& l) {
  EXPECT_GE(w.connection, l.floor);
  EXPECT_LE(w.connection, w.max_connection);
  EXPECT_LE(w.max_connection, l.ceiling);
  EXPECT_LE(w.stream, w.connection);
  EXPECT_GE(w.stream, std::min(l.stream_floor, w.connection));
  EXPECT_EQ(w.max_stream, w.max_connection);
}

}  // namespace

TEST(QuicFlowWindow, FollowsTheBandwidthDelayProduct) {
  // 1 Gbit/s x 40 ms = 5 MB in flight.
  const FlowWindows w = size_windows(40 * kMs, 1000000000);
  EXPECT_TRUE(w.measured);
  EXPECT_EQ(w.bdp, 5000000u);
  EXPECT_EQ(w.connection, 10000000u);
  EXPECT_EQ(w.max_connection, 20000000u);
  EXPECT_EQ(w.stream, 5000000u);
  EXPECT_EQ(w.max_stream, 20000000u);
  // 10 Gbit/s x 150 ms = 187.5 MB: the connection window is capped at the ceiling, the stream
  // window is a BDP.
  const FlowWindows far = size_windows(150 * kMs, 10000000000ull);
  EXPECT_EQ(far.bdp, 187500000u);
  EXPECT_EQ(far.connection, 375000000u);
  EXPECT_EQ(far.max_connection, 512 * kMiB);
  EXPECT_EQ(far.stream, 187500000u);
  // Twice the rate or twice the RTT: twice the windows.
  const FlowWindows twice = size_windows(80 * kMs, 1000000000);
  EXPECT_EQ(twice.connection, 2 * w.connection);
  EXPECT_EQ(size_windows(40 * kMs, 2000000000).connection, twice.connection);
}

TEST(QuicFlowWindow, ShortOrSlowPathsKeepTheFloors) {
  // Loopback: 50 us x 10 Gbit/s = 62.5 KB; the floors hold (a default chunk never waits).
  const WindowLimits l;
  EXPECT_GE(l.floor, (1u << 20) + 64);
  const FlowWindows w = size_windows(50000, 10000000000ull);
  EXPECT_TRUE(w.measured);
  EXPECT_EQ(w.connection, l.floor);
  EXPECT_EQ(w.stream, l.floor);
  EXPECT_EQ(w.max_connection, l.floor);
  // 20 ms x 1 Gbit/s: 2.5 MB BDP, 5 MB window; the stream window is its floor (4 MiB).
  const FlowWindows seed = size_windows(20 * kMs, 1000000000);
  EXPECT_EQ(seed.connection, 5000000u);
  EXPECT_EQ(seed.stream, 4 * kMiB);
}

TEST(QuicFlowWindow, AnUnmeasuredPathKeepsTheConfiguredWindow) {
  WindowLimits l;
  l.unmeasured = 32 * kMiB;
  for (const auto& [rtt, rate] : {std::pair<uint64_t, uint64_t>{0, 0}, {40 * kMs, 0}, {0, 1000000000}}) {
    const FlowWindows w = size_windows(rtt, rate, l);
    EXPECT_FALSE(w.measured);
    EXPECT_EQ(w.bdp, 0u);
    EXPECT_EQ(w.connection, 32 * kMiB);
    EXPECT_EQ(w.max_connection, 64 * kMiB);
    EXPECT_EQ(w.stream, 4 * kMiB);
  }
  l.unmeasured = 1u << 30;  // above the ceiling
  EXPECT_EQ(size_windows(0, 0, l).connection, l.ceiling);
  EXPECT_EQ(size_windows(0, 0, l).max_connection, l.ceiling);
}

TEST(QuicFlowWindow, AnyInputStaysWithinTheBounds) {
  std::mt19937_64 rng(3);
  WindowLimits l;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t rtt = i % 7 == 0 ? UINT64_MAX : rng() >> (rng() % 64);
    const uint64_t rate = i % 11 == 0 ? UINT64_MAX : rng() >> (rng() % 64);
    const FlowWindows w = size_windows(rtt, rate, l);
    expect_within(w, l);
    if (testing::Test::HasFailure()) FAIL() << "rtt " << rtt << " rate " << rate;
  }
  // Bounds given the wrong way round read as floor = ceiling.
  l.floor = 8 * kMiB;
  l.ceiling = 2 * kMiB;
  const FlowWindows w = size_windows(40 * kMs, 1000000000, l);
  EXPECT_EQ(w.connection, 2 * kMiB);
  EXPECT_EQ(w.max_connection, 2 * kMiB);
  EXPECT_EQ(w.stream, 2 * kMiB);
}
