// TcpDevice, priority between classes: the bulk class's device yields its WAN data sockets to
// the gradient class's (yield_to) and sends at the rate its delay controller gives each WAN path
// (scavenger.h), as the kernel's pacing rate.
#include "transport/tcp/device.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/logging.h"

#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

namespace {
// How often the scavenger samples the RTT of its WAN paths, and how long it keeps yielding
// after the higher class's queues drained (its last frames are still in the kernel's buffer).
constexpr auto kScavengeInterval = std::chrono::milliseconds(20);
constexpr auto kYieldHold = std::chrono::milliseconds(2);
}  // namespace

bool TcpDevice::wan_backlogged() const {
  for (const auto& p : peers_) {
    if (!p->wan) continue;
    for (int s = 1; s < streams_; ++s)
      if (const TcpConnection* c = p->streams[static_cast<size_t>(s)].get(); c && !c->send_queue_empty())
        return true;
  }
  return false;
}

int TcpDevice::busy_wan_peers(const TcpPeer& p) const {
  int busy = 1;  // p itself
  for (const auto& q : peers_) {
    if (q.get() == &p || !q->wan) continue;
    for (int s = 1; s < streams_; ++s)
      if (const TcpConnection* c = q->streams[static_cast<size_t>(s)].get();
          c && c->open() && (!c->send_queue_empty() || c->backlog() > 0)) {
        ++busy;
        break;
      }
  }
  return busy;
}

bool TcpDevice::holding(const TcpPeer& p) const { return scavenge_ && p.wan && scavenge_->higher_busy; }

void TcpDevice::data_queue_changed(const TcpPeer& p) {
  // The bulk class's sampling timer runs only while it has WAN traffic (scavenge_tick stops it).
  if (scavenge_ && p.bulk_rate && !scavenge_->tick) scavenge_tick();
  if (!on_wan_busy_ || !p.wan) return;
  const bool busy = wan_backlogged();
  if (busy == wan_busy_) return;
  wan_busy_ = busy;
  on_wan_busy_(busy);
}

void TcpDevice::yield_to(TcpDevice& higher, const ScavengerOptions& o) {
  scavenge_ = std::make_unique<Scavenge>();
  scavenge_->higher = &higher;
  scavenge_->options = o;
  group_.loop().run_owned([this, &higher] {
    higher.watch_wan_busy([this](bool busy) { higher_class_busy(busy); });
  });
}

void TcpDevice::higher_class_busy(bool busy) {
  auto& sc = *scavenge_;
  group_.loop().cancel_timer(sc.release);
  sc.release = 0;
  if (busy) {
    sc.higher_busy = true;  // write_some() holds the WAN data streams from here on
    return;
  }
  sc.release = group_.loop().add_timer(Clock::now() + kYieldHold, [this] {
    auto& s = *scavenge_;
    s.release = 0;
    s.higher_busy = false;
    // The smoothed RTT needs about a round trip of samples at the restored rate to forget the
    // yield: the longest base RTT of the WAN paths, twice.
    ScavengerRate::Micros rtt{0};
    for (auto& p : peers_)
      if (p->bulk_rate) rtt = std::max(rtt, p->bulk_rate->base_rtt());
    s.resume_sampling = Clock::now() + 2 * rtt;
    for (auto& p : peers_)
      if (p->wan)
        for (int st = 1; st < streams_; ++st)
          if (TcpConnection* c = p->streams[static_cast<size_t>(st)].get()) c->resume_writing();
  });
}

void TcpDevice::apply_bulk_rates() {
  for (auto& p : peers_) {
    if (!p->bulk_rate) continue;
    const uint64_t bps = p->bulk_rate->rate_bps();
    const uint64_t per_stream = std::max<uint64_t>(1, bps / 8 / static_cast<uint64_t>(std::max(1, p->width)));
    for (int s = 1; s < streams_; ++s)
      if (TcpConnection* c = p->streams[static_cast<size_t>(s)].get(); c && c->pacing_rate() != per_stream)
        c->set_pacing_rate(per_stream);
  }
}

void TcpDevice::scavenge_tick() {
  const auto now = Clock::now();
  auto& sc = *scavenge_;
  sc.busy_ticks += sc.higher_busy;
  ++sc.ticks;
  for (auto& p : peers_) {
    if (!p->bulk_rate) continue;
    if (sc.ticks % 50 == 0)
      GEOCCL_LOG(kDebug, "bulk to rank " << p->rank << ": " << p->bulk_rate->rate_bps() / 1e6
                                          << " Mbit/s, queueing " << p->bulk_rate->queueing_delay().count() / 1000.0
                                          << " ms over " << p->bulk_rate->base_rtt().count() / 1000.0 << " ms, "
                                          << p->bytes_sent.load() / 1e6 << " MB sent, gradients busy "
                                          << sc.busy_ticks * 2 << "% of the last second");
    // A sample means nothing while this rank's gradients take the path (the controller would
    // learn their queue, not its own), nor just after: the kernel's smoothed RTT still holds
    // the samples of the yield, taken at the floor rate.
    if (sc.higher_busy || now < sc.resume_sampling) continue;
    ScavengerRate::Micros srtt{0}, path_min{0};
    uint64_t delivered = 0;
    for (int s = 1; s < streams_; ++s) {
      const TcpConnection* c = p->streams[static_cast<size_t>(s)].get();
      if (!c) continue;
      const auto ps = c->path_sample();
      if (ps.min_rtt.count() > 0 && (path_min.count() == 0 || ps.min_rtt < path_min)) path_min = ps.min_rtt;
      if (ps.in_flight) srtt = std::max(srtt, ps.srtt);
      delivered += ps.delivery_bps;
    }
    if (srtt.count() > 0) p->bulk_rate->on_rtt(now, srtt, path_min, delivered);
  }
  if (sc.ticks % 50 == 0) sc.busy_ticks = 0;
  apply_bulk_rates();
  // Idle (nothing queued, nothing written since the last tick): stop until a queue fills again.
  uint64_t sent = 0;
  bool queued = false;
  for (const auto& p : peers_) {
    if (!p->bulk_rate) continue;
    sent += p->bytes_sent.load(std::memory_order_relaxed);
    for (int s = 1; s < streams_; ++s)
      if (const TcpConnection* c = p->streams[static_cast<size_t>(s)].get(); c && !c->send_queue_empty()) queued = true;
  }
  const bool active = queued || sent != sc.sent_at_tick;
  sc.sent_at_tick = sent;
  sc.tick = active ? group_.loop().add_timer(now + kScavengeInterval, [this] { scavenge_tick(); }) : 0;
}

uint64_t TcpDevice::bulk_rate_bps(int peer_rank) const {
  uint64_t r = 0;
  group_.loop().run_owned([&] {
    const auto& p = *peers_[static_cast<size_t>(peer_rank)];
    if (p.bulk_rate) r = p.bulk_rate->rate_bps();
  });
  return r;
}

}  // namespace geoccl::transport::tcp
