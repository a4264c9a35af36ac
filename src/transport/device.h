// Device: what every transport implements (tcp/, shm/, quic/), one folder each with the same
// file set:
//   device.{h,cc}      this interface: listen, address, connect/accept with the handshake,
//                      the data path of the peers it serves, shutdown
//   connection.{h,cc}  one peer pair's link: frame I/O on the device's fds
//   address.{h,cc}     the opaque bytes published in the store, and who can use them
// plus what is the transport's own (tcp/socket_util, tcp/stripe, shm/ring, shm/segment); the
// generic socket helpers every layer uses are runtime/socket.h.
//
// The Router (router.h) builds every device, publishes their addresses (address_card.h), picks
// one device per peer and hands it the peers it serves; collectives never see a device. Per-peer protocol state
// (frame numbers, the receive window, acknowledgements, kept copies) is protocol::PeerSession,
// which each device's connection drives.
//
// Threads: send(), recv(), set_wan_peer(), stats() and shutdown() may be called from any thread
// but the loop's (sends and receives are handed to the loop thread in posting order); everything
// the device does with its fds happens on the group's loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "transport/link_stats.h"
#include "protocol/frame.h"
#include "transport/group.h"
#include "transport/transport.h"

namespace geoccl::transport {

using Clock = std::chrono::steady_clock;

// ---- Optional capabilities. A device that has one implements its interface and returns itself
// from the matching Device accessor (null: it has not); the router uses a capability only where
// a device returns it, as NCCL's net plugins leave out what they cannot do.

// Receives the next data frame from `peer` and combines it element-wise into `dst`
// (dst = dst op payload, core::reduce_into order) instead of copying it: the payload must be
// exactly dst.size() bytes. Straight from where the bytes arrive (shm: the shared segment), which
// saves the staging copy a caller without it makes.
class ReduceOnReceive {
 public:
  virtual RequestPtr recv_reduce(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                                 DataType dtype, ReduceOp op) = 0;

 protected:
  ~ReduceOnReceive() = default;
};

// Transport::recv_forward between two peers this device serves: the received frame goes on to
// the other peer as it arrives, reduced with dst or copied to it on the way (shm: from one
// pair's ring straight into the other's, a ring step's receive, reduce and send in one pass).
class ForwardOnReceive {
 public:
  virtual Transport::Forwarded recv_forward(int from, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                                            int to, const protocol::FrameHeader& h,
                                            const Transport::Forwarding& how) = 0;

 protected:
  ~ForwardOnReceive() = default;
};

// Paths tuned for the WAN (TCP: striped data streams, socket options, stream resume).
class WanTuning {
 public:
  // After topology discovery: `peer` is in another domain (a WAN path) or in this rank's own
  // (a LAN path). Both ends of a pair decide alike, as every rank knows the same domains.
  virtual void set_wan_peer(int peer, bool wan) = 0;
  // The same for many peers at once (`wan[i]` for `peers[i]`): one trip to the loop thread
  // instead of one per peer, which counts at hundreds of ranks.
  virtual void set_wan_peers(std::span<const int> peers, std::span<const char> wan) {
    for (size_t i = 0; i < peers.size(); ++i) set_wan_peer(peers[i], wan[i] != 0);
  }
  // Waits until what set_wan_peer started for the WAN peers is in place (TCP: their striped data
  // streams are open), or `deadline`: what the path measurements after it take for granted.
  virtual void await_wan_streams(Clock::time_point deadline) = 0;

 protected:
  ~WanTuning() = default;
};

// The path to a peer as the device's own statistics show it now, for re-planning while a job
// runs (collectives/path_monitor.h): the least smoothed RTT of its connections, and the delivery
// rate of the samples that were not application-limited (0: none, or not measured).
struct PathReading {
  double srtt_ms = 0;
  double delivery_mbps = 0;
};
class PathReader {
 public:
  virtual PathReading path_reading(int peer) const = 0;

 protected:
  ~PathReader() = default;
};

// A two-hop path for bulk data (collectives/detour.h), called on both ends of the pair with the
// same figures: frames to `peer` of at least `min_bytes` go through rank `via` (a relay), the
// smaller ones stay direct. Returns whether the device does it (TCP: the dialling end moves its
// data streams but the first onto the relay; not for a pair that a relay carries already).
class TwoHopPaths {
 public:
  virtual bool set_two_hop(int peer, int via, size_t min_bytes) = 0;

