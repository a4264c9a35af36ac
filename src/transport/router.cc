#include "transport/router.h"

#include <algorithm>
#include <optional>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/address_card.h"
#include "transport/liveness_monitor.h"
#include "transport/quic/device.h"
#include "transport/shm/device.h"
#include "transport/tcp/device.h"

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

Router::Router(Group& group, const Config& cfg, int data_streams, const std::string& bind_addr,
               const Publish& publish, const Lookup& lookup, const Poll& poll, Clock::time_point deadline)
    : group_(group) {
  PathChoice choice = PathChoice::parse(cfg.transport);
  if (group.security()) {
    // Shared memory authenticates its handshake with the secret but does not seal frames (the
    // segment's memfd reaches only the authenticated peer, yet root and ptrace on the host see
    // it): it is used only where the host is trusted explicitly (docs/security.md). TCP authenticates every connection with the
    // secret and seals every frame. QUIC's TLS 1.3 seals every packet and both ends present the
    // certificate whose fingerprint the peer published in the store; with a secret the store's
    // values are sealed, so that fingerprint comes from a rank that holds the secret.
    if (choice.host == "shm" && !cfg.shm_trust_host) {
      GEOCCL_LOG(kInfo, "group secret set: same-host peers use authenticated TCP, not shared memory "
                        "(GEOCCL_SHM_TRUST_HOST=1 trusts the host)");
      choice.host = "tcp";
    }
  }
  for (auto& ch : channels_) ch.by_peer = std::vector<std::atomic<Device*>>(static_cast<size_t>(group.size()));
  why_.resize(static_cast<size_t>(group.size()));
  if (group_.size() == 1) return;  // a group of one needs no network
  tcp::TcpDevice* gradient_tcp = nullptr;
  for (int c = 0; c < kPriorityClasses; ++c) {
    auto& devices = channels_[static_cast<size_t>(c)].devices;
    auto options = tcp::TcpOptions::from_config(cfg, data_streams);
    options.channel = static_cast<uint8_t>(c);
    // What the bulk class's WAN sockets hold beyond the frames in flight is what a gradient
    // frame may find in front of it when the bulk class yields: keep it small.
    if (c > 0 && options.wan_notsent_lowat > kBulkNotsentLowat) options.wan_notsent_lowat = kBulkNotsentLowat;
    auto tcp = std::make_unique<tcp::TcpDevice>(group_, bind_addr, options);
    if (c == 0) gradient_tcp = tcp.get();
    else tcp->yield_to(*gradient_tcp, ScavengerOptions::from_config(cfg));
    devices.push_back(std::move(tcp));
    // QUIC carries the gradient class; the bulk class stays on TCP, whose scavenger paces it
    // beneath the gradient class's traffic through the kernel.
    if ((choice.remote == "quic" || choice.remote == "auto" || choice.host == "quic") && c == 0) {
      auto q = std::make_unique<quic::QuicDevice>(group_, bind_addr, quic::QuicOptions::from_config(cfg));
      quic_ = q.get();
      devices.push_back(std::move(q));
      deciding_ = choice.remote == "auto";
    }
    if (choice.host == "shm") {
      shm::ShmOptions o;
      o.ring_bytes = cfg.shm_ring_bytes;
      devices.push_back(std::make_unique<shm::ShmDevice>(group_, o));
    }
  }
  // Every device's address on one card, under "3" for rank 3: "tcp" for the gradient class's
  // TCP device, "tcp.bulk" for the bulk class's.
  auto key = [](const Device& d, int c) { return std::string(d.name()) + (c == 0 ? "" : ".bulk"); };
  AddressCard mine;
  for (int c = 0; c < kPriorityClasses; ++c)
    for (auto& d : channels_[static_cast<size_t>(c)].devices) mine.entries.emplace_back(key(*d, c), d->address());
  publish(std::to_string(group_.rank()), encode_address_card(mine));
  // A peer's card is read once, when one of its addresses is first needed (every device's
  // connect() asks for its peers' addresses on this thread).
  std::vector<std::optional<AddressCard>> cards(static_cast<size_t>(group_.size()));
  auto address = [&](int p, const std::string& name) {
    auto& card = cards[static_cast<size_t>(p)];
    if (!card && !(card = decode_address_card(lookup(std::to_string(p)))))
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p) + " published a malformed address card");
    const auto* a = card->find(name);
    return a ? *a : std::vector<uint8_t>{};  // none: the device reports a malformed address
  };

  try {
    for (int c = 0; c < kPriorityClasses; ++c) {
      Channel& ch = channels_[static_cast<size_t>(c)];
      auto find = [&](const std::string& name) -> Device* {
        for (auto& d : ch.devices)
          if (name == d->name()) return d.get();
        return nullptr;
      };
      // Both ends of a pair see the same two addresses and the same choice: they pick alike.
      Device* host = find(choice.host);
      Device* remote = find(choice.remote);
      if (!host) host = find("tcp");  // the bulk class has no QUIC device
      if (!remote || choice.remote == "auto") remote = find("tcp");  // the decider starts on TCP
      std::vector<std::vector<int>> peers_of(ch.devices.size());
      for (int p = 0; p < group_.size(); ++p) {
        if (p == group_.rank()) continue;
        Device* d = remote;
        if (host && host != remote && host->reaches(address(p, key(*host, c)))) d = host;
        ch.by_peer[static_cast<size_t>(p)] = d;
        for (size_t i = 0; i < ch.devices.size(); ++i)
          if (ch.devices[i].get() == d) peers_of[i].push_back(p);
      }
      // Every rank connects its devices in the same order; each accepts on the loop thread
      // meanwhile.
      for (size_t i = 0; i < ch.devices.size(); ++i) {
        Device& d = *ch.devices[i];
        if (peers_of[i].empty()) continue;
        GEOCCL_LOG(kInfo, d.name() << (c == 0 ? "" : " (bulk)") << ": connecting to "
                                   << peers_of[i].size() << " peer(s)");
        d.connect(peers_of[i], [&](int p) { return address(p, key(d, c)); }, poll, deadline);
      }
      // The decider's second candidate: QUIC to every peer TCP carries, best effort.
      if (c == 0 && deciding_) {
        std::vector<int> remote_peers;
        for (int p = 0; p < group_.size(); ++p)
          if (p != group_.rank() && ch.by_peer[static_cast<size_t>(p)].load() == remote) remote_peers.push_back(p);
        if (!remote_peers.empty()) {
          GEOCCL_LOG(kInfo, "quic: connecting to " << remote_peers.size() << " peer(s) (remote=auto)");
          try {
            quic_->connect(remote_peers, [&](int p) { return address(p, key(*quic_, c)); }, poll,
                           std::min(deadline, Clock::now() + cfg.quic_connect_budget));
          } catch (const Error& e) {
            if (e.code() == ErrorCode::kInvalidArgument) throw;  // another rank's setup error
            std::string missing;
            for (int p : remote_peers)
              if (!quic_->connected_to(p)) missing += (missing.empty() ? "" : ",") + std::to_string(p);
            GEOCCL_LOG(kWarn, "QUIC does not reach rank(s) " << missing << " (" << e.what()
                                                            << "): TCP carries their traffic (is UDP blocked?)");
          }
        }
      }
    }
  } catch (...) {
    close_devices();
    throw;
  }
  if (cfg.heartbeat_interval.count() > 0) {
    protocol::LivenessOptions lo;
    lo.interval = cfg.heartbeat_interval;
    lo.window = cfg.liveness_window;
    lo.link_bound = cfg.resume_timeout();
    std::vector<Device*> every;
    for (auto& ch : channels_)
      for (auto& d : ch.devices) every.push_back(d.get());
    std::vector<Device*> carrier;
    for (auto& d : channels_[0].by_peer) carrier.push_back(d.load());
    liveness_ = std::make_unique<LivenessMonitor>(group_, lo, std::move(carrier), std::move(every));
  }
}

