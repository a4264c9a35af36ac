// Liveness between real processes on loopback (liveness_check.cc is the rank program): a peer
// that stops (SIGSTOP) and ranks that die at random points. Outages and partitions need the
// emulated WAN: tests/CMakeLists.txt runs those on the test bed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "run_ranks.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

std::string stamp_path(const std::string& tag) {
  return "/tmp/geoccl-liveness-" + std::to_string(::getpid()) + "-" + tag;
}

// Runs `mode` with the victim stopped by itself; once every other rank is done (or 30 s after
// the stop), the stopped victim is killed.
std::vector<int> run_freeze(int n, const Env& extra, const std::string& tag) {
  const std::string stamp = stamp_path(tag);
  std::remove(stamp.c_str());
  // The defaults first: `extra` may override them (a rank sets them in this order).
  Env env{{"GEOCCL_HEARTBEAT_MS", "500"}, {"GEOCCL_LIVENESS_WINDOW_MS", "3000"}};
  env.insert(env.end(), extra.begin(), extra.end());
  env.emplace_back("GEOCCL_TEST_STAMP", stamp);
  auto stopped_at = std::chrono::steady_clock::time_point{};
  auto codes = run_ranks(n, "freeze", 120, env, [&](const std::vector<pid_t>& pids) {
    const pid_t victim = pids.back();
    if (stopped_at == std::chrono::steady_clock::time_point{}) {
      if (std::ifstream(stamp).good()) stopped_at = std::chrono::steady_clock::now();
      return;
    }
    // The others detect within the 3 s window; they exit soon after. Then the victim goes.
    bool others_done = true;
    for (size_t i = 0; i + 1 < pids.size(); ++i) {
      siginfo_t info{};
      // Still running: no exit to report (a rank already reaped by run_ranks fails the call).
      if (::waitid(P_PID, static_cast<id_t>(pids[i]), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0)
        others_done = false;
    }
    if (others_done || std::chrono::steady_clock::now() - stopped_at > std::chrono::seconds(30))
      ::kill(victim, SIGKILL);
  });
  std::remove(stamp.c_str());
  return codes;
}

void expect_survivors_ok(const std::vector<int>& codes, int victim, int victim_code, const std::string& what) {
  for (size_t r = 0; r < codes.size(); ++r) {
    if (static_cast<int>(r) == victim) EXPECT_EQ(codes[r], victim_code) << what << ": victim rank " << r;
    else EXPECT_EQ(codes[r], 0) << what << ": rank " << r << " did not get the expected typed error in time";
  }
}

}  // namespace

// A stopped process keeps its sockets open and its kernel acknowledges: only missing heartbeats
// tell. Over TCP in two labelled domains (resume on: a silent stream is not a dead one), and
// with the victim's domain mate on shared memory.
TEST(Liveness, StoppedPeerIsUnresponsiveOnEveryOtherRankWithinTheWindow) {
  for (const char* transport : {"tcp", "auto"}) {
    const auto codes = run_freeze(4, {{"GEOCCL_TEST_DOMAINS", "a,a,b,b"}, {"GEOCCL_TRANSPORT", transport}},
                                  transport);
    expect_survivors_ok(codes, 3, 128 + SIGKILL, transport);
  }
}

// From 33 ranks on, a rank watches only the peers at power-of-two distances round the ring
// (protocol::watched_peers): 10 of the 39 survivors watch rank 39, and one of them fails the
// group. Every survivor must still get kPeerUnresponsive within the window's bounds, the others
// through the abort. A 5 s window: 40 processes share this machine's cores with another test.
TEST(Liveness, StoppedPeerInAGroupLargerThanTheWatchSetsReachesEveryRank) {
#ifdef GEOCCL_TEST_SANITIZED
  GTEST_SKIP() << "40 processes under the sanitizers: the release build runs it";
#endif
  const auto codes = run_freeze(40, {{"GEOCCL_TRANSPORT", "tcp"}, {"GEOCCL_LIVENESS_WINDOW_MS", "5000"}}, "watched");
  expect_survivors_ok(codes, 39, 128 + SIGKILL, "40 ranks");
}

TEST(Liveness, StoppedPeerOnOneSiteIsUnresponsive) {
  const auto codes = run_freeze(3, {{"GEOCCL_TRANSPORT", "tcp"}}, "site");
  expect_survivors_ok(codes, 2, 128 + SIGKILL, "one site");
}

// Trials: a random rank dies at a random point of a random operation; every survivor gets
// kPeerLost within 10 s, every time. Streams are resumable (two labelled domains), so a broken
// stream alone would be re-established: the death is told by the address that refuses.
// Twenty seeded kill points in all, each run once in CI: the sanitized build takes seeds 1-8,
// the release build 9-20 (both transports in each).
#ifdef GEOCCL_TEST_SANITIZED
constexpr int kFirstTrial = 1, kLastTrial = 8;
#else
constexpr int kFirstTrial = 9, kLastTrial = 20;
#endif

TEST(Liveness, RankKilledAtRandomPointsGivesPeerLostOnAllSurvivors) {
  const std::string stamp = stamp_path("random");
  for (int trial = kFirstTrial; trial <= kLastTrial; ++trial) {
    std::remove(stamp.c_str());
    const char* transport = trial % 2 ? "tcp" : "auto";
    const auto codes = run_ranks(4, "random-kill", 60,
                                 {{"GEOCCL_TEST_SEED", std::to_string(trial)},
                                  {"GEOCCL_TEST_STAMP", stamp},
                                  {"GEOCCL_TEST_DOMAINS", "a,a,b,b"},
                                  {"GEOCCL_TRANSPORT", transport}});
    int killed = 0;
    for (size_t r = 0; r < codes.size(); ++r) {
      if (codes[r] == 128 + SIGKILL) {
        ++killed;
        continue;
      }
      EXPECT_EQ(codes[r], 0) << "trial " << trial << " (" << transport << "): rank " << r;
    }
    EXPECT_EQ(killed, 1) << "trial " << trial;
  }
  std::remove(stamp.c_str());
}
