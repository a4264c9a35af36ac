// Elastic membership between real processes: a standalone store hosted by the test (so the death
// of rank 0 takes nothing down), 4 members, two deaths of the current rank 0 and a joiner started
// while the group runs (elastic_check.cc describes the phases); and a death the survivors' errors
// name, after which the next epoch forms without waiting out a long join window. Bounded:
// everything left is killed after 120 s.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "geoccl/store.h"
#include "protocol/wire.h"

#ifndef MP_CHECK_PATH
#error "MP_CHECK_PATH must point at the rank program"
#endif

namespace {

pid_t start(int rank, int world, uint16_t port, const std::string& session,
            const std::string& stamp, const char* transport, const char* mode = "member",
            const char* domain = nullptr) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (domain) setenv("GEOCCL_DOMAIN", domain, 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("GEOCCL_SESSION", session.c_str(), 1);
    setenv("GEOCCL_TRANSPORT", transport, 1);
    setenv("GEOCCL_TEST_KILL_STAMP", stamp.c_str(), 1);
    execl(MP_CHECK_PATH, MP_CHECK_PATH, mode, nullptr);
    _exit(127);
  }
  return pid;
}

// The exit code of every process (128 + signal when killed by one); those still running at
// `deadline` are killed and get 999.
std::vector<int> exit_codes(const std::vector<pid_t>& pids, std::chrono::steady_clock::time_point deadline) {
  std::vector<int> codes(pids.size(), -1);
  for (size_t left = pids.size(); left > 0;) {
    left = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], nullptr, 0);
        codes[i] = 999;
      } else {
        ++left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

// The newest decided epoch in the store, or -1 while there is none.
int latest_epoch(geoccl::StoreClient& store, const std::string& session) {
  const std::string key = "geoccl/" + session + "/elastic/latest";
  if (!store.check(key)) return -1;
  const auto raw = store.get(key, std::chrono::seconds(1));
  geoccl::protocol::Reader r(raw);
  uint32_t v = 0;
  return r.u32(&v) ? static_cast<int>(v) : -1;
}

void shrink_and_grow(const char* transport) {
  geoccl::StoreServer server("127.0.0.1", 0);
  geoccl::StoreClient store("127.0.0.1", server.port(), std::chrono::seconds(5));
  const std::string session = "elastic-" + std::to_string(getpid()) + "-" + transport;
  const std::string stamp = "/tmp/geoccl-elastic-kill-" + std::to_string(getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) pids.push_back(start(r, 4, server.port(), session, stamp, transport));
  std::vector<int> codes(5, -1);
  bool joiner_started = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    // The joiner (a restarted process) comes once the survivors of rank 0's death have formed
    // epoch 1 or later.
    if (!joiner_started && latest_epoch(store, session) >= 1) {
      pids.push_back(start(0, 4, server.port(), session, stamp, transport));
      joiner_started = true;
    }
    int left = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i])
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      else
        ++left;
    }
    if (left == 0 && joiner_started) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (codes[i] == -1) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          codes[i] = 999;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::remove(stamp.c_str());
  ASSERT_TRUE(joiner_started) << "the survivors never formed epoch 1";
  // Epoch 0's rank 0 and the second epoch's rank 0 (epoch 0's rank 1) killed themselves.
  EXPECT_EQ(codes[0], 128 + SIGKILL);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
  EXPECT_EQ(codes[2], 0) << "epoch 0 rank 2";
  EXPECT_EQ(codes[3], 0) << "epoch 0 rank 3";
  EXPECT_EQ(codes[4], 0) << "the joiner";
}

TEST(Elastic, ShrinkGrowShrinkWithRankZeroDyingTwiceOverSharedMemory) { shrink_and_grow("auto"); }
TEST(Elastic, ShrinkGrowShrinkWithRankZeroDyingTwiceOverTcp) { shrink_and_grow("tcp"); }

// Rank 2 of 4 (domains a = {0, 1}, b = {2, 3}) is killed (SIGKILL) with a join window of 20 s:
// every survivor's Error names it (kPeerLost, ranks [2]), the survivors form epoch 1 in less than
// half the window, and epoch 1 plans with the paths between a and b that epoch 0 measured
// (elastic_check.cc, mode "dead-reported", checks all three and exits 0).
void dead_reported(const char* transport) {
  geoccl::StoreServer server("127.0.0.1", 0);
  const std::string session = "elastic-dead-" + std::to_string(getpid()) + "-" + transport;
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r)
    pids.push_back(start(r, 4, server.port(), session, "", transport, "dead-reported", r < 2 ? "a" : "b"));
  const std::vector<int> codes = exit_codes(pids, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  EXPECT_EQ(codes[2], 128 + SIGKILL) << "rank 2, the one killed";
  for (int r : {0, 1, 3})
    EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "survivor, epoch 0 rank " << r;
}

TEST(Elastic, DeadRankNamedByTheFailureEndsTheJoinWindowEarlyOverSharedMemory) {
  dead_reported("auto");
}
TEST(Elastic, DeadRankNamedByTheFailureEndsTheJoinWindowEarlyOverTcp) { dead_reported("tcp"); }

// A joiner writes its candidate record and is killed (SIGKILL) before the members reach their
// step boundary; then they grow (elastic_check.cc, mode "dead-joiner"): the decision leaves the
// joiner out, and the next epoch forms with the 3 members well within the connect timeout.
TEST(Elastic, AJoinerThatDiesBeforeTheDecisionIsLeftOut) {
  geoccl::StoreServer server("127.0.0.1", 0);
  geoccl::StoreClient store("127.0.0.1", server.port(), std::chrono::seconds(5));
  const std::string session = "elastic-dead-joiner-" + std::to_string(getpid());
  const std::string stamp = "/tmp/geoccl-elastic-dead-joiner-" + std::to_string(getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r) pids.push_back(start(r, 3, server.port(), session, stamp, "tcp", "dead-joiner"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto wait_until = [&](const std::function<bool()>& f) {
    while (!f() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return f();
  };
  bool killed = false;
  if (wait_until([&] { return latest_epoch(store, session) >= 0; })) {
    const pid_t joiner = start(0, 3, server.port(), session, stamp, "tcp", "joiner");
    // Its record, and a few beats of it, are in the store.
    const std::string beats = "geoccl/" + session + "/elastic/e1/b/1";
    const bool recorded = wait_until([&] { return store.check(beats) && store.add(beats, 0) >= 3; });
    kill(joiner, SIGKILL);
    waitpid(joiner, nullptr, 0);
    killed = recorded;
    if (FILE* f = std::fopen((stamp + ".grow").c_str(), "w")) std::fclose(f);
  }
  const std::vector<int> codes = exit_codes(pids, deadline);
  std::remove((stamp + ".grow").c_str());
  ASSERT_TRUE(killed) << "the joiner's candidate record never appeared";
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "member, epoch 0 rank " << r;
}

}  // namespace