Router::~Router() { close_devices(); }

Device& Router::of(int peer, uint8_t channel) const {
  if (channel >= kPriorityClasses)
    throw Error(ErrorCode::kInvalidArgument, "priority class " + std::to_string(channel) + " does not exist");
  return *channels_[channel].by_peer[static_cast<size_t>(peer)].load(std::memory_order_acquire);
}

bool Router::connected(int peer, const std::string& name) const {
  if (name == "quic") return quic_ && quic_->connected_to(peer);
  for (auto& d : channels_[0].devices)
    if (name == d->name()) return true;  // TCP and shm are connected to every peer they serve
  return false;
}

void Router::use(int peer, const std::string& name, const std::string& why) {
  for (auto& d : channels_[0].devices)
    if (name == d->name()) {
      channels_[0].by_peer[static_cast<size_t>(peer)].store(d.get(), std::memory_order_release);
      if (!why.empty()) {
        std::lock_guard lk(why_mu_);
        why_[static_cast<size_t>(peer)] = why;
      }
      return;
    }
  throw Error(ErrorCode::kInvalidArgument, "no transport '" + name + "' in this group");
}

void Router::close_devices() {
  liveness_.reset();
  // Every device stops talking first (goodbyes, no more failure handling of its own), then they
  // go, the last built first.
  for (auto& ch : channels_)
    for (auto& d : ch.devices) d->shutdown();
  for (int c = kPriorityClasses - 1; c >= 0; --c) {
    auto& devices = channels_[static_cast<size_t>(c)].devices;
    while (!devices.empty()) devices.pop_back();
  }
  // Tasks this router posted (begin_operation) run before it goes: the loop runs them in order.
  group_.loop().run_owned([] {});
}

