// WanSession: brings up the WAN test bed for one launcher run.
//
// For each domain with ranks it creates a network namespace holding a TUN
// device "wan0" with the domain's address 10.X.Y.i/24; the whole /24 is routed
// into the TUN, so traffic to other domains crosses the emulator while traffic
// inside a domain stays on the namespace's loopback. The emulator runs in a
// child process (forked, not exec'ed) so that it has a core's worth of CPU of
// its own, its CPU time can be read from /proc, and teardown() is
// async-signal-safe: kill + waitpid + umount + unlink.
//
// Names are unique per run: namespaces are called geoccl-<pid>-<seq>-<domain>,
// addresses 10.X.Y.0/24 with X.Y derived from pid and seq. Namespaces left
// behind by dead runs (SIGKILL) are removed by sweep_stale_namespaces(),
// which the constructor calls.
//
// Requirements: root (CAP_NET_ADMIN + CAP_SYS_ADMIN), /dev/net/tun, `ip` from
// iproute2. Construct from a thread that outlives the session (the emulator
// child is bound to it with PR_SET_PDEATHSIG) and preferably before starting
// other threads (the child is forked without exec).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "scenario.h"

namespace geoccl::testbed {

// Knobs for experiments; the defaults are what the fidelity figures in
// docs/testbed.md were measured with.
struct WanSessionOptions {
  bool pin_emulator = true;      // pin the forwarder to the last CPU ...
  bool rps = true;               // ... and steer TUN receive work to the others
  unsigned read_batch = 64;      // packets per TUN read burst
  long long early_ns = 50'000;   // batch deliveries due within this window
};

class WanSession {
 public:
  // domains_spec: "a:2,b:2,c:2" places ranks 0-1 in a, 2-3 in b, 4-5 in c.
  // Empty: the scenario's [domains] and their rank counts; if n_ranks is then
  // given (> 0) and differs, n_ranks is spread over the scenario's domains in
  // order (the first n % D domains get one more). When both are given they
  // must agree. host_cc_override: "" keeps the scenario's host_cc.
  // Throws std::runtime_error (after cleaning up what it created).
  WanSession(const Scenario& scenario, int n_ranks, const std::string& domains_spec,
             const std::string& host_cc_override, const WanSessionOptions& options = {});
  ~WanSession();
  WanSession(const WanSession&) = delete;
  WanSession& operator=(const WanSession&) = delete;

  int n_ranks() const { return static_cast<int>(rank_domain_.size()); }
  std::string domain_of_rank(int rank) const;
  std::string netns_of_rank(int rank) const;  // for `ip netns exec NAME ...`
  std::string addr_of_rank(int rank) const;   // IPv4 of the rank's domain
  std::string master_addr() const;            // rank 0's domain address

  // setns() into the rank's namespace. Meant for a forked child before exec;
  // uses only async-signal-safe calls. Throws std::system_error on failure.
  void enter_rank_namespace(int rank) const;

  std::string control_socket() const { return control_path_; }
  // Sends one control command (see control_command.h) and returns the reply
  // text; throws std::runtime_error if the emulator rejects it.
  std::string control(const std::string& command) const;
  // Per-link counters; after teardown, the counters captured at teardown.
  std::string stats() const;

  // Domains in rank order, with their namespace and address.
  struct Domain {
    std::string name;
    std::string netns;
    std::string addr;
    int first_rank = 0;
    int ranks = 0;
  };
  const std::vector<Domain>& domains() const { return domains_; }
  const std::string& host_cc() const { return host_cc_; }
  pid_t emulator_pid() const { return emulator_pid_; }

  // Stops the emulator, removes namespaces (and with them the TUN devices)
  // and the control socket. Idempotent and async-signal-safe, so a launcher
  // may call it from its SIGINT/SIGTERM handler. The destructor calls it
  // after capturing final stats.
  void teardown() noexcept;

  // Removes geoccl-<pid>-* namespaces and control sockets whose pid is no
  // longer alive. Returns the names removed.
  static std::vector<std::string> sweep_stale_namespaces();

 private:
  void place_ranks(const Scenario& scenario, int n_ranks, const std::string& spec);
  void set_up_domain(const Scenario& scenario, Domain& domain, std::vector<int>& tun_fds);
  void start_emulator(const Scenario& scenario, const std::vector<int>& tun_fds, int control_fd);
  const Domain& domain_at(int rank) const;

  WanSessionOptions options_;
  std::string prefix_;  // geoccl-<pid>-<seq>-
  std::string host_cc_;
  std::string control_path_;
  std::string subnet_;  // "10.X.Y."
  std::uint32_t subnet_bits_ = 0;  // 10.X.Y.0, host byte order
  pid_t owner_pid_ = -1;  // forked copies of the session (rank children) must not tear down
  std::vector<Domain> domains_;
  std::vector<int> rank_domain_;       // rank -> index in domains_
  std::vector<std::string> netns_paths_;  // /run/netns/..., precomputed for setns
  std::vector<std::string> created_netns_;  // reserved up front: teardown may run in a signal handler
  int emulator_cpu_ = -1;
  std::string rps_mask_;
  pid_t emulator_pid_ = -1;
  volatile int torn_down_ = 0;
  mutable std::string final_stats_;
};

}  // namespace geoccl::testbed
