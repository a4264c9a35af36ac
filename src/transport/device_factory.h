// The devices a group uses, made from the transport choice (GEOCCL_TRANSPORT) and each
// transport's options. The only place above the device folders that names a transport; the
// router sees the result as Devices.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/group.h"
#include "transport/quic/device.h"
#include "transport/scavenger.h"
#include "transport/shm/device.h"
#include "transport/tcp/device.h"

namespace geoccl::transport {

// GEOCCL_TRANSPORT parsed: the device name for each path class.
struct PathChoice {
  std::string host = "shm";
  std::string remote = "tcp";
  // "auto", "tcp" (everywhere), "quic" (everywhere: tests on one host), or
  // "host=shm|tcp|quic,remote=tcp|quic|auto" (either key may be left out). Throws
  // Error(kInvalidArgument) naming the bad part.
  static PathChoice parse(const std::string& s);
};

// What make_devices builds from (the api resolves the configuration into it).
struct DeviceOptions {
  PathChoice choice;
  // Shared memory does not seal frames: with a group secret, same-host peers take TCP unless
  // the host is trusted (GEOCCL_SHM_TRUST_HOST).
  bool shm_trust_host = false;
  tcp::TcpOptions tcp;  // both classes' (the bulk class's unsent bytes kept smaller)
  ScavengerOptions bulk;
  quic::QuicOptions quic;
  shm::ShmOptions shm;
};

struct DeviceSet {
  // One priority class's devices, and which of them carries which peers: `host` a peer on this
  // host that it reaches (Device::reaches), `remote` every other peer. Both ends of a pair see
  // the same addresses and the same choice, so they pick alike.
  struct Channel {
    std::vector<std::unique_ptr<Device>> devices;
    Device* host = nullptr;
    Device* remote = nullptr;
  };
  std::array<Channel, kPriorityClasses> channels;
  // remote=auto: the transport decider's second candidate on the gradient class, connected to
  // the remote peers best effort once the others are (a peer it cannot reach stays on `remote`);
  // null otherwise.
  Device* candidate = nullptr;
};

// The gradient class gets TCP, QUIC where the choice names it, and shared memory for peers on
// this host (not with a group secret on an untrusted host); the bulk class the same but QUIC,
// with its TCP device yielding to the gradient class's. Throws
// Error(kIo) when a device cannot listen.
DeviceSet make_devices(Group& group, const DeviceOptions& o, const std::string& bind_addr);

}  // namespace geoccl::transport
