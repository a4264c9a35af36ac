// The membership decider driven by hand: candidates and timestamps in, decisions out. No store,
// no sockets, no sleeps.
#include "membership/quorum.h"

#include <gtest/gtest.h>

using namespace geoccl::membership;
using namespace std::chrono_literals;
using Clock = QuorumDecider::Clock;
using Action = QuorumDecider::Action;

namespace {

Candidate member(int prev_rank) {
  return {static_cast<uint64_t>(1000 + prev_rank), prev_rank, "m" + std::to_string(prev_rank)};
}
Candidate joiner(int k) { return {static_cast<uint64_t>(5000 + k), -1, "j" + std::to_string(k)}; }
// A survivor whose failure named `dead` with kPeerLost.
Candidate reporting(int prev_rank, std::vector<int32_t> dead) {
  Candidate c = member(prev_rank);
  c.dead = std::move(dead);
  return c;
}

QuorumParams params(int prev_size, int min_members = 1) {
  QuorumParams p;
  p.prev_size = prev_size;
  p.join_window = 2s;
  p.give_up = 10s;
  p.min_members = min_members;
  return p;
}

std::vector<int> prev_ranks(const Decision& d) {
  std::vector<int> out;
  for (const auto& m : d.members) out.push_back(m.prev_rank);
  return out;
}

}  // namespace

TEST(Quorum, ShrinkWaitsForTheJoinWindowThenKeepsTheSurvivorsInOrder) {
  const auto t0 = Clock::now();
  QuorumDecider q(5, params(4), t0);
  // Rank 0 of the old epoch is dead; 3 and 1 survive and arrive out of order.
  ASSERT_TRUE(q.observe(member(3)));
  ASSERT_TRUE(q.observe(member(1)));
  ASSERT_TRUE(q.observe(member(2)));
  auto a = q.poll(t0 + 100ms);
  ASSERT_EQ(a.kind, Action::kWait);
  EXPECT_EQ(a.until, t0 + 2s);  // the window's end
  a = q.poll(t0 + 1999ms);
  EXPECT_EQ(a.kind, Action::kWait);
  a = q.poll(t0 + 2s);
  ASSERT_EQ(a.kind, Action::kDecide) << a.why;
  EXPECT_EQ(a.decision.epoch, 5u);
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.decision.first_survivor(), 0);
  EXPECT_EQ(a.decision.rank_of(member(3).uid), 2);
  EXPECT_EQ(a.decision.rank_of(member(0).uid), -1);
}

TEST(Quorum, EveryOldMemberArrivedDecidesAtOnceWithTheJoinersSeen) {
  const auto t0 = Clock::now();
  QuorumDecider q(2, params(2), t0);
  ASSERT_TRUE(q.observe(joiner(1)));  // a restarted process waits at the boundary
  ASSERT_TRUE(q.observe(member(1)));
  EXPECT_EQ(q.poll(t0).kind, Action::kWait);
  ASSERT_TRUE(q.observe(member(0)));
  ASSERT_TRUE(q.observe(joiner(2)));
  const auto a = q.poll(t0 + 10ms);
  ASSERT_EQ(a.kind, Action::kDecide);
  // Survivors by old rank, then joiners in arrival order.
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, 1, -1, -1}));
  EXPECT_EQ(a.decision.members[2].uid, joiner(1).uid);
  EXPECT_EQ(a.decision.members[3].uid, joiner(2).uid);
  // A joiner that comes after the decision is not let in; it waits for the next epoch.
  EXPECT_FALSE(q.observe(joiner(3)));
  const auto again = q.poll(t0 + 5s);
  EXPECT_EQ(again.kind, Action::kDecide);
  EXPECT_EQ(again.decision, a.decision);
  EXPECT_EQ(again.decision.rank_of(joiner(3).uid), -1);
}

