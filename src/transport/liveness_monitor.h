// LivenessMonitor: drives the failure detector (protocol/liveness.h) on the group's loop thread.
// Every tick (a quarter of the heartbeat interval, at most 250 ms) it lets every device check
// the progress of its links (Device::tick: TCP re-dials a stalled connection), samples whether
// each peer's host answers, runs the detector and acts on what it decides: a warning line, a
// recovery line, or the group's failure (told to every peer). Every heartbeat interval it sends
// each watched peer (protocol::watched_peers) a heartbeat over the device that carries the peer's
// gradient class.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "protocol/liveness.h"
#include "runtime/event_loop.h"
#include "transport/device.h"
#include "transport/group.h"

namespace geoccl::transport {

class LivenessMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // `carrier[p]`: the device that sends heartbeats to p (null for this rank); `devices`: every
  // device of every class (their tick()). Starts ticking at once; call after the devices connected.
  LivenessMonitor(Group& group, const protocol::LivenessOptions& o, std::vector<Device*> carrier,
                  std::vector<Device*> devices);
  // Stops ticking (waits for a tick in progress). Before the devices go.
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  // After topology discovery (any thread): the domain of every rank.
  void set_domains(std::vector<int> domain_of, std::vector<std::string> names);
  // The detector's view of `peer` (any thread).
  protocol::Liveness::State state(int peer) const;

 private:
  void tick();

  Group& group_;
  const protocol::LivenessOptions options_;
  std::vector<Device*> carrier_;
  std::vector<Device*> devices_;
  protocol::Liveness liveness_;  // loop thread
  Clock::time_point next_heartbeat_;
  runtime::EventLoop::TimerId timer_ = 0;
  bool stopped_ = false;
};

}  // namespace geoccl::transport
