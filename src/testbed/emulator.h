// The packet forwarder behind `geoccl wanem`: one thread, one epoll loop.
//
// Every domain namespace routes the other domains' addresses into its TUN
// device. The forwarder reads those packets (non-blocking, in batches), finds
// the destination domain from the IPv4 destination address, runs the packet
// through the LinkModel of that (source, destination) pair and, when the
// model's delivery time comes, writes it into the destination's TUN device.
// A nanosecond timerfd wakes the loop for the earliest delivery; packets due
// within `early_ns` are delivered together to amortize wake-ups.
//
// The same loop serves the control socket and fires scheduled events, so
// link changes never race with forwarding. Each link also has an on-path
// adversary (link_adversary.h), idle until a command arms it, that sees and
// may change every packet the link queues.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffer_pool.h"
#include "control_command.h"
#include "link_adversary.h"
#include "link_model.h"
#include "scenario.h"

namespace geoccl::testbed {

// A domain's attachment to the forwarder.
struct EmulatorPort {
  std::string domain;
  int tun_fd = -1;            // non-blocking TUN fd opened in the domain's namespace
  std::uint32_t addr = 0;     // the domain's IPv4 address, host byte order
};

struct EmulatorOptions {
  std::uint32_t read_batch = 64;     // packets read from one TUN per wake-up
  std::int64_t early_ns = 50'000;    // deliver packets this much early, batched
  std::uint32_t pool_slots = 0;      // 0: sized from the scenario
  int control_fd = -1;               // listening Unix socket, or -1
  int stop_fd = -1;                  // readable = stop (signalfd, eventfd), or -1
};

class Emulator {
 public:
  // ports[i].addr must all lie in one /24 and end in .1, .2, ... in port
  // order (that is how WanSession assigns them), which makes routing an
  // array lookup.
  Emulator(const Scenario& scenario, std::vector<EmulatorPort> ports, EmulatorOptions options);
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // Forwards until stop_fd becomes readable. Throws on fatal errors.
  void run();

  // Applies a control command at time `now_ns` (CLOCK_MONOTONIC) and returns
  // the reply text. Throws std::runtime_error for a command that matches no link.
  std::string execute(const ControlCommand& command, std::int64_t now_ns);
  std::string stats_text() const;
  std::string links_text() const;

 private:
  struct Client;
  LinkModel* link(std::size_t from, std::size_t to) { return links_[from * ports_.size() + to].get(); }
  void read_port(std::size_t src);
  void deliver_due(std::int64_t now);
  void fire_events(std::int64_t now);
  std::int64_t next_deadline() const;
  void arm_timer(std::int64_t deadline);
  void accept_clients();
  void serve_client(Client& client);
  void close_client(int fd);

  Scenario scenario_;
  std::vector<EmulatorPort> ports_;
  EmulatorOptions options_;
  std::uint32_t subnet_ = 0;  // host order, /24
  std::vector<std::unique_ptr<LinkModel>> links_;   // [from * n + to], null on the diagonal
  std::vector<LinkAdversary> adversaries_;          // [from * n + to], the same indices
  std::vector<std::unique_ptr<Bottleneck>> uplinks_;  // per source domain, null = none
  std::unique_ptr<BufferPool> pool_;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  std::int64_t armed_at_ = -1;
  std::int64_t start_ns_ = 0;
  std::size_t next_event_ = 0;
  std::uint64_t unroutable_ = 0;
  std::uint64_t pool_exhausted_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;
};

std::int64_t monotonic_ns();

}  // namespace geoccl::testbed