TEST(Quorum, DuplicatesAndRanksOutsideThePreviousEpochAreIgnored) {
  const auto t0 = Clock::now();
  QuorumDecider q(1, params(2), t0);
  EXPECT_TRUE(q.observe(member(0)));
  EXPECT_FALSE(q.observe(member(0)));                      // the same uid twice
  EXPECT_FALSE(q.observe({77, 0, "impostor of rank 0"}));  // a second claim on old rank 0
  EXPECT_FALSE(q.observe(member(2)));                      // epoch 0 had ranks 0 and 1
  EXPECT_EQ(q.survivors(), 1);
  EXPECT_EQ(q.candidates(), 1u);
  const auto a = q.poll(t0 + 2s);
  ASSERT_EQ(a.kind, Action::kDecide);
  EXPECT_EQ(a.decision.members.size(), 1u);
}

TEST(Quorum, BelowTheMinimumWaitsUntilGiveUpThenFails) {
  const auto t0 = Clock::now();
  QuorumDecider q(3, params(3, 2), t0);
  ASSERT_TRUE(q.observe(member(2)));
  auto a = q.poll(t0 + 2s);
  ASSERT_EQ(a.kind, Action::kWait);
  EXPECT_EQ(a.until, t0 + 10s);
  a = q.poll(t0 + 10s);
  ASSERT_EQ(a.kind, Action::kFail);
  EXPECT_NE(a.why.find("fewer than the minimum of 2"), std::string::npos) << a.why;
  // A second candidate before give-up would have made it.
  QuorumDecider q2(3, params(3, 2), t0);
  ASSERT_TRUE(q2.observe(member(2)));
  ASSERT_TRUE(q2.observe(joiner(0)));
  EXPECT_EQ(q2.poll(t0 + 2s).kind, Action::kDecide);
}

TEST(Quorum, RecordsRoundTripAndMalformedOnesAreRejectedWithAReason) {
  const Candidate c{0x1122334455667788ull, 7, "host:123"};
  EXPECT_EQ(decode_candidate(encode_candidate(c)), c);
  Decision d;
  d.epoch = 9;
  d.members = {member(0), joiner(1)};
  EXPECT_EQ(decode_decision(encode_decision(d)), d);

  std::string why;
  auto bytes = encode_decision(d);
  bytes.push_back(0);
  EXPECT_FALSE(decode_decision(bytes, &why));
  EXPECT_NE(why.find("trailing"), std::string::npos) << why;
  bytes.resize(bytes.size() - 3);
  EXPECT_FALSE(decode_decision(bytes, &why));
  Decision twice = d;
  twice.members.push_back(member(0));
  EXPECT_FALSE(decode_decision(encode_decision(twice), &why));
  EXPECT_NE(why.find("uid"), std::string::npos) << why;
  auto wrong_version = encode_candidate(c);
  wrong_version[0] = 9;
  EXPECT_FALSE(decode_candidate(wrong_version, &why));
  EXPECT_NE(why.find("version 9"), std::string::npos) << why;
  EXPECT_FALSE(decode_candidate(encode_candidate({1, -2, ""}), &why));
  // A member count far beyond the bytes present is refused before anything is allocated.
  std::vector<uint8_t> huge = {kQuorumVersion, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
  EXPECT_FALSE(decode_decision(huge, &why));
  EXPECT_NE(why.find("truncated member list"), std::string::npos) << why;
}

TEST(Quorum, ShrinkClosesAsSoonAsTheMissingMemberIsReportedDead) {
  const auto t0 = Clock::now();
  QuorumDecider q(4, params(4), t0);
  ASSERT_TRUE(q.observe(member(3)));
  ASSERT_TRUE(q.observe(member(0)));
  EXPECT_EQ(q.poll(t0 + 1ms).kind, Action::kWait);
  // Rank 2 saw rank 1 lost; everyone of epoch 3 is now accounted for, long before the window.
  ASSERT_TRUE(q.observe(reporting(2, {1})));
  EXPECT_EQ(q.reported_dead(), 1);
  const auto a = q.poll(t0 + 2ms);
  ASSERT_EQ(a.kind, Action::kDecide) << a.why;
  EXPECT_NE(a.why.find("reported dead (3 arrived, 1 dead)"), std::string::npos) << a.why;
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, 2, 3}));
  // The report is the candidate's, not the member's: the decision carries none.
  for (const auto& m : a.decision.members) EXPECT_TRUE(m.dead.empty());
  EXPECT_EQ(decode_decision(encode_decision(a.decision)), a.decision);
  // Rank 1 arriving after the decision waits for the next epoch.
  EXPECT_FALSE(q.observe(member(1)));
}

