#include "transport/tcp/device.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "core/logging.h"
#include "protocol/handshake_machine.h"
#include "transport/dial_all.h"
#include "transport/tcp/address.h"
#include "transport/tcp/socket_util.h"
#include "transport/tcp/stall.h"
#include "transport/tcp/stripe.h"

namespace geoccl::transport::tcp {

using protocol::FrameHeader;

namespace {
// How often the stream width controller samples (stream_width.h).
constexpr auto kWidthInterval = std::chrono::milliseconds(50);
}  // namespace

TcpDevice::TcpDevice(Group& group, const std::string& bind_addr, const TcpOptions& options)
    : group_(group),
      options_(options),
      streams_(1 + std::max(1, options.data_streams)),
      initial_streams_(1 + std::max(1, options.initial())),
      // A relay carries pairs that cannot reach each other: WAN paths, whose socket options its
      // sockets to the targets get (the requester's side inherits the listening socket's).
      relay_([this](int s) {
        if (options_.wan_buffer_bytes > 0) set_buffer_sizes(s, options_.wan_buffer_bytes);
        if (!options_.wan_congestion_control.empty()) set_congestion_control(s, options_.wan_congestion_control);
      }) {
  relay_.set_stall_timeout(options_.stall_timeout);
  if (group_.security()) crypto_pool_ = runtime::WorkerPool::shared();
  for (int r = 0; r < group_.size(); ++r) {
    auto p = std::make_unique<TcpPeer>(*this);
    p->rank = r;
    p->streams.resize(static_cast<size_t>(streams_));
    p->dialers.resize(static_cast<size_t>(streams_));
    // Until set_wan_peer says which peers are across a WAN, a peer is one where resume may turn
    // on: every frame is kept, and a broken stream is re-established. Both ends must agree, and
    // they reach set_wan_peer at different times: an end that did refused its peer's replacement
    // of a stalled stream while the other was still setting up (four-uneven.toml, 1 s stall
    // detector: "rejected inbound connection: rank 3 stream 1 ... stream resume is off").
    p->resume = options_.resume || options_.wan_resume;
    p->session.set_keep_copies(p->resume);
    peers_.push_back(std::move(p));
  }
  // Buffers are set on the listening socket so that accepted sockets inherit them before the
  // handshake: the receive buffer decides the window scale offered in the SYN-ACK.
  listen_fd_ = listen_on(bind_addr, 0);
  if (options_.buffer_bytes > 0) {
    const auto got = set_buffer_sizes(listen_fd_, options_.buffer_bytes);
    GEOCCL_LOG(kInfo, "TCP buffers: requested " << options_.buffer_bytes << " B, kernel holds snd "
                                                << got.first << " rcv " << got.second);
  }
  if (!options_.congestion_control.empty()) {
    const std::string& cc = options_.congestion_control;
    const std::string got = set_congestion_control(listen_fd_, cc);
    GEOCCL_LOG(kInfo, "TCP congestion control: requested " << cc << ", kernel uses " << got);
    if (got != cc) GEOCCL_LOG(kWarn, "congestion control " << cc << " refused; using " << got);
  }
  endpoint_ = join_host_port(bind_addr, local_port(listen_fd_));
  group_.loop().run_owned(
      [this] { group_.loop().add_fd(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept(); }); });
  failure_listener_ = group_.on_failure([this](const Failure& f, bool tell) { on_group_failure(f, tell); });
}

TcpDevice::~TcpDevice() {
  shutdown();
  group_.remove_failure_listener(failure_listener_);
  // Stream re-dialers and openers stop at their next attempt (each is bounded by a few seconds).
  for (auto& p : peers_) {
    for (auto& t : p->dialers)
      if (t.joinable()) t.join();
    if (p->opener.joinable()) p->opener.join();
    if (p->connector.joinable()) p->connector.join();
    if (p->prober.joinable()) p->prober.join();
    if (p->direct_watch.joinable()) p->direct_watch.join();
  }
  group_.loop().run_owned([this] {
    group_.loop().cancel_timer(width_tick_);
    if (scavenge_) {
      group_.loop().cancel_timer(scavenge_->tick);
      group_.loop().cancel_timer(scavenge_->release);
      scavenge_->higher->watch_wan_busy(nullptr);
    }
    for (auto& p : pending_) {
      group_.loop().cancel_timer(p->timer);
      group_.loop().remove_fd(p->fd);
      ::close(p->fd);
    }
    pending_.clear();
    for (auto& p : peers_) p->streams.clear();
    for (int fd : forgotten_fds_) ::close(fd);
    group_.loop().remove_fd(listen_fd_);
    ::close(listen_fd_);
  });
}

