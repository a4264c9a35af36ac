// The group's failure state without a device: a failure keeps the ranks it is about, an abort
// frame from a peer hands them on (checked against the group's size), and the Error an operation
// ends with carries them.
#include "transport/group.h"

#include <gtest/gtest.h>

#include "geoccl/error.h"
#include "protocol/frame.h"

using namespace geoccl;
using transport::Failure;
using transport::Group;

namespace {

// One rank (`rank` of `size`) with its loop; `seen` records what the failure listeners got.
struct OneRank {
  runtime::EventLoop loop{"group-test"};
  Group group;
  std::vector<std::pair<Failure, bool>> seen;

  OneRank(int rank, int size) : group(loop, rank, size, 1, 0, [] {}) {
    group.on_failure(
        [this](const Failure& f, bool tell_peers) { seen.emplace_back(f, tell_peers); });
  }
  void peer_aborted(int peer, const std::vector<uint8_t>& payload) {
    loop.run_sync([&] { group.peer_aborted(peer, payload); });
  }
  // Rank 1 tells this rank that the group failed with kPeerLost about `ranks`.
  std::optional<Failure> told_lost(const std::string& message, const std::vector<int>& ranks) {
    peer_aborted(
        1, protocol::encode_abort(static_cast<uint8_t>(ErrorCode::kPeerLost), message, ranks));
    return group.failure();
  }
};

}  // namespace

TEST(Group, TheFirstFailureKeepsTheRanksItIsAbout) {
  OneRank r(0, 4);
  r.loop.run_sync(
      [&] { r.group.fail(ErrorCode::kPeerLost, "rank 2 closed its connection", true, {2}); });
  r.loop.run_sync(
      [&] { r.group.fail(ErrorCode::kPeerLost, "rank 3 too", true, {3}); });  // not kept
  ASSERT_TRUE(r.group.failure().has_value());
  EXPECT_EQ(r.group.failure()->code, ErrorCode::kPeerLost);
  EXPECT_EQ(r.group.failure()->ranks, std::vector<int>{2});
  ASSERT_EQ(r.seen.size(), 1u);  // the listeners (the devices, which tell the peers) get them too
  EXPECT_EQ(r.seen[0].first.ranks, std::vector<int>{2});
  EXPECT_TRUE(r.seen[0].second);
}

// A peer's abort hands on its code and ranks, and this rank passes it on to every peer, ranks
// included; a rank outside the group makes the frame malformed (kAborted, naming nobody).
TEST(Group, APeersAbortHandsOnTheCodeAndTheRanksWithinTheGroup) {
  struct Case {
    int named;
    ErrorCode code;
    std::string message;
    std::vector<int> ranks;
  };
  for (const Case& c :
       {Case{3, ErrorCode::kPeerLost, "rank 1 reports: rank 3 died", {3}},
        Case{4, ErrorCode::kAborted, "rank 1 reports: malformed abort frame", {}}}) {
    SCOPED_TRACE(c.named);
    OneRank r(0, 4);
    const auto f = r.told_lost("rank " + std::to_string(c.named) + " died", {c.named});
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->code, c.code);
    EXPECT_EQ(f->message, c.message);
    EXPECT_EQ(f->ranks, c.ranks);
    ASSERT_EQ(r.seen.size(), 1u);
    EXPECT_TRUE(r.seen[0].second);
    EXPECT_EQ(r.seen[0].first.ranks, c.ranks);
  }
}

TEST(Group, AnAbortWithoutItsRankListIsMalformed) {
  OneRank r(0, 4);
  auto payload = protocol::encode_abort(static_cast<uint8_t>(ErrorCode::kPeerLost), "x");
  payload.resize(payload.size() - 2);  // code and message only
  r.peer_aborted(2, payload);
  ASSERT_TRUE(r.group.failure().has_value());
  EXPECT_EQ(r.group.failure()->code, ErrorCode::kAborted);
}

TEST(Error, CarriesTheRanksTheFailureIsAbout) {
  const Error plain(ErrorCode::kMismatch, "ranks disagree");
  EXPECT_TRUE(plain.ranks().empty());
  const Error lost(ErrorCode::kPeerLost, "rank 2 closed its connection", {2});
  EXPECT_EQ(lost.code(), ErrorCode::kPeerLost);
  EXPECT_EQ(lost.ranks(), std::vector<int>{2});
  EXPECT_STREQ(lost.what(), "peer lost: rank 2 closed its connection");
  // Copied as an exception is (std::exception_ptr, rethrow): the ranks go with it.
  try {
    std::rethrow_exception(std::make_exception_ptr(lost));
  } catch (const Error& e) {
    EXPECT_EQ(e.ranks(), std::vector<int>{2});
  }
}
