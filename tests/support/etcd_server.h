// A real etcd server for the tests (Debian's etcd-server, /usr/bin/etcd, or GEOCCL_TEST_ETCD):
// one member on loopback, free ports, a fresh data directory (in /dev/shm when there is one, so
// that its fsyncs cost nothing). The constructor returns once etcd answers /health, or throws
// with etcd's log; the destructor kills it and removes the directory. The server also dies with
// the test process (PR_SET_PDEATHSIG), so a crashed test leaves no etcd behind, and the next
// server removes the directories of test processes that are gone.
// A missing binary is a failure, not a skip: CI installs etcd-server (scripts/install-deps.sh).
#pragma once

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/socket.h"

namespace geoccl::test {

class EtcdServer {
 public:
  EtcdServer() {
    const char* bin = std::getenv("GEOCCL_TEST_ETCD");
    binary_ = bin ? bin : "/usr/bin/etcd";
    if (::access(binary_.c_str(), X_OK) != 0)
      throw std::runtime_error("no etcd at " + binary_ +
                               " (install etcd-server: scripts/install-deps.sh)");
    const std::string base = std::filesystem::is_directory("/dev/shm")
                                 ? "/dev/shm"
                                 : std::filesystem::temp_directory_path().string();
    sweep_stale(base);
    std::string tmpl = base + "/geoccl-etcd-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    dir_ = tmpl;
    std::ofstream(dir_ + "/owner") << ::getpid();
    // A port picked free can be taken before etcd binds it (tests run in parallel): try again.
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (start(&why)) return;
      stop();
    }
    std::filesystem::remove_all(dir_);
    throw std::runtime_error("etcd did not become healthy: " + why);
  }
  ~EtcdServer() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  uint16_t port() const { return client_port_; }
  // etcd://127.0.0.1:PORT/prefix
  std::string url(const std::string& prefix) const {
    return "etcd://127.0.0.1:" + std::to_string(client_port_) + "/" + prefix;
  }
  // Kills the server now (SIGKILL): the store is gone, as when its host dies.
  void kill() { stop(); }

 private:
  // The directories of test processes that died without their destructor (killed by a timeout):
  // their owner's pid is gone.
  static void sweep_stale(const std::string& base) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      if (e.path().filename().string().rfind("geoccl-etcd-", 0) != 0) continue;
      pid_t owner = 0;
      if (!(std::ifstream(e.path() / "owner") >> owner) || owner <= 0) continue;
      if (::kill(owner, 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
    }
  }

  bool start(std::string* why) {
    client_port_ = runtime::pick_free_port();
    const uint16_t peer_port = runtime::pick_free_port();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    const std::string log = dir_ + "/etcd.log";
    std::vector<std::string> args = {binary_,
                                     "--name=geoccl-test",
                                     "--data-dir=" + dir_ + "/data",
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=geoccl-test=" + peer,
                                     "--initial-cluster-state=new",
                                     "--logger=zap",
                                     "--log-level=warn"};
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);  // the test died before prctl
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    httplib::Client http("127.0.0.1", client_port_);
    http.set_connection_timeout(std::chrono::milliseconds(200));
    http.set_read_timeout(std::chrono::seconds(2));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        *why = "etcd exited: " + read_file(log);
        return false;
      }
      if (auto r = http.Get("/health");
          r && r->status == 200 && r->body.find("\"true\"") != std::string::npos)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *why = "no healthy answer within 30 s: " + read_file(log);
    return false;
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  static std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  std::string binary_;
  std::string dir_;
  uint16_t client_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace geoccl::test
