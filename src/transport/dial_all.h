// Dialling many peers at once: a device's connect() hands each lower peer to one of a few threads,
// so that set-up waits for the slowest handshakes, not for the sum of them (a rank of a 128-rank
// job dials 127 peers, each handshake a few round trips through a busy peer's loop).
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "transport/device.h"

namespace geoccl::transport {

// The most handshakes one connect() runs at once.
inline constexpr size_t kDialsAtOnce = 16;

// Runs dial(peer, stop) for every peer of `peers`, on up to kDialsAtOnce threads, while the calling
// thread runs `poll` (about every 100 ms; Device::Poll). The first exception, from a dial or from
// poll, sets `stop` (dial returns early when it sees it), and is rethrown once every thread has
// ended; a dial's exception after one last poll, whose own error (another rank's reason) wins.
void dial_all(const std::vector<int>& peers, const Device::Poll& poll,
              const std::function<void(int peer, const std::atomic<bool>& stop)>& dial);

}  // namespace geoccl::transport
