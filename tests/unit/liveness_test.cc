// The failure detector (protocol/liveness.h) driven with invented timestamps: no sockets, no
// sleeps. Each test is one case the detector must tell apart.
#include <gtest/gtest.h>

#include "protocol/liveness.h"

using namespace geoccl;
using namespace geoccl::protocol;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

LivenessOptions opts() {
  LivenessOptions o;
  o.interval = 1000ms;
  o.window = 10000ms;
  o.link_bound = 30000ms;
  o.warn_every = 5000ms;
  return o;
}

// Runs the detector of `rank` from t0 in 250 ms ticks until `until`, with `each` called before
// every tick to deliver what arrives; returns the first failure (or none) and when it came.
struct Outcome {
  std::optional<Liveness::Action> fail;
  Clock::duration at{};
  int warnings = 0;
  int recoveries = 0;
};

template <class F>
Outcome run(Liveness& l, Clock::time_point t0, Clock::duration until, F&& each) {
  Outcome out;
  for (auto t = 250ms; t <= until; t += 250ms) {
    const auto now = t0 + t;
    each(now, t);
    for (auto& a : l.tick(now)) {
      if (a.kind == Liveness::Action::Kind::kWarn) ++out.warnings;
      if (a.kind == Liveness::Action::Kind::kRecovered) ++out.recoveries;
      if (a.kind == Liveness::Action::Kind::kFail && !out.fail) {
        out.fail = a;
        out.at = t;
      }
    }
    if (out.fail) break;
  }
  return out;
}

}  // namespace

TEST(Liveness, HeartbeatPayloadRoundTripsAndRejectsMalformedInput) {
  std::vector<SilentPeer> in = {{3, 2500}, {0, UINT32_MAX}};
  const auto bytes = encode_heartbeat(in);
  std::vector<SilentPeer> out;
  ASSERT_TRUE(decode_heartbeat(bytes, 4, &out));
  EXPECT_EQ(out, in);
  EXPECT_FALSE(decode_heartbeat(bytes, 3, &out));  // rank 3 is outside a group of 3
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_FALSE(decode_heartbeat(trailing, 4, &out));
  EXPECT_FALSE(decode_heartbeat(std::span<const uint8_t>(bytes).first(bytes.size() - 1), 4, &out));
  std::vector<SilentPeer> twice = {{1, 5}, {1, 6}};
  EXPECT_FALSE(decode_heartbeat(encode_heartbeat(twice), 4, &out));
  ASSERT_TRUE(decode_heartbeat(encode_heartbeat({}), 1, &out));
  EXPECT_TRUE(out.empty());
}

TEST(Liveness, PeersThatKeepTalkingAreNeverSuspected) {
  const auto t0 = Clock::now();
  Liveness l(0, 3, opts(), t0);
  auto o = run(l, t0, 60s, [&](Clock::time_point now, Clock::duration) {
    l.report(1, {}, now);
    l.report(2, {}, now);
  });
  EXPECT_FALSE(o.fail);
  EXPECT_EQ(o.warnings, 0);
  EXPECT_TRUE(l.silent_peers(t0 + 60s).empty());
}

TEST(Liveness, SilentPeerWhoseHostAnswersIsUnresponsiveAfterTheWindow) {
  const auto t0 = Clock::now();
  Liveness l(0, 3, opts(), t0);
  auto o = run(l, t0, 30s, [&](Clock::time_point now, Clock::duration t) {
    l.report(2, {}, now);
    if (t < 5s) l.report(1, {}, now);
    l.host_answers(1, true, now);  // its kernel acknowledges our heartbeats: TCP is up
  });
  ASSERT_TRUE(o.fail);
  EXPECT_EQ(o.fail->code, ErrorCode::kPeerUnresponsive);
  EXPECT_EQ(o.fail->peer, 1);
  // Last heard at 4.75 s; the window is 10 s.
  EXPECT_GE(o.at, 14500ms);
  EXPECT_LE(o.at, 15000ms);
  EXPECT_GE(o.warnings, 1);  // it said so while waiting for the window
  EXPECT_NE(o.fail->message.find("unresponsive"), std::string::npos);
}