RequestPtr Router::send(int peer, const protocol::FrameHeader& h, std::span<const uint8_t> payload) {
  return of(peer, h.channel).send(peer, h, payload);
}

RequestPtr Router::recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) {
  return of(peer, expect.channel).recv(peer, expect, dst);
}

RequestPtr Router::recv_reduce(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                               DataType dtype, ReduceOp op) {
  return of(peer, expect.channel).recv_reduce(peer, expect, dst, dtype, op);
}

void Router::begin_operation(const protocol::FrameHeader& h) {
  if (h.channel >= kPriorityClasses) return;
  group_.loop().post([this, h] {
    group_.set_current_operation(h);
    for (auto& d : channels_[h.channel].devices) d->recheck_early_frames();
  });
}

void Router::watch_early_messages(uint8_t channel, bool on) {
  if (channel >= kPriorityClasses) return;
  group_.loop().post([this, channel, on] {
    group_.watch_early_messages(channel, on);
    if (on)
      for (auto& d : channels_[channel].devices) d->recheck_early_frames();
  });
}

void Router::abort(ErrorCode code, const std::string& message) {
  group_.loop().run_owned([&] { group_.fail(code, message, true); });
}

std::optional<Failure> Router::failure() const { return group_.failure(); }

std::vector<LinkStats> Router::stats() const {
  std::vector<LinkStats> out;
  for (int p = 0; p < group_.size(); ++p) {
    if (p == group_.rank()) continue;
    LinkStats ps;
    ps.peer = p;
    ps.device = of(p, 0).name();
    {
      std::lock_guard lk(why_mu_);
      ps.choice = why_[static_cast<size_t>(p)];
    }
    of(p, 0).stats(&ps);
    // The bulk class's link to the peer: its own counters.
    LinkStats bulk;
    bulk.peer = p;
    of(p, 1).stats(&bulk);
    ps.bulk_bytes_sent = bulk.bytes_sent;
    ps.bulk_bytes_received = bulk.bytes_received;
    ps.bulk_rtt_ms = bulk.rtt_ms;
    out.push_back(std::move(ps));
  }
  return out;
}

void Router::set_domains(std::vector<int> domain_of, std::vector<std::string> names) {
  if (liveness_) liveness_->set_domains(std::move(domain_of), std::move(names));
}

void Router::set_wan_peer(int peer, bool wan) {
  for (int c = 0; c < kPriorityClasses; ++c) of(peer, static_cast<uint8_t>(c)).set_wan_peer(peer, wan);
}

void Router::await_wan_streams(Clock::time_point deadline) {
  for (auto& ch : channels_)
    for (auto& d : ch.devices) d->await_wan_streams(deadline);
}

bool Router::set_two_hop(int peer, int via, size_t min_bytes) {
  bool taken = false;
  for (int c = 0; c < kPriorityClasses; ++c) {
    const bool ok = of(peer, static_cast<uint8_t>(c)).set_two_hop(peer, via, min_bytes);
    if (c == 0) taken = ok;
  }
  return taken;
}

}  // namespace geoccl::transport
