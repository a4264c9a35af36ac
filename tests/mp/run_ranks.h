// Runs N copies of a rank program as real processes with torchrun's environment (RANK,
// WORLD_SIZE, MASTER_ADDR/PORT on a free loopback port) and a bounded wait; leftover processes are
// killed when the time is up. Shared by the multi-process test executables.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/socket.h"

#include "runtime/socket.h"

#ifndef MP_CHECK_PATH
#error "MP_CHECK_PATH must point at the rank program"
#endif

namespace {

// Returns each rank's exit status (exit code, or 128+signal).
// `tick`, when given, runs every 10 ms while the ranks run, with their pids.
std::vector<int> run_ranks(int n, const std::string& mode, int timeout_s = 240,
                           const std::vector<std::pair<std::string, std::string>>& env = {},
                           const std::function<void(const std::vector<pid_t>&)>& tick = {}) {
  const int port = geoccl::runtime::pick_free_port();  // tests run in parallel (ctest -j)
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
    if (tick) tick(pids);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return codes;
}

}  // namespace
