// The stream-width controller with invented measurements: a path model gives the rate each
// width reaches, spans of 50 ms are fed in, and the width it settles on is checked.
#include "transport/tcp/stream_width.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace geoccl::transport::tcp {
namespace {

using std::chrono::milliseconds;
using Us = StreamWidth::Duration;

constexpr Us kRtt = milliseconds(40);
constexpr Us kSpan = milliseconds(50);

// Feeds `seconds` of busy spans; the path delivers rate_mbps(width) (bytes per span), and
// streams open at once up to `can_open`.
void run(StreamWidth& w, double seconds, const std::function<double(int)>& rate_mbps, int can_open = 16) {
  for (double t = 0; t < seconds; t += 0.05) {
    const int width = w.width();
    const auto bytes = static_cast<uint64_t>(rate_mbps(width) * 1e6 / 8 * 0.05);
    w.sample(kSpan, bytes, true, std::min(width, can_open), can_open, kRtt);
  }
}

// A path of `link` Mbit/s whose provider caps each flow at `cap`.
std::function<double(int)> capped(double link, double cap) {
  return [=](int width) { return std::min(link, cap * width); };
}

TEST(StreamWidth, ClimbsUntilTheFlowCappedPathIsFull) {
  StreamWidth w;  // start 4, max 16
  EXPECT_EQ(w.width(), 4);
  run(w, 30, capped(1000, 100));  // ten 100 Mbit/s flows fill it: 4 and 8 are too few
  EXPECT_EQ(w.settled(), 16);
  EXPECT_GE(w.changes(), 2u);
  StreamWidth v;
  run(v, 30, capped(700, 100));  // 8 flows fill 700 Mbit/s; 16 are no faster
  EXPECT_EQ(v.settled(), 8);
}

TEST(StreamWidth, StaysWhereMoreStreamsDoNotPayAndTriesLessAndLessOften) {
  StreamWidth w;
  run(w, 600, capped(300, 1000));  // one stream could fill it: the start is kept
  EXPECT_EQ(w.settled(), 4);
  EXPECT_EQ(w.changes(), 0u);
  // The hold doubles after each trial that did not pay, up to 256 windows (41 s here): 16
  // trials in ten minutes, two windows each, where a fixed pace of one per window would be 1800.
  EXPECT_GE(w.trials(), 3u);
  EXPECT_LE(w.trials(), 18u);
}

TEST(StreamWidth, NoiseBelowTheGainNeverMovesIt) {
  StreamWidth w;
  int i = 0;
  // +-8 % around a constant rate, in a fixed pattern.
  run(w, 600, [&](int) { return 500.0 * (1.0 + 0.08 * ((i++ * 7919) % 17 - 8) / 8.0); });
  EXPECT_EQ(w.settled(), 4);
  EXPECT_EQ(w.changes(), 0u);
}

TEST(StreamWidth, GivesBackStreamsThatNoLongerPayButNeverGoesBelowTheStart) {
  StreamWidth w;
  run(w, 30, capped(1000, 100));
  ASSERT_EQ(w.settled(), 16);
  // The cap is lifted and the path shrinks: 4 streams do as well as 16.
  run(w, 300, capped(300, 1000));
  EXPECT_EQ(w.settled(), 4);
  run(w, 300, capped(300, 1000));
  EXPECT_EQ(w.settled(), 4);
}

TEST(StreamWidth, IdleSpansMeasureNothing) {
  StreamWidth w;
  for (int i = 0; i < 10000; ++i) w.sample(kSpan, 0, false, 4, 16, kRtt);
  EXPECT_EQ(w.trials(), 0u);
  EXPECT_EQ(w.last_rate(), 0.0);
}

TEST(StreamWidth, AnEndThatCannotOpenStreamsWidensOnlyAsFarAsItsPeerOpened) {
  StreamWidth w;
  run(w, 60, capped(1000, 100), /*can_open=*/4);
  EXPECT_EQ(w.settled(), 4);
  run(w, 60, capped(1000, 100), /*can_open=*/8);  // the peer opened four more
  EXPECT_EQ(w.settled(), 8);
}

TEST(StreamWidth, ATrialWhoseStreamsDoNotOpenIsGivenUp) {
  StreamWidth w;
  // Streams never open beyond 4 although 16 may be asked for (the dial fails).
  for (int i = 0; i < 2000; ++i) {
    const auto bytes = static_cast<uint64_t>(capped(1000, 100)(std::min(w.width(), 4)) * 1e6 / 8 * 0.05);
    w.sample(kSpan, bytes, true, 4, 16, kRtt);
  }
  EXPECT_EQ(w.settled(), 4);
  EXPECT_GE(w.trials(), 2u);
}

TEST(StreamWidth, TheWarmUpWindowOfNewStreamsIsNotCounted) {
  // New streams deliver nothing extra in their first window (slow start), then their share.
  StreamWidth w;
  int last_width = 4;
  double elapsed = 0;
  for (double t = 0; t < 60; t += 0.05) {
    const int width = w.width();
    if (width != last_width) last_width = width, elapsed = 0;
    elapsed += 0.05;
    const double rate = elapsed <= 0.16 ? capped(1000, 100)(std::min(width, 4)) : capped(1000, 100)(width);
    w.sample(kSpan, static_cast<uint64_t>(rate * 1e6 / 8 * 0.05), true, width, 16, kRtt);
  }
  EXPECT_EQ(w.settled(), 16);
}

TEST(StreamWidth, AStepKeptAtTheTopIsNotTriedBackAtOnce) {
  StreamWidth w;
  int spans = 0;
  while (w.settled() < 16 && spans < 2000) run(w, 0.05, capped(1000, 100)), ++spans;
  ASSERT_EQ(w.settled(), 16);
  const uint64_t trials = w.trials();
  run(w, 48 * 0.2, capped(1000, 100));  // 48 windows of 200 ms: the step from 8 just measured 8
  EXPECT_EQ(w.trials(), trials);
  run(w, 10, capped(1000, 100));  // then a trial back to 8, undone
  EXPECT_EQ(w.trials(), trials + 1);
  EXPECT_EQ(w.settled(), 16);
}

TEST(StreamWidth, AnEndWhosePeerOpensMoreStreamsAfterAStepGoesOnAtOnce) {
  StreamWidth w;
  int spans = 0;
  while (w.settled() < 8 && spans < 2000) run(w, 0.05, capped(1000, 100), /*can_open=*/8), ++spans;
  ASSERT_EQ(w.settled(), 8);
  run(w, 2, capped(1000, 100), 8);  // the top for now: no trial back to 4 yet
  EXPECT_EQ(w.settled(), 8);
  run(w, 5, capped(1000, 100), 16);  // the peer opened 16: the hold ends
  EXPECT_EQ(w.settled(), 16);
}

// A collective that posts its whole buffer at once: each call of `call_s` seconds binds its
// frames to the streams of the width in force when it starts, so a width changed within a call
// (a trial, or a trial undone) is not seen on the path until the next call. With `tell` the
// device reports those frames as behind. Returns the settled width, and the least width settled
// on over the second half of the run.
struct Settled {
  int last, least_late;
  uint64_t changes;
};
Settled settle_with_whole_buffers(double call_s, double seconds, bool tell) {
  StreamWidth w;
  int bound = w.width(), least_late = 16;
  double next_call = 0;
  for (int i = 0; i * 0.05 < seconds; ++i) {
    const double t = i * 0.05;
    if (t >= next_call) bound = w.width(), next_call += call_s;  // a call starts
    const auto bytes = static_cast<uint64_t>(capped(1000, 100)(bound) * 1e6 / 8 * 0.05);
    w.sample(kSpan, bytes, true, 16, 16, kRtt, tell && bound != w.width());
    if (t >= seconds / 2) least_late = std::min(least_late, w.settled());
  }
  return {w.settled(), least_late, w.changes()};
}

TEST(StreamWidth, FramesSpreadAtAnEarlierWidthDoNotCount) {
  for (const double call_s : {1.5, 2.0, 3.0, 12.0, 40.0}) {
    SCOPED_TRACE(call_s);
    const Settled s = settle_with_whole_buffers(call_s, 1200, true);
    EXPECT_EQ(s.last, 16);
    EXPECT_EQ(s.least_late, 16);  // trials back to 8 are undone, none kept
    EXPECT_EQ(s.changes, 2u);     // 4 -> 8 -> 16
  }
  // Measuring them instead, every trial within a call reads the old width's rate.
  EXPECT_EQ(settle_with_whole_buffers(2.0, 120, false).last, 4);
}

TEST(StreamWidth, ATrialWhoseEarlierFramesNeverDrainIsSetAsideWithoutAVerdict) {
  StreamWidth w;
  for (int i = 0; i < 4000; ++i)
    w.sample(kSpan, static_cast<uint64_t>(400e6 / 8 * 0.05), true, 16, 16, kRtt, w.width() != w.settled());
  EXPECT_EQ(w.settled(), 4);
  EXPECT_EQ(w.changes(), 0u);
  EXPECT_FALSE(w.last_trial_measured());
  // 200 s of 160 ms windows: a trial every 64 + 5 windows. Holds doubling as after a trial that
  // did not pay would allow about 5.
  EXPECT_GE(w.trials(), 15u);
}

TEST(StreamWidth, ATrialWhoseEarlierFramesKeepComingBackIsSetAsideToo) {
  // Behind for 9 spans in 11 (kept copies re-sent after a stream was replaced): no window ever
  // completes in the gaps, and the waits add up to the limit.
  StreamWidth w;
  for (int i = 0; i < 20000; ++i)
    w.sample(kSpan, static_cast<uint64_t>(400e6 / 8 * 0.05), true, 16, 16, kRtt,
             w.width() != w.settled() && i % 11 < 9);
  EXPECT_EQ(w.settled(), 4);
  EXPECT_GE(w.trials(), 20u);
}

}  // namespace
}  // namespace geoccl::transport::tcp