TEST(Liveness, LinkDownWhileAThirdRankHearsThePeerIsUnreachableUntilTheBound) {
  const auto t0 = Clock::now();
  Liveness l(0, 3, opts(), t0);
  l.set_domains({0, 1, 2});
  auto o = run(l, t0, 60s, [&](Clock::time_point now, Clock::duration) {
    l.report(2, {}, now);  // rank 2 hears everybody, rank 1 included
    l.host_answers(1, false, now);
  });
  ASSERT_TRUE(o.fail);
  EXPECT_EQ(o.fail->code, ErrorCode::kPeerUnreachable);
  EXPECT_GE(o.at, 30s);
  EXPECT_LE(o.at, 30250ms);
  EXPECT_NE(o.fail->message.find("rank 2 still hears it"), std::string::npos) << o.fail->message;
  // A warning every 5 s from 3 s of silence on: 3, 8, 13, 18, 23, 28.
  EXPECT_EQ(o.warnings, 6);
}

TEST(Liveness, AnOutageShorterThanTheBoundIsSurvivedAndReported) {
  const auto t0 = Clock::now();
  Liveness l(0, 3, opts(), t0);
  l.set_domains({0, 1, 2});
  auto o = run(l, t0, 40s, [&](Clock::time_point now, Clock::duration t) {
    l.report(2, {}, now);
    const bool down = t >= 5s && t < 25s;
    l.host_answers(1, !down, now);
    if (!down) l.report(1, {}, now);
  });
  EXPECT_FALSE(o.fail);
  EXPECT_GE(o.warnings, 1);
  EXPECT_EQ(o.recoveries, 1);
  EXPECT_EQ(l.state(1), Liveness::State::kAlive);
}

TEST(Liveness, NobodyHearsAPeerWhoseDomainIsHeardItIsLost) {
  const auto t0 = Clock::now();
  Liveness l(0, 4, opts(), t0);
  l.set_domains({0, 1, 1, 2});  // ranks 1 and 2 share a domain
  auto o = run(l, t0, 30s, [&](Clock::time_point now, Clock::duration) {
    // Rank 1's host is gone: nobody hears it; its domain mate 2 and rank 3 are fine.
    const auto silent = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count());
    std::vector<SilentPeer> view;
    if (now - t0 > 2s) view.push_back({1, silent});
    l.report(2, view, now);
    l.report(3, view, now);
    l.host_answers(1, false, now);
  });
  ASSERT_TRUE(o.fail);
  EXPECT_EQ(o.fail->code, ErrorCode::kPeerLost);
  EXPECT_EQ(o.fail->peer, 1);
  EXPECT_GE(o.at, 10s);
  EXPECT_LE(o.at, 10250ms);
}

TEST(Liveness, AWholeDomainCutOffCountsAsAPartitionNotADeath) {
  const auto t0 = Clock::now();
  Liveness l(0, 4, opts(), t0);
  l.set_domains({0, 0, 1, 1});  // two regions of two; the link between them is down
  auto o = run(l, t0, 20s, [&](Clock::time_point now, Clock::duration) {
    const auto ms = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count());
    std::vector<SilentPeer> view;
    if (now - t0 > 2s) view = {{2, ms}, {3, ms}};
    l.report(1, view, now);  // our domain mate cannot hear the other region either
    l.host_answers(2, false, now);
    l.host_answers(3, false, now);
  });
  EXPECT_FALSE(o.fail);  // 20 s < the 30 s bound: an outage that ends is survived
  EXPECT_EQ(l.state(2), Liveness::State::kUnreachable);
  EXPECT_EQ(l.state(3), Liveness::State::kUnreachable);
}

