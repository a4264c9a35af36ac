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
// same way, so the two ends see their stream break and re-establish it (stream resume).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

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

  // Takes `fd`, the requester's socket (requester rank `from`), connects it to `to`'s address
  // `target` ("host:port") within `connect_timeout`, answers the requester with `accepted` or
  // `unreachable`, then forwards until either side closes. `target` empty: unknown, answered
  // kUnreachable.
  void serve(int fd, int from, int to, const std::string& target, std::chrono::milliseconds connect_timeout,
             const std::array<uint8_t, protocol::kReplySize>& accepted,
             const std::array<uint8_t, protocol::kReplySize>& unreachable);

  // Tunnels served so far and open now, and bytes forwarded (both directions) through tunnels
  // with `rank` at one end (-1: every tunnel).
  struct Counters {
    uint64_t tunnels = 0, open = 0, refused = 0, bytes = 0;
  };
  Counters counters(int rank = -1) const;

 private:
  void run(Tunnel& t, std::string target, std::chrono::milliseconds connect_timeout,
           std::array<uint8_t, protocol::kReplySize> accepted,
           std::array<uint8_t, protocol::kReplySize> unreachable);

  const std::function<void(int)> tune_;
  std::chrono::milliseconds linger_{10000};
  int stop_fd_ = -1;  // eventfd: readable once the relay stops
  mutable std::mutex mu_;
  std::list<Tunnel> tunnels_;
};

}  // namespace geoccl::transport::tcp