TEST(Quorum, ADeadReportForSomeoneElseOrOutsideTheEpochDoesNotCloseEarly) {
  const auto t0 = Clock::now();
  // Rank 1 is missing; the survivors report rank 0 (who arrived), themselves, and ranks that
  // epoch 6 never had: nobody accounts for rank 1.
  QuorumDecider q(7, params(3), t0);
  ASSERT_TRUE(q.observe(reporting(0, {0, 3, 1000})));
  ASSERT_TRUE(q.observe(reporting(2, {0, 2})));
  EXPECT_EQ(q.reported_dead(), 0);
  auto a = q.poll(t0 + 10ms);
  ASSERT_EQ(a.kind, Action::kWait);
  EXPECT_EQ(a.until, t0 + 2s);
  // A joiner has no previous epoch: what it reports counts for nothing.
  Candidate j = joiner(1);
  j.dead = {1};
  ASSERT_TRUE(q.observe(j));
  EXPECT_EQ(q.reported_dead(), 0);
  EXPECT_EQ(q.poll(t0 + 1999ms).kind, Action::kWait);
  a = q.poll(t0 + 2s);
  ASSERT_EQ(a.kind, Action::kDecide);
  EXPECT_NE(a.why.find("join window closed with 2 of 3"), std::string::npos) << a.why;
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, 2, -1}));
}

TEST(Quorum, AMemberReportedDeadThatArrivesBeforeTheDecisionIsAdmitted) {
  const auto t0 = Clock::now();
  QuorumDecider q(2, params(3), t0);
  ASSERT_TRUE(q.observe(reporting(0, {1, 2})));  // rank 0 believes 1 and 2 are gone
  EXPECT_EQ(q.reported_dead(), 2);
  ASSERT_TRUE(q.observe(member(1)));  // but rank 1 comes anyway, before anyone polls
  EXPECT_EQ(q.reported_dead(), 1);
  const auto a = q.poll(t0 + 5ms);
  ASSERT_EQ(a.kind, Action::kDecide) << a.why;
  EXPECT_NE(a.why.find("(2 arrived, 1 dead)"), std::string::npos) << a.why;
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, 1}));
}

TEST(Quorum, ReportedDeadStillNeedsTheMinimum) {
  const auto t0 = Clock::now();
  QuorumDecider q(2, params(3, 2), t0);
  ASSERT_TRUE(q.observe(reporting(0, {1, 2})));
  // Everyone is accounted for, but one member is below the minimum of 2: the window rule and
  // give-up apply as before.
  auto a = q.poll(t0 + 5ms);
  ASSERT_EQ(a.kind, Action::kWait);
  EXPECT_EQ(a.until, t0 + 2s);
  ASSERT_TRUE(q.observe(joiner(0)));
  a = q.poll(t0 + 6ms);
  ASSERT_EQ(a.kind, Action::kDecide) << a.why;
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, -1}));
}

TEST(Quorum, CandidateDeadRanksRoundTripAndMalformedListsAreRejected) {
  Candidate c{0x1122334455667788ull, 3, "host:123", {0, 5, 2}};
  EXPECT_EQ(decode_candidate(encode_candidate(c)), c);
  std::string why;
  // Layout: version, uid, prev_rank, label, then the count and the ranks.
  const auto bytes = encode_candidate(c);
  ASSERT_EQ(bytes.size(), 2u + 8 + 4 + 4 + 8 + 4 + 3 * 4);
  EXPECT_EQ(bytes[26], 3);  // count, little-endian
  EXPECT_EQ(bytes[34], 5);  // the second rank
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_FALSE(decode_candidate(truncated, &why));
  EXPECT_NE(why.find("truncated dead ranks"), std::string::npos) << why;
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_FALSE(decode_candidate(trailing, &why));
  EXPECT_NE(why.find("trailing"), std::string::npos) << why;
  EXPECT_FALSE(decode_candidate(encode_candidate({1, 0, "", {-1}}), &why));
  EXPECT_NE(why.find("below 0"), std::string::npos) << why;
  EXPECT_FALSE(decode_candidate(encode_candidate({1, 0, "", {4, 4}}), &why));
  EXPECT_NE(why.find("listed twice"), std::string::npos) << why;
  // A count beyond the bound, and one beyond the bytes present, are refused before anything
  // is allocated.
  auto huge = encode_candidate({1, 0, "", {}});
  huge.resize(huge.size() - 4);
  for (uint32_t n : {kMaxMembers + 1, kMaxMembers}) {
    auto b = huge;
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
    EXPECT_FALSE(decode_candidate(b, &why));
    EXPECT_FALSE(why.empty());
  }
  // A record of version 1 (no dead ranks) is another version.
  auto v1 = encode_candidate({1, 0, "", {}});
  v1[0] = 1;
  v1.resize(v1.size() - 4);
  EXPECT_FALSE(decode_candidate(v1, &why));
  EXPECT_NE(why.find("version 1"), std::string::npos) << why;
}

