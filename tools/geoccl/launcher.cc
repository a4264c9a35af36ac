#include "launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "security/secret.h"
#include "runtime/socket.h"

namespace geoccl::tools {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal.store(sig); }

struct Rank {
  pid_t pid = -1;
  int out_fd = -1;
  std::string partial;
  bool exited = false;
  int code = 0;
};

void emit(int rank, const std::string& line) {
  std::string s = "[";  // appends: `"[" + std::string` trips a false -Wrestrict in g++ 12 -O3
  s += std::to_string(rank);
  s += "] ";
  s += line;
  s += '\n';
  [[maybe_unused]] ssize_t n = write(STDOUT_FILENO, s.data(), s.size());
}

// Run from a build tree (BUILD/tools/geoccl/geoccl), the built Python package is BUILD/python:
// ranks get it on PYTHONPATH so `import geoccl` works with nothing installed.
std::string build_tree_python_path() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string p(exe, static_cast<size_t>(n));
  for (int i = 0; i < 3; ++i) p = p.substr(0, p.rfind('/'));  // strip geoccl, geoccl/, tools/
  const std::string pkg = p + "/python";
  return access((pkg + "/geoccl/__init__.py").c_str(), R_OK) == 0 ? pkg : "";
}

}  // namespace

int launch(const LaunchSpec& spec) {
  using Clock = std::chrono::steady_clock;
  const int port = spec.master_port ? spec.master_port : runtime::pick_free_port();
  const std::string run_id = std::to_string(getpid()) + "-" + std::to_string(port);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::string pythonpath = build_tree_python_path();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old)
    pythonpath = pythonpath.empty() ? old : pythonpath + ":" + old;
  std::map<std::string, std::string> job_env;
  const auto set = [](const char* name) { return std::getenv(name) && *std::getenv(name); };
  if (spec.secret && !set("GEOCCL_SECRET") && !set("GEOCCL_SECRET_FILE")) {
    job_env["GEOCCL_SECRET"] = security::random_secret_hex();
    if (!set("GEOCCL_SHM_TRUST_HOST")) job_env["GEOCCL_SHM_TRUST_HOST"] = "1";
  } else if (!spec.secret && !set("GEOCCL_ALLOW_INSECURE")) {
    job_env["GEOCCL_ALLOW_INSECURE"] = "1";
  }
  std::vector<Rank> ranks(static_cast<size_t>(spec.nranks));
  for (int r = 0; r < spec.nranks; ++r) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
      perror("pipe");
      return 1;
    }
    std::map<std::string, std::string> env = {
        {"RANK", std::to_string(r)},
        {"WORLD_SIZE", std::to_string(spec.nranks)},
        {"LOCAL_RANK", std::to_string(r)},
        {"LOCAL_WORLD_SIZE", std::to_string(spec.nranks)},
        {"MASTER_ADDR", spec.master_addr},
        {"MASTER_PORT", std::to_string(port)},
        {"GEOCCL_RUN_ID", run_id},
    };
    env.insert(job_env.begin(), job_env.end());
    if (!pythonpath.empty()) env["PYTHONPATH"] = pythonpath;
    if (spec.metrics_base_port > 0) env["GEOCCL_METRICS_PORT"] = std::to_string(spec.metrics_base_port + r);
    if (spec.rank_env)
      for (auto& [k, v] : spec.rank_env(r)) env[k] = v;
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // own process group: the launcher can kill the rank's whole tree
      dup2(pipefd[1], STDOUT_FILENO);
      dup2(pipefd[1], STDERR_FILENO);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      if (spec.in_child) spec.in_child(r);
      std::vector<char*> argv;
      for (auto& a : spec.command) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "geoccl run: cannot execute %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(pipefd[1]);
    setpgid(pid, pid);
    ranks[static_cast<size_t>(r)].pid = pid;
    ranks[static_cast<size_t>(r)].out_fd = pipefd[0];
  }

  const auto start = Clock::now();
  int first_failure = 0;
  bool killing = false;
  Clock::time_point kill_at{};
  auto kill_all = [&](int sig) {
    for (auto& rk : ranks)
      if (!rk.exited) kill(-rk.pid, sig);
  };
  auto begin_stop = [&](int code) {
    if (!first_failure) first_failure = code;
    if (!killing) {
      killing = true;
      kill_all(SIGTERM);
      kill_at = Clock::now() + std::chrono::seconds(3);
    }
  };

  for (;;) {
    // Drain output.
    std::vector<pollfd> pfds;
    std::vector<size_t> which;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i].out_fd >= 0) {
        pfds.push_back({ranks[i].out_fd, POLLIN, 0});
        which.push_back(i);
      }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 50);
    for (size_t k = 0; k < pfds.size(); ++k) {
      if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& rk = ranks[which[k]];
      char buf[65536];
      const ssize_t n = read(rk.out_fd, buf, sizeof buf);
      if (n <= 0) {
        if (!rk.partial.empty()) emit(static_cast<int>(which[k]), rk.partial);
        rk.partial.clear();
        close(rk.out_fd);
        rk.out_fd = -1;
        continue;
      }
      rk.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = rk.partial.find('\n')) != std::string::npos) {
        emit(static_cast<int>(which[k]), rk.partial.substr(0, nl));
        rk.partial.erase(0, nl + 1);
      }
    }
    // Reap.
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& rk = ranks[i];
      if (rk.exited) continue;
      int status = 0;
      if (waitpid(rk.pid, &status, WNOHANG) != rk.pid) continue;
      rk.exited = true;
      rk.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (rk.code != 0 && !killing) {
        std::fprintf(stderr, "geoccl run: rank %zu exited with code %d; stopping the others\n", i, rk.code);
        begin_stop(rk.code);
      }
    }
    bool all_exited = true, all_closed = true;
    for (auto& rk : ranks) {
      all_exited = all_exited && rk.exited;
      all_closed = all_closed && rk.out_fd < 0;
    }
    if (all_exited && (all_closed || killing)) break;
    if (const int sig = g_signal.exchange(0)) {
      std::fprintf(stderr, "geoccl run: signal %d, stopping ranks\n", sig);
      begin_stop(130);
    }
    if (spec.timeout_s > 0 && !killing &&
        Clock::now() - start > std::chrono::duration<double>(spec.timeout_s)) {
      std::fprintf(stderr, "geoccl run: timeout after %.0f s, stopping ranks\n", spec.timeout_s);
      begin_stop(124);
    }
    if (killing && Clock::now() > kill_at) {
      kill_all(SIGKILL);
      kill_at = Clock::now() + std::chrono::seconds(3600);
    }
  }
  for (auto& rk : ranks)
    if (rk.out_fd >= 0) close(rk.out_fd);
  return first_failure;
}

}  // namespace geoccl::tools
