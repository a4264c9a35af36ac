// Test helpers that cut packets on real sockets: a child process in a network namespace of the
// test's own (root and iptables needed; a test skips otherwise), where iptables drops what the
// test chooses. The namespace and its rules vanish with the child, whatever happens in it.
// Packets are best dropped on arrival (INPUT), as a network loses them: dropped on the way out
// (OUTPUT), the sender's kernel would count them unsent, with nothing in flight to stall.
#pragma once

#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

namespace geoccl::test_support {

// Runs `body` in a child process in a new network namespace with loopback up, killed after
// `limit`. Returns its exit status: 0 when no check failed, 77 when the namespace could not be
// made, -1 when it ran out of time.
inline int run_in_netns(const std::function<void()>& body, std::chrono::seconds limit) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 77;
    if (::unshare(CLONE_NEWNET) == 0) {
      const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
      ifreq ifr{};
      std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
      if (s >= 0 && ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
          (ifr.ifr_flags |= IFF_UP, ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0)) {
        body();
        code = ::testing::Test::HasFailure() ? 1 : 0;
      }
      if (s >= 0) ::close(s);
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  if (pid < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool can_cut_packets() {
  return ::geteuid() == 0 && std::system("iptables -w -L OUTPUT -n >/dev/null 2>&1") == 0;
}

// Runs `iptables -w ARGS` (inside run_in_netns), failing the test if it fails.
inline void iptables(const std::string& args) {
  const std::string cmd = "iptables -w " + args;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace geoccl::test_support
