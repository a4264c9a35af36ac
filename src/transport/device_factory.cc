#include "transport/device_factory.h"

#include <algorithm>

#include "core/logging.h"
#include "geoccl/error.h"

namespace geoccl::transport {

namespace {

constexpr uint64_t kBulkNotsentLowat = 128 << 10;

bool known_device(const std::string& name, bool host_class) {
  return name == "tcp" || name == "quic" || (host_class ? name == "shm" : name == "auto");
}

}  // namespace

PathChoice PathChoice::parse(const std::string& s) {
  PathChoice c;
  if (s == "auto") return c;
  if (s == "tcp") {
    c.host = "tcp";
    return c;
  }
  if (s == "quic") {
    c.host = c.remote = "quic";
    return c;
  }
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t end = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "host" && known_device(value, true))
      c.host = value;
    else if (key == "remote" && known_device(value, false))
      c.remote = value;
    else
      throw Error(ErrorCode::kInvalidArgument,
                  "GEOCCL_TRANSPORT: '" + item + "' is not host=shm|tcp|quic or remote=tcp|quic|auto (in '" + s + "')");
    pos = end + 1;
  }
  return c;
}

DeviceSet make_devices(Group& group, const DeviceOptions& o, const std::string& bind_addr) {
  DeviceSet set;
  PathChoice choice = o.choice;
  if (group.security()) {
    // Shared memory authenticates its handshake with the secret but does not seal frames (the
    // segment's memfd reaches only the authenticated peer, yet root and ptrace on the host see
    // it): it is used only where the host is trusted explicitly (docs/security.md). TCP
    // authenticates every connection with the secret and seals every frame. QUIC's TLS 1.3 seals
    // every packet and both ends present the certificate whose fingerprint the peer published in
    // the store; with a secret the store's values are sealed, so that fingerprint comes from a
    // rank that holds the secret.
    if (choice.host == "shm" && !o.shm_trust_host) {
      GEOCCL_LOG(kInfo, "group secret set: same-host peers use authenticated TCP, not shared memory "
                        "(GEOCCL_SHM_TRUST_HOST=1 trusts the host)");
      choice.host = "tcp";
    }
  }
  tcp::TcpDevice* gradient_tcp = nullptr;
  for (int c = 0; c < kPriorityClasses; ++c) {
    auto& ch = set.channels[static_cast<size_t>(c)];
    auto options = o.tcp;
    options.channel = static_cast<uint8_t>(c);
    // What the bulk class's WAN sockets hold beyond the frames in flight is what a gradient
    // frame may find in front of it when the bulk class yields: keep it small.
    if (c > 0 && options.wan_notsent_lowat > kBulkNotsentLowat) options.wan_notsent_lowat = kBulkNotsentLowat;
    auto tcp = std::make_unique<tcp::TcpDevice>(group, bind_addr, options);
    if (c == 0)
      gradient_tcp = tcp.get();
    else
      tcp->yield_to(*gradient_tcp, o.bulk);
    ch.devices.push_back(std::move(tcp));
    // QUIC carries the gradient class; the bulk class stays on TCP, whose scavenger paces it
    // beneath the gradient class's traffic through the kernel.
    if ((choice.remote == "quic" || choice.remote == "auto" || choice.host == "quic") && c == 0) {
      ch.devices.push_back(std::make_unique<quic::QuicDevice>(group, bind_addr, o.quic));
      if (choice.remote == "auto") set.candidate = ch.devices.back().get();
    }
    if (choice.host == "shm") ch.devices.push_back(std::make_unique<shm::ShmDevice>(group, o.shm));
    auto find = [&](const std::string& name) -> Device* {
      for (auto& d : ch.devices)
        if (name == d->name()) return d.get();
      return nullptr;
    };
    ch.host = find(choice.host);
    ch.remote = find(choice.remote);
    if (!ch.host) ch.host = find("tcp");                                 // the bulk class has no QUIC device
    if (!ch.remote || choice.remote == "auto") ch.remote = find("tcp");  // the decider starts on TCP
  }
  return set;
}

}  // namespace geoccl::transport
