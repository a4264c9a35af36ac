#include "transport/router.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/address_card.h"
#include "transport/liveness_monitor.h"
#include "transport/device_factory.h"

namespace geoccl::transport {

namespace {

// A device's name as logs spell the protocol: "QUIC", "TCP".
std::string upper(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  return name;
}

}  // namespace

Router::Router(Group& group, const DeviceOptions& devices, const RouterOptions& options, const std::string& bind_addr,
               const Publish& publish, const Lookup& lookup, const Poll& poll, Clock::time_point deadline)
    : group_(group) {
  for (auto& ch : channels_) ch.by_peer = std::vector<std::atomic<Device*>>(static_cast<size_t>(group.size()));
  why_.resize(static_cast<size_t>(group.size()));
  if (group_.size() == 1) return;  // a group of one needs no network
  DeviceSet set = make_devices(group_, devices, bind_addr);
  for (int c = 0; c < kPriorityClasses; ++c) channels_[static_cast<size_t>(c)].devices = std::move(set.channels[static_cast<size_t>(c)].devices);
  candidate_ = set.candidate;
  if (candidate_) candidates_ = {set.channels[0].remote->name(), candidate_->name()};
  // Every device's address on one card, under "3" for rank 3: "tcp" for the gradient class's
  // TCP device, "tcp.bulk" for the bulk class's.
  auto key = [](const Device& d, int c) { return std::string(d.name()) + (c == 0 ? "" : ".bulk"); };
  AddressCard mine;
  for (int c = 0; c < kPriorityClasses; ++c)
    for (auto& d : channels_[static_cast<size_t>(c)].devices) mine.entries.emplace_back(key(*d, c), d->address());
  publish(std::to_string(group_.rank()), encode_address_card(mine));
  std::vector<AddressCard> cards(static_cast<size_t>(group_.size()));
  auto address = [&](int p, const std::string& name) {
    const auto* a = cards[static_cast<size_t>(p)].find(name);
    return a ? *a : std::vector<uint8_t>{};  // none: the device reports a malformed address
  };

  try {
    // Every peer's card, asked for at once: the store answers them in a round trip or two, not
    // one round trip per peer (a rank across a WAN from the store paid n of them).
    std::vector<std::string> keys;
    for (int p = 0; p < group_.size(); ++p)
      if (p != group_.rank()) keys.push_back(std::to_string(p));
    auto raw = lookup(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      const int p = std::stoi(keys[i]);
      auto card = i < raw.size() ? decode_address_card(raw[i]) : std::nullopt;
      if (!card) throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p) + " published a malformed address card");
      cards[static_cast<size_t>(p)] = std::move(*card);
    }
    for (int c = 0; c < kPriorityClasses; ++c) {
      Channel& ch = channels_[static_cast<size_t>(c)];
      // Both ends of a pair see the same two addresses and the same choice: they pick alike.
      Device* host = set.channels[static_cast<size_t>(c)].host;
      Device* remote = set.channels[static_cast<size_t>(c)].remote;
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
      // The decider's second candidate, to every peer the first carries: best effort.
      if (c == 0 && candidate_) {
        std::vector<int> remote_peers;
        for (int p = 0; p < group_.size(); ++p)
          if (p != group_.rank() && ch.by_peer[static_cast<size_t>(p)].load() == remote) remote_peers.push_back(p);
        if (!remote_peers.empty()) {
          GEOCCL_LOG(kInfo, candidate_->name() << ": connecting to " << remote_peers.size() << " peer(s) (remote=auto)");
          try {
            candidate_->connect(remote_peers, [&](int p) { return address(p, key(*candidate_, c)); }, poll,
                           std::min(deadline, Clock::now() + options.candidate_budget));
          } catch (const Error& e) {
            if (e.code() == ErrorCode::kInvalidArgument) throw;  // another rank's setup error
            std::string missing;
            for (int p : remote_peers)
              if (!candidate_->connected_to(p)) missing += (missing.empty() ? "" : ",") + std::to_string(p);
            GEOCCL_LOG(kWarn, upper(candidate_->name()) << " does not reach rank(s) " << missing << " (" << e.what()
                                                        << "): " << upper(remote->name())
                                                        << " carries their traffic (is UDP blocked?)");
          }
        }
      }
    }
  } catch (...) {
    close_devices();
    throw;
  }
  if (options.liveness.interval.count() > 0) {
    std::vector<Device*> every;
    for (auto& ch : channels_)
      for (auto& d : ch.devices) every.push_back(d.get());
    std::vector<Device*> carrier;
    for (auto& d : channels_[0].by_peer) carrier.push_back(d.load());
    liveness_ = std::make_unique<LivenessMonitor>(group_, options.liveness, std::move(carrier), std::move(every));
  }
}