TEST(Liveness, TwoRanksWithoutWitnessesWaitForTheBound) {
  const auto t0 = Clock::now();
  Liveness l(1, 2, opts(), t0);
  l.set_domains({0, 1});  // two regions, one rank each
  auto o = run(l, t0, 40s, [&](Clock::time_point now, Clock::duration) { l.host_answers(0, false, now); });
  ASSERT_TRUE(o.fail);
  EXPECT_EQ(o.fail->code, ErrorCode::kPeerUnreachable);
  EXPECT_GE(o.at, 30s);
  EXPECT_NE(o.fail->message.find("no rank this one hears"), std::string::npos);
  // On one site (one domain) a peer whose host stops answering is lost after the window.
  Liveness lan(1, 2, opts(), t0);
  auto o2 = run(lan, t0, 40s, [&](Clock::time_point now, Clock::duration) { lan.host_answers(0, false, now); });
  ASSERT_TRUE(o2.fail);
  EXPECT_EQ(o2.fail->code, ErrorCode::kPeerLost);
  EXPECT_LE(o2.at, 10250ms);
}

TEST(Liveness, ALateTickMeansThisProcessStoppedAndDecidesNothingForAWindow) {
  const auto t0 = Clock::now();
  Liveness l(0, 2, opts(), t0);
  l.host_answers(1, true, t0);
  EXPECT_TRUE(l.tick(t0 + 250ms).empty());
  // We were stopped for 60 s: everyone looks silent, but the silence is ours.
  auto acts = l.tick(t0 + 60s);
  for (auto& a : acts) EXPECT_NE(a.kind, Liveness::Action::Kind::kFail);
  l.report(1, {}, t0 + 60s + 500ms);  // its heartbeats come in again
  for (auto t = 61s; t < 70s; t += 1s)
    for (auto& a : l.tick(t0 + t)) EXPECT_NE(a.kind, Liveness::Action::Kind::kFail);
}

TEST(Liveness, SilentPeersAreListedAfterTwoIntervals) {
  const auto t0 = Clock::now();
  Liveness l(0, 3, opts(), t0);
  l.heard(1, t0 + 1s);
  EXPECT_TRUE(l.silent_peers(t0 + 2s).empty());
  const auto s = l.silent_peers(t0 + 2500ms);
  ASSERT_EQ(s.size(), 1u);  // rank 2, last heard at t0
  EXPECT_EQ(s[0].rank, 2u);
  EXPECT_EQ(s[0].silent_ms, 2500u);
}

TEST(Liveness, AHostThatAnswersAgainAfterAnOutageIsNotCalledUnresponsive) {
  const auto t0 = Clock::now();
  auto o90 = opts();
  o90.link_bound = 90s;  // the bound raised above the outage
  Liveness l(0, 3, o90, t0);
  l.set_domains({0, 1, 2});
  // 60 s outage of the link to rank 1 (rank 2 hears it); the link comes back at 61 s and the
  // host answers at once, the process's heartbeats 3 s later (TCP still catching up).
  auto o = run(l, t0, 80s, [&](Clock::time_point now, Clock::duration t) {
    l.report(2, {}, now);
    l.host_answers(1, t >= 61s, now);
    if (t < 1s || t >= 64s) l.report(1, {}, now);
  });
  EXPECT_FALSE(o.fail) << o.fail->message;
  // The same host answering for the whole silence: a stopped process, after the window.
  Liveness s(0, 3, opts(), t0);
  auto o2 = run(s, t0, 30s, [&](Clock::time_point now, Clock::duration) {
    s.report(2, {}, now);
    s.host_answers(1, true, now);
  });
  ASSERT_TRUE(o2.fail);
  EXPECT_EQ(o2.fail->code, ErrorCode::kPeerUnresponsive);
  EXPECT_LE(o2.at, 10250ms);
}