void TcpDevice::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  closing_.store(true);
  group_.loop().run_owned([this] {
    for (auto& p : peers_)
      for (auto& c : p->streams)
        if (c && c->open()) c->post_control(protocol::FrameType::kGoodbye, {});
  });
  // Bounded wait for goodbyes (and aborts) to leave; a dead peer must not hold us here.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool empty = true;
    group_.loop().run_owned([&] {
      for (auto& p : peers_)
        for (auto& c : p->streams)
          if (c && c->open() && !c->send_queue_empty()) empty = false;
    });
    if (empty || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

std::vector<uint8_t> TcpDevice::address() const { return encode_address(endpoint_); }

bool TcpDevice::reaches(std::span<const uint8_t> peer_address) const {
  std::string ep;
  return decode_address(peer_address, &ep);
}

TcpConnection* TcpDevice::conn(int peer, int stream) const {
  return peers_[static_cast<size_t>(peer)]->streams[static_cast<size_t>(stream)].get();
}

void TcpDevice::control_resumed(TcpPeer& p) {
  if (const uint64_t upto = p.session.window().base(); upto > 0) p.streams[kControlStream]->post_ack(upto);
  if (!p.control_stalled) return;
  p.control_stalled = false;
  for (int s = 1; s < streams_; ++s)
    if (TcpConnection* c = p.streams[static_cast<size_t>(s)].get(); c && c->open())
      c->replace("replaced after an outage: its peer's side may sit in TCP's retransmission backoff");
}

void TcpDevice::tick(Clock::time_point now) {
  if (options_.stall_timeout.count() <= 0 || group_.failed() || closing_.load()) {
    relay_.set_paths_down({});
    return;
  }
  std::vector<StallSample> samples(static_cast<size_t>(streams_)), direct(samples.size());
  // The ranks whose direct path from this rank is down (TcpPeer::path_down), and those found so
  // on this tick: a tunnel through one of them rides on that path (below).
  std::vector<int> down, newly_down;
  for (auto& pp : peers_) {
    TcpPeer& p = *pp;
    if (!p.resume) continue;
    for (int s = 0; s < streams_; ++s) {
      TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
      samples[static_cast<size_t>(s)] = c && c->open() ? c->stall_sample(now) : StallSample{};
      direct[static_cast<size_t>(s)] = c && c->via() < 0 ? samples[static_cast<size_t>(s)] : StallSample{};
    }
    // A pair failed over to a relay has no direct streams to show the outage begin.
    const bool down_now = path_down_after(p.path_down, direct, options_.stall_timeout) &&
                          (p.path_down || p.relay.load() < 0);
    if (down_now && !p.path_down) newly_down.push_back(p.rank);
    p.path_down = down_now;
    if (p.path_down) down.push_back(p.rank);
    // The rank that dials replaces a stalled stream; the other waits for the new connection.
    if (p.rank >= group_.rank()) continue;
    for (const StallDecision& d : stalled_streams(samples, options_.stall_timeout)) {
      const int s = static_cast<int>(d.stream);
      TcpConnection* c = p.streams[d.stream].get();
      if (!can_resume(p, s)) continue;
      const auto quiet = std::to_string(samples[d.stream].waiting.count());
      if (d.reason == StallReason::kPathSilent) {
        // An outage: the peer's side of the data streams may sit in backoff too (control_resumed).
        // A control stream stuck on a path whose data streams deliver is not that.
        if (s == kControlStream) p.control_stalled = true;
        c->replace("data unacknowledged for " + quiet +
                   " ms and no stream to the peer acknowledged within " +
                   std::to_string(options_.stall_timeout.count()) + " ms (stall bound " +
                   std::to_string(d.bound.count()) + " ms): the path is down");
      } else {
        c->replace("data unacknowledged for " + quiet +
                   " ms while the peer's other streams are acknowledged (busy bound " +
                   std::to_string(d.bound.count()) + " ms): stuck");
      }
    }
  }
  // A tunnel through a rank whose path from here went down: the relay's end toward this rank may
  // have closed already (the relay saw the cut and reset the far end, which waits for us), and
  // its close cannot cross the cut. The rank that dials replaces such a stream once, when the
  // path goes down; the new one tries the relay and then the direct path (two-hop) or another
  // relay (fail-over). The relay side: the tunnels this rank carries with a rank that is down at
  // one end end at their next check, for as long as it is down, so that their live end
  // re-establishes the stream another way.
  relay_.set_paths_down(down);
  if (newly_down.empty()) return;
  for (auto& pp : peers_) {
    TcpPeer& p = *pp;
    if (!p.resume || p.rank >= group_.rank()) continue;
    for (int s = 0; s < streams_; ++s) {
      TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
      if (!c || !c->open() || c->via() < 0 || !can_resume(p, s)) continue;
      if (std::find(newly_down.begin(), newly_down.end(), c->via()) == newly_down.end()) continue;
      c->replace("its relay, rank " + std::to_string(c->via()) + ", gives no answer: the path to it is down");
    }
  }
}

void TcpDevice::send_heartbeat(int peer_rank, std::span<const uint8_t> payload) {
  TcpConnection* c = conn(peer_rank, kControlStream);
  if (!c) want_connection(peer(peer_rank), true);  // connected on demand
  if (c && c->open() && !c->said_goodbye())
    c->post_control(protocol::FrameType::kHeartbeat, std::vector<uint8_t>(payload.begin(), payload.end()));
}

bool TcpDevice::host_answers(int peer_rank, std::chrono::milliseconds recent) const {
  const TcpConnection* c = conn(peer_rank, kControlStream);
  return c && c->acked_within(recent);
}

void TcpDevice::received(TcpPeer& p, uint64_t bytes) {
  const auto upto = p.session.received(bytes);
  if (!upto) return;
  TcpConnection* c = p.streams[kControlStream].get();
  if (!c || !c->open() || c->said_goodbye()) return;  // a peer that is leaving needs no acks
  c->post_ack(*upto);
}

void TcpDevice::acked(TcpPeer& p, uint64_t upto) {
  bool any = false;
  p.session.acked(upto, [&](RequestPtr& r) {
    if (r && r->ok()) {
      r->delivered.store(true, std::memory_order_release);
      any = true;
    }
  });
  if (any) group_.notify();
}

void TcpDevice::reset_stream_for_test(int peer_rank, int stream, bool silent) {
  group_.loop().run_owned([&] {
    if (TcpConnection* c = conn(peer_rank, stream)) {
      const int kept = c->reset_for_test(silent);
      if (kept >= 0) forgotten_fds_.push_back(kept);
    }
  });
}

uint16_t TcpDevice::stream_port_for_test(int peer_rank, int stream) {
  uint16_t port = 0;
  group_.loop().run_owned([&] {
    if (TcpConnection* c = conn(peer_rank, stream)) port = c->local_port();
  });
  return port;
}

StallSample TcpDevice::stall_sample_for_test(int peer_rank, int stream) {
  StallSample s;
  group_.loop().run_owned([&] {
    if (TcpConnection* c = conn(peer_rank, stream); c && c->open())
      s = c->stall_sample(Clock::now());
  });
  return s;
}

bool TcpDevice::data_stream_open(const TcpPeer& p, const TcpConnection* except) const {
  for (int s = 1; s < streams_; ++s) {
    const TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
    if (c && c != except && c->usable()) return true;
  }
  return false;
}

void TcpDevice::tune_wan_socket(int fd) const {
  if (options_.wan_buffer_bytes > 0 && options_.wan_buffer_bytes != options_.buffer_bytes)
    set_buffer_sizes(fd, options_.wan_buffer_bytes);
  if (!options_.wan_congestion_control.empty() &&
      options_.wan_congestion_control != options_.congestion_control)
    set_congestion_control(fd, options_.wan_congestion_control);
}

void TcpDevice::set_wan_peer(int peer_rank, bool wan) {
  const char w = wan;
  set_wan_peers(std::span<const int>(&peer_rank, 1), std::span<const char>(&w, 1));
}

void TcpDevice::set_wan_peers(std::span<const int> peers, std::span<const char> wan) {
  group_.loop().run_owned([&] {
    for (size_t i = 0; i < peers.size(); ++i) apply_wan_peer(peer(peers[i]), wan[i] != 0);
  });
}

void TcpDevice::apply_wan_peer(TcpPeer& p, bool wan) {
  p.wan = wan;
  // Striping and stream recovery are for the WAN: a LAN peer gets one warm data stream and no
  // copies of what is sent to it.
  const int open = open_prefix(p);
  p.width = wan ? std::clamp(initial_streams_ - 1, 1, std::max(1, open)) : 1;
  p.resume = options_.resume || (wan && options_.wan_resume);
  p.session.set_keep_copies(p.resume);
  if (!wan) return;
  for (int s = 1; s < streams_; ++s)
    if (TcpConnection* c = p.streams[static_cast<size_t>(s)].get()) c->tune_for_wan();
  open_initial_wan_streams(p);
  if (initial_streams_ < streams_ && !p.width_control) {
    StreamWidthOptions wo;
    wo.start = initial_streams_ - 1;
    wo.max = streams_ - 1;
    p.width_control = std::make_unique<StreamWidth>(wo);
    for (size_t s = 1; s < p.streams.size(); ++s)  // what was acknowledged before counts nothing
      if (p.streams[s]) p.streams[s]->take_acked();
    if (!width_tick_) {
      width_at_ = Clock::now();
      width_tick_ = group_.loop().add_timer(width_at_ + kWidthInterval, [this] { width_tick(); });
    }
  }
  if (scavenge_ && !p.bulk_rate) {
    p.bulk_rate = std::make_unique<ScavengerRate>(scavenge_->options);
    apply_bulk_rates();
    if (!scavenge_->tick) scavenge_tick();
  }
}

void TcpDevice::open_initial_wan_streams(TcpPeer& p) {
  // Their handshakes take round trips on the WAN path. A pair connected on demand opens them once
  // its first data stream is in (before, the opener would dial that stream a second time).
  const int open = open_prefix(p);
  if (group_.rank() > p.rank && p.streams[kControlStream] && (!options_.lazy || p.met) &&
      open < initial_streams_ - 1 && !p.opening.exchange(true)) {
    if (p.opener.joinable()) p.opener.join();
    p.opener = std::thread([this, &p, open] { open_streams(p, open + 1, initial_streams_ - 1); });
  }
}

// ---- Measured stream counts.

void TcpDevice::set_width(TcpPeer& p, int width) {
  if (width != p.width) p.width_mark = p.session.frames_numbered();
  p.width = width;
}

int TcpDevice::open_prefix(const TcpPeer& p) const {
  int n = 0;
  while (n + 1 < streams_ && p.streams[static_cast<size_t>(n + 1)]) ++n;
  return n;
}

void TcpDevice::width_tick() {
  width_tick_ = 0;
  if (closing_.load() || group_.failed()) return;
  const auto now = Clock::now();
  const auto span = std::chrono::duration_cast<StreamWidth::Duration>(now - width_at_);
  width_at_ = now;
  for (auto& pp : peers_) {
    TcpPeer& p = *pp;
    if (!p.width_control || !p.streams[kControlStream] || (options_.lazy && !p.met)) continue;  // not connected yet
    const int open = open_prefix(p);
    // Frames waiting in user space at both ends of the span: the path, not the sender, set
    // what was written in it.
    bool busy = false;
    for (int s = 1; s <= open && !busy; ++s) busy = !p.streams[static_cast<size_t>(s)]->send_queue_empty();
    busy = busy && !holding(p);
    const bool busy_all = busy && p.width_busy;
    p.width_busy = busy;
    // What the path delivered, not what was written: a socket's buffer takes a burst at once.
    // And whether frames spread at an earlier width still wait: what they reach is not this
    // width's.
    uint64_t bytes = 0;
    bool behind = false;
    for (size_t s = 1; s < p.streams.size(); ++s)
      if (TcpConnection* c = p.streams[s].get()) {
        bytes += c->take_acked();
        behind = behind || c->oldest_queued_frame() < p.width_mark;
      }
    const bool dialler = group_.rank() > p.rank;
    const TcpConnection* control = p.streams[kControlStream].get();
    const auto rtt = control ? control->srtt() : std::chrono::microseconds(0);
    StreamWidth& w = *p.width_control;
    const int before = w.settled(), tried = w.width();
    w.sample(span, bytes, busy_all, open, dialler ? streams_ - 1 : open, rtt, behind);
    const int want = w.width();
    if (tried != before && want == w.settled()) {
      if (w.last_trial_measured())
        GEOCCL_LOG(kDebug, "frames to rank " << p.rank << ": a trial at " << tried << " streams reached "
                                             << w.last_rate() * 8 / 1e6 << " Mbit/s; " << w.settled() << " kept");
      else
        GEOCCL_LOG(kDebug, "frames to rank " << p.rank << ": a trial at " << tried
                                             << " streams was given up unmeasured");
    }
    if (want > open && dialler && !p.opening.exchange(true)) {
      if (p.opener.joinable()) p.opener.join();
      p.opener = std::thread([this, &p, open, want] { open_streams(p, open + 1, want); });
    }
    set_width(p, std::clamp(want, 1, std::max(1, open)));
    if (w.settled() != before)
      GEOCCL_LOG(kInfo, "frames to rank " << p.rank << " now spread over " << w.settled() << " streams (were "
                                          << before << "; " << w.last_rate() * 8 / 1e6 << " Mbit/s measured)");
  }
  width_tick_ = group_.loop().add_timer(now + kWidthInterval, [this] { width_tick(); });
}

void TcpDevice::await_wan_streams(Clock::time_point deadline) {
  for (;;) {
    bool ready = true;
    group_.loop().run_owned([&] {
      for (const auto& p : peers_)
        if (p->wan && p->streams[kControlStream] && open_prefix(*p) < initial_streams_ - 1 &&
            (group_.rank() < p->rank || p->opening.load()))
          ready = false;
    });
    if (ready || Clock::now() >= deadline || closing_.load() || group_.failed()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TcpConnection& TcpDevice::next_send_conn(TcpPeer& p, size_t bytes) {
  TcpConnection& first = *p.streams[1];
  if (p.width == 1) return first;
  // Small messages take one stream: it stays warm, and a latency-bound exchange never waits on a
  // stream that has been idle (measured on the test bed: 4 KiB allreduces across regions had
  // ~220 ms outliers when spread over 4 streams, none on one).
  // With a two-hop path (set_two_hop), bulk frames go on the relayed streams and the rest on the
  // direct ones (stream 1 is one).
  const bool two_hop = p.two_hop_min_bytes > 0;
  const bool bulk = two_hop && bytes >= p.two_hop_min_bytes;
  if (!bulk && bytes < kSmallFrame && first.open() && first.backlog() < kSmallFrame) return first;
  if (options_.round_robin && !two_hop) return *p.streams[1 + p.rotate++ % static_cast<size_t>(p.width)];
  // A rank sending to several WAN peers at once shares its uplink among them: each peer's frames
  // take S / (busy WAN peers) of its streams, so the flows into the uplink stay about S (12 flows
  // of a 4-domain direct exchange into a 20 ms drop-tail queue lost 5-15 % of the packets).
  const int width = options_.narrow_fan_out && !two_hop && p.wan && p.width > 1 ? std::max(1, p.width / busy_wan_peers(p)) : p.width;
  std::array<uint64_t, 64> backlog{};
  for (int i = 0; i < p.width; ++i) {
    const TcpConnection& c = *p.streams[static_cast<size_t>(1 + i)];
    // Avoid closed streams and those being re-established while any other is open; with a
    // two-hop path, the other kind of stream, and beyond the narrowed width the streams past it,
    // unless no stream of the right kind is open.
    const bool other = (two_hop && (c.via() >= 0) != bulk) || i >= width;
    backlog[static_cast<size_t>(i)] = !c.open() ? ~uint64_t{0} : other ? ~uint64_t{0} - 1 : c.backlog();
  }
  const size_t i = pick_stream(std::span<const uint64_t>(backlog.data(), static_cast<size_t>(p.width)), p.rotate);
  p.rotate = i + 1;
  return *p.streams[1 + i];
}

RequestPtr TcpDevice::send(int peer_rank, const FrameHeader& h, std::span<const uint8_t> payload) {
  auto req = std::make_shared<Request>();
  if (payload.size() > protocol::kMaxPayload) {
    complete(req, {ErrorCode::kInvalidArgument,
                   "frame payload over " + std::to_string(protocol::kMaxPayload) + " bytes"});
    return req;
  }
  FrameHeader hh = h;
  hh.type = protocol::FrameType::kData;
  hh.payload_len = static_cast<uint32_t>(payload.size());
  TcpConnection::SendOp op;
  op.payload = payload;
  op.req = req;
  op.delivery = req;
  // The frame number is given on the loop thread, where frames are numbered in posting order.
  group_.loop().post([this, peer_rank, hh, op = std::move(op)]() mutable {
    if (group_.complete_if_failed(op.req)) return;
    TcpPeer& p = peer(peer_rank);
    FrameHeader numbered = hh;
    numbered.frame = p.session.number_frame();
    op.header = protocol::encode_frame_header(numbered);
    op.data = true;
    op.frame = numbered.frame;
    if (options_.lazy && !p.met) {  // connected on demand: waits for the pair's streams
      p.waiting.push_back(std::move(op));
      want_connection(p, true);
      return;
    }
    const size_t bytes = op.payload.size();
    next_send_conn(p, bytes).post_send(std::move(op));
  });
  return req;
}

RequestPtr TcpDevice::recv(int peer_rank, const FrameHeader& expect, std::span<uint8_t> dst) {
  auto req = std::make_shared<Request>();
  TcpConnection::RecvOp op{expect, dst, req};
  group_.loop().post([this, peer_rank, op = std::move(op)]() mutable {
    if (group_.complete_if_failed(op.req)) return;
    TcpPeer& p = peer(peer_rank);
    if (options_.lazy && !p.met) {  // connected on demand: the frame comes once the pair is
      p.session.window().post(std::move(op));
      want_connection(p, false);
      return;
    }
    if (!data_stream_open(p)) {
      complete(op.req, {ErrorCode::kPeerLost, "connection to rank " + std::to_string(peer_rank) + " is closed"});
      group_.notify();
      return;
    }
    const uint64_t frame = p.session.window().post(std::move(op));
    // The frame may be waiting at the head of one of the data streams already.
    for (int s = 1; s < streams_; ++s)
      if (TcpConnection* c = p.streams[static_cast<size_t>(s)].get()) c->on_recv_posted(frame);
  });
  return req;
}

void TcpDevice::recheck_early_frames() {
  for (auto& p : peers_)
    for (auto& c : p->streams)
      if (c) c->check_early_frame();
}

void TcpDevice::on_group_failure(const Failure& f, bool tell_peers) {
  for (auto& p : peers_) {
    // No worker reads a payload or writes a destination of the requests failed below.
    for (auto& c : p->streams)
      if (c) c->stop_crypto();
    for (auto& op : p->waiting) complete(op.req, f);
    p->waiting.clear();
    p->session.window().drain([&](TcpConnection::RecvOp& r) { complete(r.req, f); });
    p->session.drop_unacked([](RequestPtr&) {});
    for (auto& c : p->streams)
      if (c) c->fail_requests(f);
  }
  if (!tell_peers) return;
  const auto payload = protocol::encode_abort(static_cast<uint8_t>(f.code), f.message, f.ranks);
  for (auto& p : peers_)
    if (TcpConnection* c = p->streams[kControlStream].get())
      c->post_control(protocol::FrameType::kAbort, payload);
}

bool TcpDevice::set_two_hop(int peer_rank, int via, size_t min_bytes) {
  bool taken = false;
  group_.loop().run_owned([&] {
    TcpPeer& p = peer(peer_rank);
    const int me = group_.rank();
    if (via < 0 || via >= group_.size() || via == me || via == peer_rank || streams_ <= kFirstTwoHopStream ||
        p.relay.load() >= 0 || !p.wan || !p.resume || !p.streams[kControlStream])
      return;
    p.two_hop_min_bytes = std::max<size_t>(min_bytes, 1);
    taken = true;
    if (peer_rank > me) return;  // the peer dials: its streams come back through the relay
    p.two_hop.store(via);
    for (int s = kFirstTwoHopStream; s < streams_; ++s)
      if (TcpConnection* c = p.streams[static_cast<size_t>(s)].get(); c && c->open() && can_resume(p, s))
        c->replace("bulk data to rank " + std::to_string(peer_rank) + " take a two-hop path through rank " +
                   std::to_string(via));
  });
  return taken;
}

PathReading TcpDevice::path_reading(int peer) const {
  PathReading out;
  group_.loop().run_owned([&] {
    TcpPeer& p = *peers_[static_cast<size_t>(peer)];
    p.read_delivered.resize(static_cast<size_t>(streams_), 0);
    uint64_t delivered = 0;
    for (int s = 0; s < streams_; ++s) {
      const TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
      if (!c) continue;
      const auto ps = c->path_sample();
      const double srtt = static_cast<double>(ps.srtt.count()) / 1e3;
      if (srtt > 0 && (out.srtt_ms == 0 || srtt < out.srtt_ms)) out.srtt_ms = srtt;
      // A stream's rate sample counts while acks come in: an idle stream keeps the sample of its
      // last burst, which may be from before the path changed.
      auto& last = p.read_delivered[static_cast<size_t>(s)];
      if (s != kControlStream && ps.delivered != last) delivered += ps.delivery_bps;
      last = ps.delivered;
    }
    out.delivery_mbps = static_cast<double>(delivered) / 1e6;
  });
  return out;
}

void TcpDevice::stats(LinkStats* ps) const {
  const TcpPeer& p = *peers_[static_cast<size_t>(ps->peer)];
  ps->bytes_sent = p.bytes_sent.load();
  ps->bytes_received = p.bytes_received.load();
  ps->relay = p.relay.load();
  ps->relayed_bytes = relay_.counters(ps->peer).bytes;
  // TCP_INFO is read on the loop thread, the only owner of the sockets.
  auto read_info = [&] {
    LinkStats::Streams& t = ps->streams;
    for (int s = 1; s < streams_; ++s)
      if (const TcpConnection* c = p.streams[static_cast<size_t>(s)].get()) t.each.push_back(c->info());
    t.open = static_cast<int>(t.each.size());
    t.width = p.width;
    if (p.width_control) t.width_changes = p.width_control->changes();
    if (ps->relay < 0 && p.two_hop_min_bytes > 0) {
      ps->two_hop_min_bytes = p.two_hop_min_bytes;
      for (const auto& st : t.each)
        if (st.via >= 0) ps->two_hop = st.via;
    }
    // The smoothed RTT: the data streams' mean weighted by the bytes each sent, the RTT this
    // rank's traffic to the peer saw. The kernel samples RTT only from acks of data sent, so a
    // stream that sent nothing or little still holds its handshake's figure, which a lost SYN or
    // Hello leaves near a retransmission timeout (805 ms beside three streams at 25 ms, on a 20 ms
    // path, to a peer a ring only receives from; 700 ms on one that got 300 KB). Below
    // kRttWeightBytes sent in all, the least smoothed RTT of the data streams and the control
    // stream (which heartbeats keep sampling): a path that carried little has no queue to show.
    constexpr double kRttWeightBytes = 4 << 20;
    double rtt_weighted = 0, rtt_least = 0, weight = 0;
    auto least = [&](double ms) {
      if (ms > 0 && (rtt_least == 0 || ms < rtt_least)) rtt_least = ms;
    };
    for (const auto& st : t.each) {
      least(st.rtt_ms);
      rtt_weighted += st.rtt_ms * static_cast<double>(st.bytes_sent);
      weight += static_cast<double>(st.bytes_sent);
    }
    if (const TcpConnection* control = p.streams[kControlStream].get())
      least(static_cast<double>(control->srtt().count()) / 1e3);
    ps->rtt_ms = weight >= kRttWeightBytes ? rtt_weighted / weight : rtt_least;
    for (const auto& st : t.each) {
      if (t.congestion_control.empty()) t.congestion_control = st.congestion_control;
      if (st.min_rtt_ms > 0 && (t.min_rtt_ms == 0 || st.min_rtt_ms < t.min_rtt_ms)) t.min_rtt_ms = st.min_rtt_ms;
      ps->frames_sent += st.frames_sent;
      ps->frames_received += st.frames_received;
      t.cwnd_segments += st.cwnd_segments;
      t.retransmits += st.retransmits;
      t.bytes_retransmitted += st.bytes_retransmitted;
      t.delivery_rate_bps += st.delivery_rate_bps;
      t.pacing_rate_bps += st.pacing_rate_bps;
    }
  };
  group_.loop().run_owned(read_info);
}

}  // namespace geoccl::transport::tcp
