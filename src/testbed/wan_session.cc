#include "wan_session.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "control_client.h"
#include "emulator.h"
#include "netns.h"
#include "sys_error.h"

namespace geoccl::testbed {
namespace {

constexpr const char* kPrefix = "geoccl-";
constexpr const char* kSocketDir = "/tmp/";
constexpr const char* kSocketPrefix = "geoccl-wanem-";
constexpr const char* kTunName = "wan0";

std::atomic<int> g_session_seq{0};


bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// "1234-..." -> 1234; -1 if the text does not start with digits and '-'.
pid_t leading_pid(const std::string& text) {
  std::size_t i = 0;
  pid_t pid = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i < 9) pid = pid * 10 + (text[i++] - '0');
  return (i > 0 && i < text.size() && text[i] == '-') ? pid : -1;
}

// CPU list as the hex bitmap format of /sys/.../rps_cpus (32-bit groups,
// comma separated, most significant first).
std::string cpu_mask(const std::vector<int>& cpus) {
  int max_cpu = 0;
  for (int c : cpus) max_cpu = std::max(max_cpu, c);
  std::vector<std::uint32_t> groups(static_cast<std::size_t>(max_cpu / 32 + 1), 0);
  for (int c : cpus) groups[static_cast<std::size_t>(c / 32)] |= 1u << (c % 32);
  std::string out;
  for (std::size_t i = groups.size(); i-- > 0;) {
    char buf[16];
    std::snprintf(buf, sizeof buf, i + 1 == groups.size() ? "%x" : "%08x", groups[i]);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

// The root namespace decides which algorithms unprivileged sockets -- and
// new namespaces -- may select; a namespace's default must be on that list,
// else setting it fails with EPERM.
void allow_congestion_control(const std::string& cc) {
  const std::string available = read_proc("/proc/sys/net/ipv4/tcp_available_congestion_control");
  auto listed = [](const std::string& list, const std::string& name) {
    std::istringstream in(list);
    std::string word;
    while (in >> word) {
      if (word == name) return true;
    }
    return false;
  };
  if (!listed(available, cc)) {
    // Loading the module makes it available; ignore failure, the check below reports.
    try {
      run_command({"modprobe", "tcp_" + cc});
    } catch (const std::exception&) {
    }
    if (!listed(read_proc("/proc/sys/net/ipv4/tcp_available_congestion_control"), cc)) {
      throw std::runtime_error("TCP congestion control '" + cc + "' is not available in this kernel");
    }
  }
  const std::string allowed = read_proc("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
  if (!listed(allowed, cc)) {
    write_proc("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed + " " + cc);
  }
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Closes every fd of the (forked) emulator except those it needs, so that it
// does not hold the launcher's pipes and sockets open.
void close_other_fds(std::vector<int> keep) {
  keep.push_back(0);
  keep.push_back(1);
  keep.push_back(2);
  std::sort(keep.begin(), keep.end());
  int next = 0;
  for (int fd : keep) {
    if (fd > next) syscall(SYS_close_range, next, fd - 1, 0);
    next = std::max(next, fd + 1);
  }
  syscall(SYS_close_range, next, ~0U, 0);
}

}  // namespace

WanSession::WanSession(const Scenario& scenario, int n_ranks, const std::string& domains_spec,
                       const std::string& host_cc_override, const WanSessionOptions& options)
    : options_(options), owner_pid_(getpid()) {
  if (geteuid() != 0) throw std::runtime_error("the WAN test bed needs root (network namespaces)");
  if (access("/dev/net/tun", R_OK | W_OK) != 0) throw std::runtime_error("/dev/net/tun is not available");
  sweep_stale_namespaces();
  place_ranks(scenario, n_ranks, domains_spec);

  const int seq = g_session_seq.fetch_add(1);
  const pid_t pid = getpid();
  prefix_ = std::string(kPrefix) + std::to_string(pid) + "-" + std::to_string(seq) + "-";
  // 10.64.0.0-10.191.255.0: one /24 per run. Namespaces are isolated, so
  // equal subnets in two runs would not collide; distinct ones keep packet
  // captures and logs unambiguous.
  const unsigned x = (static_cast<unsigned>(pid) * 8u + static_cast<unsigned>(seq)) % (128u * 256u);
  subnet_bits_ = (10u << 24) | ((64u + x / 256) << 16) | ((x % 256) << 8);
  subnet_ = "10." + std::to_string(64 + x / 256) + "." + std::to_string(x % 256) + ".";
  control_path_ = std::string(kSocketDir) + kSocketPrefix + std::to_string(pid) + "-" + std::to_string(seq) + ".sock";
  host_cc_ = host_cc_override.empty() ? scenario.host_cc : host_cc_override;
  if (host_cc_ != "cubic" && host_cc_ != "bbr" && host_cc_ != "reno") {
    throw std::runtime_error("host congestion control must be cubic, bbr or reno, not '" + host_cc_ + "'");
  }
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() >= 2) {
    emulator_cpu_ = options_.pin_emulator ? cpus.back() : -1;
    std::vector<int> others(cpus.begin(), cpus.end() - 1);
    rps_mask_ = cpu_mask(others);
  }

  created_netns_.reserve(domains_.size());
  for (std::size_t i = 0; i < domains_.size(); ++i) {
    domains_[i].netns = prefix_ + domains_[i].name;
    domains_[i].addr = subnet_ + std::to_string(i + 1);
    netns_paths_.push_back("/run/netns/" + domains_[i].netns);
  }

  std::vector<int> tun_fds;
  int control_fd = -1;
  try {
    allow_congestion_control(host_cc_);
    for (auto& d : domains_) set_up_domain(scenario, d, tun_fds);

    control_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (control_fd < 0) throw_errno("socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, control_path_.c_str(), control_path_.size() + 1);
    unlink(control_path_.c_str());
    if (bind(control_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(control_fd, 16) != 0) {
      throw_errno("cannot listen on " + control_path_);
    }
    start_emulator(scenario, tun_fds, control_fd);
  } catch (...) {
    for (int fd : tun_fds) ::close(fd);
    if (control_fd >= 0) ::close(control_fd);
    teardown();
    throw;
  }
  for (int fd : tun_fds) ::close(fd);  // the emulator owns them now
  ::close(control_fd);
}

WanSession::~WanSession() {
  if (!torn_down_ && emulator_pid_ > 0) {
    try {
      final_stats_ = control("stats");
    } catch (const std::exception&) {
    }
  }
  teardown();
}

void WanSession::place_ranks(const Scenario& scenario, int n_ranks, const std::string& spec) {
  std::vector<std::pair<std::string, int>> placement;
  if (spec.empty()) {
    const int total = scenario.default_total_ranks();
    const int d = static_cast<int>(scenario.domains.size());
    for (int i = 0; i < d; ++i) {
      int ranks = scenario.domains[static_cast<std::size_t>(i)].ranks;
      if (n_ranks > 0 && n_ranks != total) ranks = n_ranks / d + (i < n_ranks % d ? 1 : 0);
      placement.emplace_back(scenario.domains[static_cast<std::size_t>(i)].name, ranks);
    }
  } else {
    std::set<std::string> seen;
    std::istringstream in(spec);
    std::string item;
    while (std::getline(in, item, ',')) {
      const auto colon = item.find(':');
      const std::string name = item.substr(0, colon);
      int ranks = -1;
      if (colon != std::string::npos) {
        try {
          std::size_t used = 0;
          ranks = std::stoi(item.substr(colon + 1), &used);
          if (used != item.size() - colon - 1) ranks = -1;
        } catch (const std::exception&) {
          ranks = -1;
        }
      }
      if (colon == std::string::npos || ranks < 1) {
        throw std::runtime_error("invalid domains spec '" + spec + "': expected NAME:RANKS,... e.g. a:2,b:2");
      }
      if (scenario.find_domain(name) == nullptr) {
        throw std::runtime_error("domains spec names '" + name + "', which scenario " +
                                 (scenario.name.empty() ? scenario.source : scenario.name) + " does not define");
      }
      if (!seen.insert(name).second) throw std::runtime_error("domain '" + name + "' appears twice in '" + spec + "'");
      placement.emplace_back(name, ranks);
    }
  }
  int total = 0;
  for (const auto& [name, ranks] : placement) {
    if (ranks == 0) continue;
    Domain d;
    d.name = name;
    d.first_rank = total;
    d.ranks = ranks;
    total += ranks;
    for (int r = 0; r < ranks; ++r) rank_domain_.push_back(static_cast<int>(domains_.size()));
    domains_.push_back(d);
  }
  if (total == 0) throw std::runtime_error("no ranks to place");
  if (!spec.empty() && n_ranks > 0 && n_ranks != total) {
    throw std::runtime_error("domains spec '" + spec + "' places " + std::to_string(total) +
                             " ranks but " + std::to_string(n_ranks) + " were requested");
  }
}

void WanSession::set_up_domain(const Scenario& scenario, Domain& d, std::vector<int>& tun_fds) {
  create_netns(d.netns);
  created_netns_.push_back(d.netns);
  in_netns(d.netns, [&] {
    // Before the TUN exists, so that wan0 inherits "no IPv6": no router
    // solicitations or DAD packets crossing the emulator.
    write_proc("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
    write_proc("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1");
    write_proc("/proc/sys/net/ipv4/tcp_congestion_control", host_cc_);
    // Windows big enough for 10 Gbit/s x 150 ms; memory is only used on demand.
    write_proc("/proc/sys/net/ipv4/tcp_rmem", "4096 131072 402653184");
    write_proc("/proc/sys/net/ipv4/tcp_wmem", "4096 65536 402653184");
    // Each run starts from a clean slate: no cached ssthresh/RTT of a previous flow.
    write_proc("/proc/sys/net/ipv4/tcp_no_metrics_save", "1");
    for (const char* path : {"/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"}) {
      try {
        write_proc(path, "402653184");  // per-namespace only on newer kernels
      } catch (const std::exception&) {
      }
    }
    tun_fds.push_back(open_tun(kTunName));
  });
  const std::string mtu = std::to_string(scenario.mtu);
  run_command({"ip", "-n", d.netns, "link", "set", "lo", "up"});
  // A long transmit queue: packets must only be dropped by the link model,
  // never because the forwarder was a little late reading.
  run_command({"ip", "-n", d.netns, "link", "set", kTunName, "mtu", mtu, "txqueuelen", "10000", "up"});
  run_command({"ip", "-n", d.netns, "addr", "add", d.addr + "/24", "dev", kTunName});
  if (options_.rps && !rps_mask_.empty()) {
    // Writing into the TUN runs the receiver's network stack in the writer's
    // context; RPS moves that work off the forwarder's CPU. /sys shows the
    // namespace's devices only when mounted inside it, hence `ip netns exec`.
    try {
      run_command({"ip", "netns", "exec", d.netns, "sh", "-c",
                   std::string("echo ") + rps_mask_ + " > /sys/class/net/" + kTunName + "/queues/rx-0/rps_cpus"});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wanem: warning: RPS not enabled in %s: %s\n", d.netns.c_str(), e.what());
    }
  }
}

void WanSession::start_emulator(const Scenario& scenario, const std::vector<int>& tun_fds, int control_fd) {
  std::vector<EmulatorPort> ports;
  for (std::size_t i = 0; i < domains_.size(); ++i) {
    EmulatorPort p;
    p.domain = domains_[i].name;
    p.tun_fd = tun_fds[i];
    p.addr = subnet_bits_ + static_cast<std::uint32_t>(i + 1);
    ports.push_back(p);
  }
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) throw_errno("pipe2");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    throw_errno("fork");
  }
  if (pid == 0) {
    // Emulator child. Own process group: a terminal's Ctrl-C goes to the
    // launcher, which tears the session down in order.
    ::close(ready[0]);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(0);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    sigprocmask(SIG_SETMASK, &stop, nullptr);
    signal(SIGPIPE, SIG_IGN);
    const int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    std::vector<int> keep(tun_fds.begin(), tun_fds.end());
    keep.push_back(control_fd);
    keep.push_back(ready[1]);
    keep.push_back(stop_fd);
    close_other_fds(keep);
    prctl(PR_SET_NAME, "geoccl-wanem");
    if (emulator_cpu_ >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(emulator_cpu_, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    int rc = 0;
    try {
      EmulatorOptions eo;
      eo.read_batch = options_.read_batch;
      eo.early_ns = options_.early_ns;
      eo.control_fd = control_fd;
      eo.stop_fd = stop_fd;
      Emulator emulator(scenario, ports, eo);
      [[maybe_unused]] ssize_t w = ::write(ready[1], "", 1);
      ::close(ready[1]);
      emulator.run();
    } catch (const std::exception& e) {
      const std::string msg = std::string("emulator failed: ") + e.what();
      [[maybe_unused]] ssize_t w = ::write(ready[1], msg.data(), msg.size());
      std::fprintf(stderr, "wanem: %s\n", msg.c_str());
      rc = 1;
    }
    // Clean up even when the launcher died without doing so.
    for (const auto& name : created_netns_) delete_netns(name.c_str());
    unlink(control_path_.c_str());
    _exit(rc);
  }
  emulator_pid_ = pid;
  ::close(ready[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(ready[0], buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    msg.append(buf, static_cast<std::size_t>(n));
    if (msg.size() == 1 && msg[0] == '\0') break;
  }
  ::close(ready[0]);
  if (msg.size() != 1 || msg[0] != '\0') {
    throw std::runtime_error(msg.empty() ? "the emulator process died during start-up" : msg);
  }
}

void WanSession::teardown() noexcept {
  // Async-signal-safe: only kill, waitpid, nanosleep, umount2, unlink.
  if (torn_down_ || getpid() != owner_pid_) return;
  torn_down_ = 1;
  if (emulator_pid_ > 0) {
    kill(emulator_pid_, SIGTERM);
    bool reaped = false;
    for (int i = 0; i < 400 && !reaped; ++i) {  // up to 2 s
      const pid_t r = waitpid(emulator_pid_, nullptr, WNOHANG);
      if (r == emulator_pid_ || (r < 0 && errno != EINTR)) {
        reaped = true;
      } else {
        const timespec ts{0, 5'000'000};
        nanosleep(&ts, nullptr);
      }
    }
    if (!reaped) {
      kill(emulator_pid_, SIGKILL);
      while (waitpid(emulator_pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  for (const auto& name : created_netns_) delete_netns(name.c_str());
  if (!control_path_.empty()) unlink(control_path_.c_str());
}

const WanSession::Domain& WanSession::domain_at(int rank) const {
  if (rank < 0 || rank >= n_ranks()) {
    throw std::out_of_range("rank " + std::to_string(rank) + " out of range [0, " + std::to_string(n_ranks()) + ")");
  }
  return domains_[static_cast<std::size_t>(rank_domain_[static_cast<std::size_t>(rank)])];
}

std::string WanSession::domain_of_rank(int rank) const { return domain_at(rank).name; }
std::string WanSession::netns_of_rank(int rank) const { return domain_at(rank).netns; }
std::string WanSession::addr_of_rank(int rank) const { return domain_at(rank).addr; }
std::string WanSession::master_addr() const { return domain_at(0).addr; }

void WanSession::enter_rank_namespace(int rank) const {
  if (rank < 0 || rank >= n_ranks()) throw std::out_of_range("rank out of range");
  const std::string& path = netns_paths_[static_cast<std::size_t>(rank_domain_[static_cast<std::size_t>(rank)])];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path);
  const int rc = setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::system_error(err, std::generic_category(), "cannot enter " + path);
}

std::string WanSession::control(const std::string& command) const {
  if (torn_down_) throw std::runtime_error("the WAN session has been torn down");
  return control_request(control_path_, command);
}

std::string WanSession::stats() const {
  if (torn_down_) return final_stats_;
  return control("stats");
}

std::vector<std::string> WanSession::sweep_stale_namespaces() {
  std::vector<std::string> removed;
  for (const auto& name : list_netns()) {
    if (name.rfind(kPrefix, 0) != 0) continue;
    const pid_t pid = leading_pid(name.substr(std::strlen(kPrefix)));
    if (pid <= 0 || pid_alive(pid)) continue;
    if (delete_netns(name.c_str())) removed.push_back(name);
  }
  if (DIR* dir = opendir(kSocketDir)) {
    while (const dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name.rfind(kSocketPrefix, 0) != 0) continue;
      const pid_t pid = leading_pid(name.substr(std::strlen(kSocketPrefix)));
      if (pid > 0 && !pid_alive(pid)) unlink((std::string(kSocketDir) + name).c_str());
    }
    closedir(dir);
  }
  return removed;
}

}  // namespace geoccl::testbed