 protected:
  ~TwoHopPaths() = default;
};

// What a device can do, as its capability accessors say (logs, tests).
struct DeviceProperties {
  bool two_hop = false;             // TwoHopPaths
  bool reduces_on_receive = false;  // ReduceOnReceive
  bool forwards_on_receive = false;  // ForwardOnReceive
  bool reads_paths = false;         // PathReader
  bool wan_tuning = false;          // WanTuning
};

class Device {
 public:
  using Clock = transport::Clock;
  using PathReading = transport::PathReading;
  // The address `peer` published for this device (blocks on the store until it is there).
  using AddressOf = std::function<std::vector<uint8_t>(int peer)>;
  // Runs now and then (about every 100 ms) while connect() waits for peers; throws to abandon
  // the setup (another rank could not join the group, and said why).
  using Poll = std::function<void()>;

  virtual ~Device() = default;
  // "tcp", "shm": the device's name in GEOCCL_TRANSPORT, store keys, logs and LinkStats.
  virtual const char* name() const = 0;

  // Its optional capabilities (above); null where it has none.
  virtual ReduceOnReceive* reduce_on_receive() { return nullptr; }
  virtual ForwardOnReceive* forward_on_receive() { return nullptr; }
  virtual WanTuning* wan_tuning() { return nullptr; }
  virtual const PathReader* path_reader() const { return nullptr; }
  virtual TwoHopPaths* two_hop_paths() { return nullptr; }
  DeviceProperties properties() const {
    auto& self = const_cast<Device&>(*this);
    return {self.two_hop_paths() != nullptr, self.reduce_on_receive() != nullptr,
            self.forward_on_receive() != nullptr, path_reader() != nullptr, self.wan_tuning() != nullptr};
  }

  // Opaque bytes a peer needs to reach this rank through this device.
  virtual std::vector<uint8_t> address() const = 0;
  // Whether this device can carry frames to a peer that published `peer_address` (shm: the
  // same host; tcp: always).
  virtual bool reaches(std::span<const uint8_t> peer_address) const = 0;
  // Sets up the links to `peers` (sorted global ranks; the same pairs on both ends): dials the
  // lower ranks, waits for the higher ones, each with the authenticated handshake. Throws
  // Error(kTimeout) naming the missing ranks, Error(kProtocol) when a peer rejects us (with its
  // reason), Error(kIo).
  virtual void connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
                       Clock::time_point deadline) = 0;
  // Whether the link to `peer` works now. A device whose connect() fails unless every peer is
  // connected answers true; one connected best effort (QUIC beside TCP) answers per peer.
  virtual bool connected_to(int /*peer*/) const { return true; }

  // Transport::send / recv for a peer this device serves.
  virtual RequestPtr send(int peer, const protocol::FrameHeader& h,
                          std::span<const uint8_t> payload) = 0;
  virtual RequestPtr recv(int peer, const protocol::FrameHeader& expect,
                          std::span<uint8_t> dst) = 0;
  // Loop thread: calls Group::early_frame for every data frame waiting for its receive (a new
  // operation began).
  virtual void recheck_early_frames() = 0;

  // ---- Liveness (transport/liveness_monitor.h), loop thread. The device reports everything it
  // receives from a peer to Group::heard, and heartbeats to Group::heartbeat.
  // Sends `peer` a heartbeat frame with `payload` (protocol/liveness.h), on its control path.
  virtual void send_heartbeat(int peer, std::span<const uint8_t> payload) = 0;
  // Whether `peer`'s host acknowledges what this rank sends it (TCP: the control connection has
  // nothing unacknowledged, or an acknowledgement came within `recent`; shm: the same host).
  virtual bool host_answers(int peer, std::chrono::milliseconds recent) const = 0;
  // Runs every liveness tick: a device that re-establishes links checks their progress.
  virtual void tick(Clock::time_point /*now*/) {}

  // Fills the device's part of `ps` (ps->peer is set): counters, and the device's own detail.
  virtual void stats(LinkStats* ps) const = 0;
  // Says goodbye to every peer and closes, with a bounded wait for what is queued to leave.
  virtual void shutdown() = 0;
};

// Calls a Device::Poll at most every 100 ms: what a connect() loop that waits in small steps
// calls each time round.
class ThrottledPoll {
 public:
  explicit ThrottledPoll(const Device::Poll& poll) : poll_(poll) {}
  void operator()() {
    if (!poll_ || Device::Clock::now() - last_ < std::chrono::milliseconds(100)) return;
    last_ = Device::Clock::now();
    poll_();
  }

 private:
  const Device::Poll& poll_;
  Device::Clock::time_point last_ = Device::Clock::now();
};

}  // namespace geoccl::transport
