// Multi-process tests: real processes on loopback sockets. Each test forks N copies of mp_check
// with torchrun's environment and a bounded wait; leftover processes are killed on any failure.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#ifndef MP_CHECK_PATH
#error "MP_CHECK_PATH must point at the mp_check binary"
#endif

namespace {

// A port the kernel considers free right now (tests run in parallel under ctest -j).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Returns each rank's exit status (exit code, or 128+signal).
std::vector<int> run_ranks(int n, const std::string& mode, int timeout_s = 240,
                           const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("GEOCCL_CONNECT_TIMEOUT_MS", "60000", 1);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      execl(MP_CHECK_PATH, MP_CHECK_PATH, mode.c_str(), nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(n), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (codes[static_cast<size_t>(r)] != -1) continue;
      int st = 0;
      if (waitpid(pids[static_cast<size_t>(r)], &st, WNOHANG) == pids[static_cast<size_t>(r)]) {
        codes[static_cast<size_t>(r)] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r)
        if (codes[static_cast<size_t>(r)] == -1) {
          kill(pids[static_cast<size_t>(r)], SIGKILL);
          waitpid(pids[static_cast<size_t>(r)], nullptr, 0);
          codes[static_cast<size_t>(r)] = 999;  // hung
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryOpEveryDtypeMatchesReference) {
  const auto codes = run_ranks(GetParam(), "collectives");
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8));

TEST(Collectives, EightStripedStreamsPerPeer) {
  for (int n : {2, 3, 5}) {
    const auto codes = run_ranks(n, "collectives", 240, {{"GEOCCL_TCP_STREAMS", "8"}});
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "n=" << n << " rank " << r;
  }
  const auto codes = run_ranks(3, "collectives-big", 240, {{"GEOCCL_TCP_STREAMS", "8"}});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "big, rank " << r;
}

TEST(Hierarchical, UnevenDomainsMatchReferenceAndAreBitIdentical) {
  for (const char* doms : {"a,a,a,b,c,c", "x,y", "a,b,b,a,c"}) {
    const int n = static_cast<int>(std::count(doms, doms + std::strlen(doms), ',')) + 1;
    const auto codes = run_ranks(n, "collectives", 240, {{"GEOCCL_TEST_DOMAINS", doms}});
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << doms << " rank " << r;
  }
  const auto codes = run_ranks(4, "collectives-big", 240, {{"GEOCCL_TEST_DOMAINS", "a,a,b,b"}});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "big, rank " << r;
}

TEST(Topology, LabelsDefineDomains) {
  const auto codes = run_ranks(5, "topology", 60,
                               {{"GEOCCL_TEST_DOMAINS", "b,a,b,c,a"}, {"GEOCCL_TEST_EXPECT", "0,1,0,2,1"}});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(Topology, OneHostWithoutLabelsIsOneDomain) {
  const auto codes = run_ranks(4, "topology", 60, {{"GEOCCL_TEST_EXPECT", "0,0,0,0"}});
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(CollectivesBig, TensOfMiBOnThreeAndFourRanks) {
  for (int n : {3, 4}) {
    const auto codes = run_ranks(n, "collectives-big");
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "n=" << n << " rank " << r;
  }
}

TEST(Errors, KilledRankGivesPeerLostOnEveryOtherRank) {
  for (int n : {2, 4}) {
    const auto codes = run_ranks(n, "kill", 60);
    for (size_t r = 0; r < codes.size(); ++r) {
      if (r == 1) EXPECT_EQ(codes[r], 128 + SIGKILL);
      else EXPECT_EQ(codes[r], 0) << "n=" << n << " rank " << r << " did not see peer-lost in time";
    }
  }
}

TEST(Errors, MismatchedCallsFailCleanlyOnAllRanks) {
  for (const char* mode : {"mismatch-size", "mismatch-dtype", "mismatch-op"})
    for (int n : {2, 3, 4}) {
      const auto codes = run_ranks(n, mode, 60);
      for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << mode << " n=" << n << " rank " << r;
    }
}

TEST(Errors, GarbageClientIsRejectedAndGroupKeepsWorking) {
  const auto codes = run_ranks(3, "garbage", 60);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(Errors, InvalidArgumentsAreTypedErrors) {
  const auto codes = run_ranks(2, "invalid", 60);
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace
