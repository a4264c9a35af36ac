// Router: the group's Transport. It has the devices made (device_factory.h), publishes the
// devices' addresses in the store on one card (address_card.h), chooses for every peer the
// device that carries its frames (by path class, GEOCCL_TRANSPORT), hands each device the peers
// it serves, and then forwards every send and receive to the peer's device. The devices share one Group: one identity, one first
// failure, one early-frame check, one loop thread.
//
// Channels: every priority class (geoccl::Priority; the frame header's `channel`) has a device
// set of its own: its own connections (rings), frame numbering, acknowledgements and early-frame
// check, so a frame of one class never waits behind a frame of another in a socket, a ring or a
// receive window, and operations of different classes run concurrently. The bulk class's TCP
// device is a scavenger (tcp/scavenger.h): it yields to the gradient class's WAN traffic and
// backs off when the path's queueing delay grows.
//
// Path classes: "host" (the peer runs on this host: same boot id and network namespace, which
// the shm device checks with a token in shared memory too) and "remote" (anything else). The
// choice is a pure function of both ranks' published addresses and the group parameters, so
// both ends of a pair choose the same device.
#pragma once

#include <array>
#include <chrono>
#include <atomic>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/group.h"
#include "transport/transport.h"

namespace geoccl::transport {

class LivenessMonitor;
struct DeviceOptions;  // device_factory.h

// What the router itself needs beyond the devices.
struct RouterOptions {
  // remote=auto: how long the decider's second candidate may take to connect (GEOCCL's
  // quic_connect_ms).
  std::chrono::milliseconds candidate_budget{8000};
  protocol::LivenessOptions liveness;  // interval 0: no heartbeats (GEOCCL_HEARTBEAT_MS=0)
};

class Router final : public Transport {
 public:
  using Clock = std::chrono::steady_clock;
  // Store access for setup: publish(key, bytes) and lookup(keys) (every key's value in the order
  // asked; blocks until all of them exist or the connect deadline passes, then throws
  // Error(kTimeout)). Keys are relative to the group.
  using Publish = std::function<void(const std::string& key, const std::vector<uint8_t>& value)>;
  using Lookup = std::function<std::vector<std::vector<uint8_t>>(const std::vector<std::string>& keys)>;
  // Throws when the setup must stop (Device::Poll).
  using Poll = Device::Poll;

  // Has the devices made (listening on `bind_addr`), publishes their addresses, chooses a device
  // per peer and connects every device to its peers by `deadline`. Throws
  // Error(kInvalidArgument / kTimeout / kProtocol / kIo).
  Router(Group& group, const DeviceOptions& devices, const RouterOptions& options, const std::string& bind_addr,
         const Publish& publish, const Lookup& lookup, const Poll& poll, Clock::time_point deadline);
  // Shuts every device down (goodbyes, bounded wait), then closes.
  ~Router() override;

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  RequestPtr send(int peer, const protocol::FrameHeader& h, std::span<const uint8_t> payload) override;
  RequestPtr recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) override;
  RequestPtr recv_reduce(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                         DataType dtype, ReduceOp op) override;
  Forwarded recv_forward(int from, const protocol::FrameHeader& expect, std::span<uint8_t> dst, int to,
                         const protocol::FrameHeader& h, const Forwarding& how) override;
  bool forwards(int from, int to, uint8_t channel) const override;
  void begin_operation(const protocol::FrameHeader& h) override;
  void abort(ErrorCode code, const std::string& message) override;
  std::optional<Failure> failure() const override;
  std::vector<LinkStats> stats() const override;
  // The gradient class's device's reading of the path to `peer` (Device::path_reading).
  PathReading path_reading(int peer) const {
    const PathReader* r = of(peer, 0).path_reader();
    return r ? r->path_reading(peer) : PathReading{};
  }

  // A receive from any peer waits on `channel` (on) or is done (off): Group::watch_early_messages,
  // with the frames already waiting rechecked when it starts.
  void watch_early_messages(uint8_t channel, bool on);

  // After topology discovery: which peers are across a WAN (another domain), by rank (this
  // rank's own entry is ignored).
  void set_wan_peers(const std::vector<char>& wan);
  // Until the links set_wan_peer asked for are in place on every device (Device::await_wan_streams).
  void await_wan_streams(Clock::time_point deadline);
  // After the path probe: bulk frames to `peer` take a two-hop path through rank `via`, on every
  // priority class's device that can (Device::set_two_hop); whether the gradient class's does.
  bool set_two_hop(int peer, int via, size_t min_bytes);
  // After topology discovery: the domain of every rank (the failure detector's witnesses).
  void set_domains(std::vector<int> domain_of, std::vector<std::string> names);

  // ---- The protocol decider (GEOCCL_TRANSPORT remote=auto): TCP and QUIC are both connected to
  // the peers on other hosts (QUIC best effort: a peer it cannot reach, e.g. with UDP blocked,
  // stays on TCP with a warning) and a start-up probe chooses per pair of domains.
  // Whether the decider runs: remote=auto (DeviceSet::candidate).
  bool deciding() const { return candidate_ != nullptr; }
  // The candidates, in order: the remote path class's device first (TCP: it wins ties).
  const std::vector<std::string>& candidates() const { return candidates_; }
  // Whether this rank's device `name` has a working link to `peer`.
  bool connected(int peer, const std::string& name) const;
  // The gradient class's frames to `peer` go on device `name` from now on; `why` is reported in
  // LinkStats::choice. The caller makes sure no frame of the class is in flight to or
  // from the peer (both ends switch at the same operation boundary).
  void use(int peer, const std::string& name, const std::string& why = "");

 private:
  struct Channel {
    std::vector<std::unique_ptr<Device>> devices;
    // Null for this rank. Atomic: the protocol decider switches a peer's device (use()) while
    // statistics are read on other threads.
    std::vector<std::atomic<Device*>> by_peer;
  };
  // The device of `peer` on channel `channel` (a header's channel field: checked).
  Device& of(int peer, uint8_t channel) const;
  void close_devices();

  Group& group_;
  std::array<Channel, kPriorityClasses> channels_;
  Device* candidate_ = nullptr;  // the decider's second candidate (DeviceSet::candidate)
  std::vector<std::string> candidates_;
  mutable std::mutex why_mu_;
  std::vector<std::string> why_;  // by peer: the decider's reason
  // Heartbeats and the failure detector (GEOCCL_HEARTBEAT_MS > 0); goes before the devices.
  std::unique_ptr<LivenessMonitor> liveness_;
};

}  // namespace geoccl::transport