// A joiner that dies while it waits for the step boundary: its record is in the store, its beats
// stop. The decider takes the joiners it hears once after reading them, leaves out the one it
// does not hear within silent_after, and decides no later than that.
TEST(Quorum, AJoinerNotHeardAfterItsRecordIsLeftOut) {
  const auto t0 = Clock::now();
  QuorumParams p = params(2);
  p.silent_after = 500ms;
  QuorumDecider q(3, p, t0);
  ASSERT_TRUE(q.observe(joiner(1)));  // alive: beats
  ASSERT_TRUE(q.observe(joiner(2)));  // died before the boundary
  ASSERT_TRUE(q.observe(member(0)));
  ASSERT_TRUE(q.observe(member(1)));
  // Every old member arrived, but neither joiner has been heard since its record was read.
  auto a = q.poll(t0 + 10ms);
  ASSERT_EQ(a.kind, Action::kWait);
  EXPECT_EQ(a.until, t0 + 510ms);
  q.heard(joiner(1).uid);
  a = q.poll(t0 + 120ms);
  ASSERT_EQ(a.kind, Action::kWait);  // joiner 2 may still beat
  EXPECT_EQ(a.until, t0 + 510ms);
  a = q.poll(t0 + 510ms);
  ASSERT_EQ(a.kind, Action::kDecide) << a.why;
  EXPECT_EQ(prev_ranks(a.decision), (std::vector<int>{0, 1, -1}));
  EXPECT_EQ(a.decision.members[2].uid, joiner(1).uid);
  EXPECT_EQ(a.decision.rank_of(joiner(2).uid), -1);
  EXPECT_EQ(q.silent_joiners(), 1);
  EXPECT_NE(a.why.find("1 left out"), std::string::npos) << a.why;
}

// Heard before the decider's first look counts for nothing (the record must be read first); a
// shrink without joiners does not wait for beats; members of the old epoch need none.
TEST(Quorum, OnlyJoinersWaitForABeatAndOnlyOneReadAfterTheirRecord) {
  const auto t0 = Clock::now();
  QuorumParams p = params(2);
  p.silent_after = 500ms;
  {
    QuorumDecider q(3, p, t0);
    ASSERT_TRUE(q.observe(member(0)));
    ASSERT_TRUE(q.observe(member(1)));
    const auto a = q.poll(t0);
    ASSERT_EQ(a.kind, Action::kDecide) << a.why;
    EXPECT_EQ(a.decision.members.size(), 2u);
  }
  {
    QuorumDecider q(3, p, t0);
    ASSERT_TRUE(q.observe(joiner(1)));
    q.heard(joiner(1).uid);  // before any poll: the decider has not looked at it yet
    ASSERT_TRUE(q.observe(member(0)));
    ASSERT_TRUE(q.observe(member(1)));
    EXPECT_EQ(q.poll(t0).kind, Action::kWait);
    q.heard(joiner(1).uid);
    const auto a = q.poll(t0 + 100ms);
    ASSERT_EQ(a.kind, Action::kDecide) << a.why;
    EXPECT_EQ(a.decision.members.size(), 3u);
    EXPECT_EQ(q.silent_joiners(), 0);
  }
}
