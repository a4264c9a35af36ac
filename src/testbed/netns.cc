#include "netns.h"
#include "sys_error.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>

extern char** environ;

namespace geoccl::testbed {
namespace {

constexpr const char* kNetnsDir = "/run/netns/";


struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string run_command(const std::vector<std::string>& argv) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
  Fd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw_errno("pipe2");
  Fd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.fd, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  std::string cmdline;
  for (const auto& a : argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  if (rc != 0) throw std::system_error(rc, std::generic_category(), "cannot run " + cmdline);
  ::close(out_w.fd);
  out_w.fd = -1;
  ::close(err_w.fd);
  err_w.fd = -1;

  std::string out, err;
  pollfd fds[2] = {{out_r.fd, POLLIN, 0}, {err_r.fd, POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? out : err).append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!err.empty() && err.back() == '\n') err.pop_back();
    throw std::runtime_error("'" + cmdline + "' failed" + (err.empty() ? "" : ": " + err));
  }
  return out;
}

void create_netns(const std::string& name) { run_command({"ip", "netns", "add", name}); }

bool delete_netns(const char* name) noexcept {
  // Only async-signal-safe calls below: no allocation, no locks.
  char path[256];
  const std::size_t dir_len = std::strlen(kNetnsDir);
  const std::size_t name_len = std::strlen(name);
  if (dir_len + name_len + 1 > sizeof path) return false;
  std::memcpy(path, kNetnsDir, dir_len);
  std::memcpy(path + dir_len, name, name_len + 1);
  const int saved = errno;
  umount2(path, MNT_DETACH);  // fails harmlessly when not mounted
  const bool ok = unlink(path) == 0 || errno == ENOENT;
  errno = saved;
  return ok;
}

bool netns_exists(const std::string& name) {
  struct stat st;
  return ::stat((kNetnsDir + name).c_str(), &st) == 0;
}

std::vector<std::string> list_netns() {
  std::vector<std::string> names;
  DIR* dir = opendir(kNetnsDir);
  if (dir == nullptr) return names;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  closedir(dir);
  return names;
}

void in_netns(const std::string& name, const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread worker([&] {
    try {
      Fd ns(::open((kNetnsDir + name).c_str(), O_RDONLY | O_CLOEXEC));
      if (ns.fd < 0) throw_errno("cannot open network namespace " + name);
      // setns on this thread only: the thread is thrown away afterwards, so
      // no other code ever runs in the wrong namespace.
      if (setns(ns.fd, CLONE_NEWNET) != 0) throw_errno("cannot enter network namespace " + name);
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
}

int open_tun(const std::string& ifname) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open /dev/net/tun");
  ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    throw_errno("cannot create TUN device " + ifname);
  }
  return fd;
}

void write_proc(const std::string& path, const std::string& value) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.fd < 0) throw_errno("cannot open " + path);
  if (::write(fd.fd, value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    throw_errno("cannot write '" + value + "' to " + path);
  }
}

std::string read_proc(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw_errno("cannot open " + path);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd.fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace geoccl::testbed