Router::~Router() { close_devices(); }

Device& Router::of(int peer, uint8_t channel) const {
  if (channel >= kPriorityClasses)
    throw Error(ErrorCode::kInvalidArgument, "priority class " + std::to_string(channel) + " does not exist");
  return *channels_[channel].by_peer[static_cast<size_t>(peer)].load(std::memory_order_acquire);
}

bool Router::connected(int peer, const std::string& name) const {
  for (auto& d : channels_[0].devices)
    if (name == d->name()) return d->connected_to(peer);
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
  // A device that does not reduce on receive leaves it to the caller (null).
  ReduceOnReceive* r = of(peer, expect.channel).reduce_on_receive();
  return r ? r->recv_reduce(peer, expect, dst, dtype, op) : nullptr;
}

bool Router::forwards(int from, int to, uint8_t channel) const {
  if (from == to || from == rank() || to == rank() || channel >= kPriorityClasses) return false;
  Device& d = of(from, channel);
  return &d == &of(to, channel) && d.forward_on_receive() != nullptr;
}

Router::Forwarded Router::recv_forward(int from, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                                       int to, const protocol::FrameHeader& h, const Forwarding& how) {
  if (!forwards(from, to, expect.channel) || h.channel != expect.channel) return {};
  return of(from, expect.channel).forward_on_receive()->recv_forward(from, expect, dst, to, h, how);
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
    // The device once: the decider may switch the peer's device meanwhile.
    const Device& d = of(p, 0);
    LinkStats ps;
    ps.peer = p;
    ps.device = d.name();
    {
      std::lock_guard lk(why_mu_);
      ps.choice = why_[static_cast<size_t>(p)];
    }
    d.stats(&ps);
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

void Router::set_wan_peers(const std::vector<char>& wan) {
  for (int c = 0; c < kPriorityClasses; ++c)
    for (auto& d : channels_[static_cast<size_t>(c)].devices) {
      WanTuning* t = d->wan_tuning();
      if (!t) continue;
      std::vector<int> peers;
      std::vector<char> flags;
      for (int p = 0; p < group_.size() && p < static_cast<int>(wan.size()); ++p)
        if (p != group_.rank() && &of(p, static_cast<uint8_t>(c)) == d.get()) {
          peers.push_back(p);
          flags.push_back(wan[static_cast<size_t>(p)]);
        }
      if (!peers.empty()) t->set_wan_peers(peers, flags);
    }
}

void Router::await_wan_streams(Clock::time_point deadline) {
  for (auto& ch : channels_)
    for (auto& d : ch.devices)
      if (WanTuning* t = d->wan_tuning()) t->await_wan_streams(deadline);
}

bool Router::set_two_hop(int peer, int via, size_t min_bytes) {
  bool taken = false;
  for (int c = 0; c < kPriorityClasses; ++c) {
    TwoHopPaths* t = of(peer, static_cast<uint8_t>(c)).two_hop_paths();
    const bool ok = t && t->set_two_hop(peer, via, min_bytes);
    if (c == 0) taken = ok;
  }
  return taken;
}

}  // namespace geoccl::transport