// Whom a rank watches: everyone up to 32 ranks; beyond, the ranks at power-of-two distances
// round the ring, the same relation seen from both ends, and few enough that heartbeats per rank
// grow with the log of the job.
TEST(Liveness, WatchSetsAreEveryPeerInSmallGroupsAndLogarithmicSymmetricInLargeOnes) {
  for (int n = 1; n <= 300; ++n) {
    int bound = 0;
    while ((1 << bound) < n) ++bound;
    for (int r = 0; r < n; ++r) {
      const auto w = watched_peers(r, n);
      if (n <= kWatchEveryPeerUpTo) {
        ASSERT_EQ(w.size(), static_cast<size_t>(n - 1)) << n;
      } else {
        ASSERT_LE(w.size(), static_cast<size_t>(2 * bound)) << n << " " << r;
        // The ring neighbours are always watched: every rank is watched by someone.
        ASSERT_TRUE(watches(r, (r + 1) % n, n) && watches(r, (r + n - 1) % n, n)) << n << " " << r;
      }
      ASSERT_FALSE(watches(r, r, n));
      for (int q = 0; q < n; ++q) ASSERT_EQ(watches(r, q, n), watches(q, r, n)) << n << " " << r << " " << q;
    }
  }
  EXPECT_EQ(watched_peers(0, 128), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 96, 112, 120, 124, 126, 127}));
}

// In a 64-rank group rank 0 judges only the peers it watches: an unwatched peer's silence is
// neither listed in its heartbeats nor a failure of its own (a rank that watches it reports it).
TEST(Liveness, InALargeGroupOnlyWatchedPeersAreListedAndJudged) {
  const auto t0 = Clock::now();
  Liveness l(0, 64, opts(), t0);
  ASSERT_FALSE(watches(0, 3, 64));
  ASSERT_TRUE(watches(0, 1, 64));
  auto o = run(l, t0, 20s, [&](Clock::time_point now, Clock::duration) {
    for (int q : l.watched())
      if (q != 1) l.report(q, {}, now);
    l.host_answers(1, true, now);  // rank 1 stopped; rank 3 is never heard either
  });
  ASSERT_TRUE(o.fail);
  EXPECT_EQ(o.fail->peer, 1);
  EXPECT_EQ(o.fail->code, ErrorCode::kPeerUnresponsive);
  const auto listed = l.silent_peers(t0 + o.at);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].rank, 1u);
  EXPECT_EQ(l.state(3), Liveness::State::kAlive);
}

// A witness counts only for the peers it watches: rank 4 (distance 3 from rank 1) listing nobody
// as silent does not mean it hears rank 1; rank 2 (distance 1) does.
TEST(Liveness, AWitnessThatDoesNotWatchThePeerIsNotTakenAsHearingIt) {
  ASSERT_FALSE(watches(4, 1, 64));
  ASSERT_TRUE(watches(2, 1, 64));
  for (int witness : {4, 2}) {
    const auto t0 = Clock::now();
    Liveness l(0, 64, opts(), t0);
    auto o = run(l, t0, 40s, [&](Clock::time_point now, Clock::duration) {
      // Every watched rank but 1 is heard; those that watch rank 1 (2 and 63) list it as silent
      // unless it is the witness; the others, rank 4 among them, list nobody.
      const auto ms = static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count());
      for (int q : l.watched()) {
        if (q == 1) continue;
        const bool lists = watches(q, 1, 64) && q != witness;
        l.report(q, lists ? std::vector<SilentPeer>{{1, ms}} : std::vector<SilentPeer>{}, now);
      }
      l.host_answers(1, false, now);
    });
    ASSERT_TRUE(o.fail) << witness;
    // Unwatched silence and no witness: nobody we hear hears it while its domain (ours) is heard.
    EXPECT_EQ(o.fail->code, witness == 2 ? ErrorCode::kPeerUnreachable : ErrorCode::kPeerLost) << witness;
  }
}
