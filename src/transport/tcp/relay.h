// Relay: this rank carries connections between two other ranks that cannot reach each other
// directly (a firewall, a cut path; protocol/handshake.h, "Relays").
//
// A requester's socket arrives here after its relay request (a Hello with
// kHelloFlagRelayRequest) passed the usual checks. The relay connects to the target rank's
// published address, answers the requester (kAccepted or kUnreachable), and from then on moves
// bytes both ways with splice(2), through a pipe per direction, without reading them: the two
// ends run their own handshake, authentication and frame sealing through the tunnel. Each tunnel
// has its own thread (one per relayed stream: a pair's control and data streams each have one).
// A tunnel ends when either side closes or fails; the other side's socket is then shut down the
// same way, so the two ends see their stream break and re-establish it (stream resume). It also
// ends when one of its sockets stalls (stall.h, with the relay's sockets to that rank as the
// path): the relay acknowledges what the requester sends, so a cut between the relay and the
// target is seen by neither end, whose streams would wait on a full tunnel for as long as TCP
// retries; ended, the streams re-establish, directly or through another relay.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/handshake.h"

namespace geoccl::transport::tcp {

class Relay {
 public:
  struct Tunnel;
  using Clock = std::chrono::steady_clock;
  // `tune`: applied to each socket the relay opens to a target, before connect().
  explicit Relay(std::function<void(int)> tune);
  // Waits up to `linger` for the open tunnels to end by themselves (their two ends close them),
  // then closes the rest and joins every thread.
  ~Relay();
  void set_linger(std::chrono::milliseconds linger) { linger_ = linger; }
  // The stall detector's timeout (TcpOptions::stall_timeout); 0: tunnels never end for a stall.
  void set_stall_timeout(std::chrono::milliseconds timeout) { stall_timeout_ = timeout; }

  // Takes `fd`, the requester's socket (requester rank `from`), connects it to `to`'s address
  // `target` ("host:port") within `connect_timeout`, answers the requester with `accepted` or
  // `unreachable`, then forwards until either side closes. `target` empty: unknown, answered
  // kUnreachable.
  void serve(int fd, int from, int to, const std::string& target, std::chrono::milliseconds connect_timeout,
             const std::array<uint8_t, protocol::kReplySize>& accepted,
             const std::array<uint8_t, protocol::kReplySize>& unreachable);

  // The ranks whose path from this rank its device finds down now (TcpDevice::tick; empty: none).
  // A tunnel with one of them at an end ends on its next stall check, even with nothing of its
  // own in flight: a tunnel whose live end only receives would otherwise wait on the cut leg for
  // as long as TCP retries, and its live end re-establishes the stream another way.
  void set_paths_down(std::vector<int> ranks);

  // Tunnels served so far and open now, and bytes forwarded (both directions) through tunnels
  // with `rank` at one end (-1: every tunnel).
  struct Counters {
    uint64_t tunnels = 0, open = 0, refused = 0, bytes = 0;
    uint64_t stalled = 0;  // ended because a socket stalled or its device found a path down
  };
  Counters counters(int rank = -1) const;
  // The local ports of the open tunnels' sockets to `to` (tests cut them).
  std::vector<uint16_t> onward_ports(int to) const;

 private:
  void run(Tunnel& t, std::string target, std::chrono::milliseconds connect_timeout,
           std::array<uint8_t, protocol::kReplySize> accepted,
           std::array<uint8_t, protocol::kReplySize> unreachable);

  // Whether socket `fd` of a tunnel, to `rank`, stalled by `now`; `idle_seen` is the socket's
  // (stall_sample). Every sample also notes when a relay socket to `rank` was last acknowledged.
  bool stalled(int rank, int fd, Clock::time_point now, Clock::time_point& idle_seen);

  const std::function<void(int)> tune_;
  std::chrono::milliseconds linger_{10000};
  std::chrono::milliseconds stall_timeout_{0};
  // The first of `a`, `b` whose path set_paths_down said is down, or -1.
  int path_down(int a, int b) const;

  mutable std::mutex life_mu_;
  std::map<int, Clock::time_point> acked_;  // per rank: the latest acknowledgement on a relay socket
  std::vector<int> down_;                   // set_paths_down
  int stop_fd_ = -1;  // eventfd: readable once the relay stops
  mutable std::mutex mu_;
  std::list<Tunnel> tunnels_;
};

}  // namespace geoccl::transport::tcp
