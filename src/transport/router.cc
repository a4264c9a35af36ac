#include "transport/router.h"

#include <algorithm>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/shm/device.h"
#include "transport/tcp/device.h"

namespace geoccl::transport {

namespace {

bool known_device(const std::string& name, bool host_class) {
  return name == "tcp" || (host_class && name == "shm");
}

}  // namespace

PathChoice PathChoice::parse(const std::string& s) {
  PathChoice c;
  if (s == "auto") return c;
  if (s == "tcp") {
    c.host = "tcp";
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
                  "GEOCCL_TRANSPORT: '" + item + "' is not host=shm|tcp or remote=tcp (in '" + s + "')");
    pos = end + 1;
  }
  return c;
}

Router::Router(Group& group, const Config& cfg, int data_streams, const std::string& bind_addr,
               const Publish& publish, const Lookup& lookup, const Poll& poll, Clock::time_point deadline)
    : group_(group), by_peer_(static_cast<size_t>(group.size()), nullptr) {
  const PathChoice choice = PathChoice::parse(cfg.transport);
  if (group_.size() == 1) return;  // a group of one needs no network
  devices_.push_back(
      std::make_unique<tcp::TcpDevice>(group_, bind_addr, tcp::TcpOptions::from_config(cfg, data_streams)));
  if (choice.host == "shm") {
    shm::ShmOptions o;
    o.ring_bytes = cfg.shm_ring_bytes;
    devices_.push_back(std::make_unique<shm::ShmDevice>(group_, o));
  }
  auto find = [&](const std::string& name) -> Device* {
    for (auto& d : devices_)
      if (name == d->name()) return d.get();
    return nullptr;
  };
  auto key = [](const Device& d, int r) { return std::string(d.name()) + "/" + std::to_string(r); };
  for (auto& d : devices_) publish(key(*d, group_.rank()), d->address());

  // Both ends of a pair see the same two addresses and the same choice: they pick alike.
  Device* host = find(choice.host);
  Device* remote = find(choice.remote);
  std::vector<std::vector<int>> peers_of(devices_.size());
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.rank()) continue;
    Device* d = remote;
    if (host && host != remote && host->reaches(lookup(key(*host, p)))) d = host;
    by_peer_[static_cast<size_t>(p)] = d;
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i].get() == d) peers_of[i].push_back(p);
  }
  // Every rank connects its devices in the same order; each accepts on the loop thread meanwhile.
  try {
    for (size_t i = 0; i < devices_.size(); ++i) {
      Device& d = *devices_[i];
      if (peers_of[i].empty()) continue;
      GEOCCL_LOG(kInfo, d.name() << ": connecting to " << peers_of[i].size() << " peer(s)");
      d.connect(peers_of[i], [&](int p) { return lookup(key(d, p)); }, poll, deadline);
    }
  } catch (...) {
    close_devices();
    throw;
  }
}

Router::~Router() { close_devices(); }

void Router::close_devices() {
  // Every device stops talking first (goodbyes, no more failure handling of its own), then they
  // go, the last built first.
  for (auto& d : devices_) d->shutdown();
  while (!devices_.empty()) devices_.pop_back();
  // Tasks this router posted (begin_operation) run before it goes: the loop runs them in order.
  group_.loop().run_owned([] {});
}

RequestPtr Router::send(int peer, const protocol::FrameHeader& h, std::span<const uint8_t> payload) {
  return of(peer).send(peer, h, payload);
}

RequestPtr Router::recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) {
  return of(peer).recv(peer, expect, dst);
}

RequestPtr Router::recv_reduce(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                               DataType dtype, ReduceOp op) {
  return of(peer).recv_reduce(peer, expect, dst, dtype, op);
}

void Router::begin_operation(const protocol::FrameHeader& h) {
  group_.loop().post([this, h] {
    group_.set_current_operation(h);
    for (auto& d : devices_) d->recheck_early_frames();
  });
}

void Router::abort(ErrorCode code, const std::string& message) {
  group_.loop().run_owned([&] { group_.fail(code, message, true); });
}

std::optional<Failure> Router::failure() const { return group_.failure(); }

std::vector<PeerStats> Router::stats() const {
  std::vector<PeerStats> out;
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.rank()) continue;
    PeerStats ps;
    ps.peer = p;
    ps.transport = of(p).name();
    of(p).stats(&ps);
    out.push_back(std::move(ps));
  }
  return out;
}

void Router::set_wan_peer(int peer, bool wan) { of(peer).set_wan_peer(peer, wan); }

}  // namespace geoccl::transport
