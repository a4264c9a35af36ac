// The bulk class's delay-based rate controller, driven with time and RTT samples as inputs.
#include <gtest/gtest.h>

#include "transport/scavenger.h"

namespace {

using geoccl::transport::ScavengerOptions;
using geoccl::transport::ScavengerRate;
using Clock = ScavengerRate::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

ScavengerOptions options(uint64_t cap = 0) {
  ScavengerOptions o;
  o.cap_bps = cap;
  o.initial_bps = 50'000'000;
  o.target_delay = microseconds(5000);
  return o;
}

// A path of `link_bps` with base RTT `base`: the queue grows by what the sender sends above the
// link rate, drains at the link rate, and adds its delay to the RTT. Returns the queueing delay
// after `steps` intervals of `dt`, and leaves the controller's rate in *rate.
double simulate(ScavengerRate& s, uint64_t link_bps, milliseconds base, int steps, milliseconds dt,
                Clock::time_point* now, double queue_bits = 0) {
  for (int i = 0; i < steps; ++i) {
    const double secs = std::chrono::duration<double>(dt).count();
    queue_bits = std::max(0.0, queue_bits + (static_cast<double>(s.rate_bps()) - static_cast<double>(link_bps)) * secs);
    const auto q = microseconds(static_cast<int64_t>(queue_bits / static_cast<double>(link_bps) * 1e6));
    *now += dt;
    s.on_rtt(*now, std::chrono::duration_cast<microseconds>(base) + q);
  }
  return queue_bits / static_cast<double>(link_bps) * 1e3;  // ms
}

TEST(Scavenger, GrowsTowardsAFreeLinkAndHoldsTheQueueNearTheTarget) {
  ScavengerRate s(options());
  auto now = Clock::now();
  const uint64_t link = 1'000'000'000;
  simulate(s, link, milliseconds(40), 400, milliseconds(20), &now);
  // Settled: most of the link, and a queue of about the target, never a full buffer.
  double worst = 0;
  uint64_t low = UINT64_MAX;
  for (int i = 0; i < 200; ++i) {
    worst = std::max(worst, simulate(s, link, milliseconds(40), 1, milliseconds(20), &now));
    low = std::min(low, s.rate_bps());
  }
  EXPECT_GT(low, link / 2) << "the scavenger leaves most of a free link unused";
  EXPECT_LT(worst, 25.0) << "queueing delay far above the 5 ms target";
  EXPECT_EQ(s.base_rtt(), microseconds(40000));
}

TEST(Scavenger, BacksOffWhenTheQueueGrowsAndStaysAtTheFloorUnderPressure) {
  ScavengerRate s(options());
  auto now = Clock::now();
  s.on_rtt(now, microseconds(30000));
  // Another flow fills the queue: 60 ms above the base for a while.
  for (int i = 0; i < 50; ++i) {
    now += milliseconds(100);
    s.on_rtt(now, microseconds(90000));
  }
  EXPECT_EQ(s.rate_bps(), options().floor_bps);
  EXPECT_EQ(s.queueing_delay(), microseconds(60000));
  // The queue drains: the rate comes back.
  for (int i = 0; i < 30; ++i) {
    now += milliseconds(40);
    s.on_rtt(now, microseconds(30500));
  }
  EXPECT_GT(s.rate_bps(), 50'000'000u);
}

TEST(Scavenger, OneChangePerRoundTrip) {
  ScavengerRate s(options());
  auto now = Clock::now();
  s.on_rtt(now, microseconds(50000));
  now += milliseconds(60);
  const uint64_t after_first = s.on_rtt(now, microseconds(50000));
  EXPECT_GT(after_first, 50'000'000u);
  // Samples within the next RTT change nothing, whatever they say.
  now += milliseconds(10);
  EXPECT_EQ(s.on_rtt(now, microseconds(50000)), after_first);
  now += milliseconds(10);
  EXPECT_EQ(s.on_rtt(now, microseconds(200000)), after_first);
}

TEST(Scavenger, NeverAboveTheCap) {
  ScavengerRate s(options(80'000'000));
  auto now = Clock::now();
  simulate(s, 10'000'000'000ull, milliseconds(20), 300, milliseconds(20), &now);
  EXPECT_EQ(s.rate_bps(), 80'000'000u);
}

TEST(Scavenger, BaseRttFollowsARouteChangeWithinTwoWindows) {
  ScavengerRate s(options());
  auto now = Clock::now();
  s.on_rtt(now, microseconds(20000));
  // The path now has 80 ms for good: after two base windows that is the new base, and the
  // controller no longer reads 60 ms of queue into it.
  for (int i = 0; i < 700; ++i) {
    now += milliseconds(100);
    s.on_rtt(now, microseconds(80000));
  }
  EXPECT_EQ(s.base_rtt(), microseconds(80000));
  EXPECT_EQ(s.queueing_delay(), microseconds(0));
}

}  // namespace
