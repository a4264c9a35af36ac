#include "transport/quic/device.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/tcp/address.h"
#include "runtime/socket.h"

namespace geoccl::transport::quic {

namespace {

using protocol::FrameHeader;
enum Target { kUnknown = 0, kPosted = 1, kStaged = 2, kDiscard = 3 };

// The time a connection is given: steady_clock in nanoseconds, as ngtcp2 takes it.
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

}  // namespace

QuicDevice::QuicDevice(Group& group, const std::string& bind_addr, const QuicOptions& options)
    : group_(group), options_(options), sock_(bind_addr, options.socket_buffer_bytes) {
  std::string host;
  uint16_t port = 0;
  runtime::split_host_port(endpoint_string(sock_.local()), &host, &port);
  endpoint_ = tcp::join_host_port(bind_addr, port);
  for (int r = 0; r < group_.size(); ++r) {
    auto p = std::make_unique<QuicPeer>();
    p->rank = r;
    peers_.push_back(std::move(p));
  }
  group_.loop().run_owned([this] {
    group_.loop().add_fd(sock_.fd(), EPOLLIN, [this](uint32_t ev) { on_readable(ev); });
    watch();
  });
  failure_listener_ = group_.on_failure([this](const Failure& f, bool tell) { on_group_failure(f, tell); });
  GEOCCL_LOG(kDebug, "QUIC: listening on " << endpoint_ << ", certificate " << short_fingerprint(cred_.fingerprint())
                                           << ", congestion control " << options_.congestion_control
                                           << (sock_.gso() ? ", UDP GSO" : ""));
}

QuicDevice::~QuicDevice() {
  shutdown();
  group_.remove_failure_listener(failure_listener_);
  group_.loop().run_owned([this] {
    group_.loop().remove_fd(sock_.fd());
    if (watch_timer_) group_.loop().cancel_timer(watch_timer_);
    watch_timer_ = 0;
    for (auto& p : peers_) p->conn = p->redial = nullptr;
    for (auto& c : conns_) disarm(c.get());
    retired_.clear();
    conns_.clear();
    routes_.clear();
  });
}

std::vector<uint8_t> QuicDevice::address() const { return encode_address({endpoint_, cred_.fingerprint()}); }

bool QuicDevice::reaches(std::span<const uint8_t> peer_address) const {
  Address a;
  return decode_address(peer_address, &a);
}

void QuicDevice::route(const std::string& cid, QuicConnection* c) { routes_[cid] = c; }

QuicPeer* QuicDevice::peer_at(const Endpoint& ep) {
  for (auto& p : peers_)
    if (p->known && p->endpoint == ep) return p.get();
  return nullptr;
}

void QuicDevice::unroute(const std::string& cid) {
  auto it = routes_.find(cid);
  if (it != routes_.end()) routes_.erase(it);
}

QuicConnection* QuicDevice::find(std::span<const uint8_t> pkt) {
  ngtcp2_version_cid vc;
  const int rv = ngtcp2_pkt_decode_version_cid(&vc, pkt.data(), pkt.size(), kCidLen);
  if (rv != 0 && rv != NGTCP2_ERR_VERSION_NEGOTIATION) return nullptr;
  auto it = routes_.find(std::string(reinterpret_cast<const char*>(vc.dcid), vc.dcidlen));
  return it == routes_.end() ? nullptr : it->second;
}

void QuicDevice::on_readable(uint32_t events) {
  if (events & EPOLLERR) {
    sock_.read_errors([this](const Endpoint& to, int err, const std::string& text) {
      for (auto& p : peers_) {
        if (!p->known || !(p->endpoint == to) || p->goodbye || closing_.load()) continue;
        if (err == ECONNREFUSED && p->conn)
          connection_lost(*p, ErrorCode::kPeerLost,
                          "rank " + std::to_string(p->rank) + " at " + p->address.endpoint +
                              " refuses QUIC packets (" + text + "): its process is gone");
      }
    });
  }
  if (events & EPOLLOUT) writable();
  if (events & EPOLLIN) {
    sock_.receive([this](const Endpoint& from, std::span<const uint8_t> pkt) {
      if (QuicConnection* c = find(pkt)) {
        c->on_packet(from, pkt, now_ns());
        return;
      }
      ngtcp2_pkt_hd hd;
      if (closing_.load() || ngtcp2_accept(&hd, pkt.data(), pkt.size()) != 0) return;  // stray packet
      try {
        const uint64_t now = now_ns();
        auto c = std::make_unique<QuicConnection>(*this, from, hd, now);
        QuicConnection* raw = c.get();
        conns_.push_back(std::move(c));
        raw->on_packet(from, pkt, now);
      } catch (const Error& e) {
        GEOCCL_LOG(kWarn, "QUIC: cannot accept a connection from " << endpoint_string(from) << ": " << e.what());
      }
    });
  }
  drop_retired();
}

void QuicDevice::want_writable() {
  if (want_out_) return;
  want_out_ = true;
  group_.loop().modify_fd(sock_.fd(), EPOLLIN | EPOLLOUT);
}

void QuicDevice::writable() {
  if (want_out_) {
    want_out_ = false;
    group_.loop().modify_fd(sock_.fd(), EPOLLIN);
  }
  for (size_t i = 0; i < conns_.size(); ++i) {
    QuicConnection& c = *conns_[i];
    if (!c.socket_full()) continue;
    c.set_socket_full(false);
    if (!transmit(c)) {
      if (c.socket_full()) return;  // full again: the rest wait for the next EPOLLOUT
      continue;                     // this one failed; the others go on
    }
    c.write(now_ns());
  }
}

void QuicDevice::flush(QuicConnection& c) {
  if (transmit(c)) arm(c);
}

bool QuicDevice::transmit(QuicConnection& c) {
  auto& out = c.outbox();
  while (!out.empty()) {
    QuicConnection::TxBatch& b = out.front();
    size_t sent = 0;
    const auto r = sock_.send(c.remote(), b.bytes, b.bytes.size() > b.segment ? b.segment : 0, &sent);
    if (c.peer()) c.peer()->bytes_sent.fetch_add(sent, std::memory_order_relaxed);
    if (r == UdpSocket::SendResult::kBlocked) {
      b.bytes.erase(b.bytes.begin(), b.bytes.begin() + static_cast<std::ptrdiff_t>(sent));
      c.set_socket_full(true);
      want_writable();
      return false;
    }
    c.batch_sent();
    if (r == UdpSocket::SendResult::kError) {
      out.clear();
      c.send_failed();
      return false;
    }
  }
  return true;
}

void QuicDevice::arm(QuicConnection& c) {
  if (c.state() == QuicConnection::State::kClosed) return disarm(&c);
  Timers& t = timers_[&c];
  const uint64_t expiry = c.expiry();
  if (expiry != t.at || !t.expiry) {
    if (t.expiry) group_.loop().cancel_timer(t.expiry);
    t.expiry = 0;
    t.at = expiry;
    if (expiry != UINT64_MAX)
      t.expiry = group_.loop().add_timer(Clock::time_point(std::chrono::nanoseconds(expiry)), [this, &c] {
        Timers& tt = timers_[&c];
        tt.expiry = 0;
        tt.at = 0;
        c.on_expiry(now_ns());
      });
  }
  if (c.wants_write() && !t.kick)
    t.kick = group_.loop().add_timer(Clock::now(), [this, &c] {
      timers_[&c].kick = 0;
      c.write(now_ns());
    });
}

void QuicDevice::disarm(QuicConnection* c) {
  auto it = timers_.find(c);
  if (it == timers_.end()) return;
  if (it->second.expiry) group_.loop().cancel_timer(it->second.expiry);
  if (it->second.kick) group_.loop().cancel_timer(it->second.kick);
  timers_.erase(it);
}

void QuicDevice::retire(QuicConnection* c) {
  if (std::find(retired_.begin(), retired_.end(), c) != retired_.end()) return;
  retired_.push_back(c);
  disarm(c);
  for (auto& p : peers_) {
    if (p->conn == c) p->conn = nullptr;
    if (p->redial == c) p->redial = nullptr;
  }
  // Dropped after the event that closed it (it may be inside its own call stack now).
  group_.loop().post([this] { drop_retired(); });
}

void QuicDevice::drop_retired() {
  if (retired_.empty()) return;
  std::vector<QuicConnection*> r;
  r.swap(retired_);
  for (QuicConnection* c : r) {
    // A dialled connection's fate is read by connect(): it stays until connect() has seen it.
    if (c->peer() && c->peer()->rank < group_.rank() && dialing_) {
      retired_.push_back(c);
      continue;
    }
    disarm(c);
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [c](const auto& u) { return u.get() == c; }),
                 conns_.end());
  }
}

void QuicDevice::judge_hello(protocol::HandshakeAcceptor& hs, QuicConnection& c, bool* wait) {
  *wait = false;
  if (hs.state() == protocol::HandshakeState::kJudge) {
    const int from = static_cast<int>(hs.hello().rank);
    QuicPeer& p = peer(from);
    if (!p.known) {
      *wait = true;
      return;
    }
    Fingerprint got{};
    if (!peer_fingerprint(c.tls(), &got) || got != p.address.fingerprint) {
      hs.refuse(protocol::HandshakeStatus::kBadRank,
                "the certificate of a client claiming rank " + std::to_string(from) + " (" + short_fingerprint(got) +
                    ") is not the one rank " + std::to_string(from) + " published");
    } else {
      // A second connection from the same, authenticated peer replaces the first (established()):
      // it re-dialled a silent connection, or its first attempt never heard our Reply.
      if (p.conn) GEOCCL_LOG(kDebug, "QUIC: rank " << from << " dials again; its new connection will replace the old");
      c.set_peer(&p);
      hs.accept();
    }
  }
  if (hs.state() == protocol::HandshakeState::kRefused) rejected_.fetch_add(1);
}

bool QuicDevice::connected_to(int peer_rank) const {
  bool up = false;
  group_.loop().run_owned([&] { up = peers_[static_cast<size_t>(peer_rank)]->conn != nullptr; });
  return up;
}

void QuicDevice::established(QuicConnection& c) {
  QuicPeer& p = *c.peer();
  if (p.redial == &c) p.redial = nullptr;
  QuicConnection* old = p.conn;
  p.conn = &c;
  p.redials = 0;
  if (!old || old == &c) {
    GEOCCL_LOG(kDebug, "QUIC: connected with rank " << p.rank << " at " << endpoint_string(c.remote()));
    group_.notify();
    return;
  }
  // A replacement: the old connection goes without a word (its peer drops its end the same way),
  // frames it held in part come again from the start, and every frame the peer has not
  // acknowledged is sent again (the peer discards those it has: exactly once).
  const auto silent_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - old->last_received()).count();
  old->drop("replaced by a new connection");
  for (auto it = p.staged.begin(); it != p.staged.end();)
    it = it->second.complete() ? std::next(it) : p.staged.erase(it);
  // (Frames a 0-RTT dialler sent as early data are on `c` already.)
  // (A send that fails may fail the group, which drops the kept frames: post from a copy.)
  std::vector<std::shared_ptr<OutFrame>> again;
  for (const auto& [frame, k] : p.session.unacked())
    if (!c.carries(frame)) again.push_back(k.token);
  for (const auto& f : again) post(p, c, f);
  p.reconnects.fetch_add(1, std::memory_order_relaxed);
  p.frames_resent.fetch_add(p.session.unacked_frames(), std::memory_order_relaxed);
  if (p.rank < group_.rank()) {  // we dialled it: its reconnect time ends when the frames re-sent are in
    p.recovering = true;
    p.recover_upto = p.session.unacked().empty() ? 0 : p.session.unacked().rbegin()->first;
    // From its first answer: what came before is the outage (or the lost attempts), not the
    // cost of reconnecting.
    p.recover_since = c.first_received() == Clock::time_point{} ? Clock::now() : c.first_received();
  }
  if (c.zero_rtt()) p.zero_rtt.fetch_add(1, std::memory_order_relaxed);
  if (c.zero_rtt_refused()) p.zero_rtt_refused.fetch_add(1, std::memory_order_relaxed);
  GEOCCL_LOG(kInfo, "QUIC: a new connection with rank "
                        << p.rank << " replaces one silent for " << silent_ms << " ms ("
                        << (c.zero_rtt() ? "0-RTT" : c.zero_rtt_refused() ? "0-RTT refused, full handshake" : "full handshake")
                        << "); " << p.session.unacked_frames() << " frame(s) sent again");
  if (p.recovering) check_recovered(p);
  group_.notify();
}

void QuicDevice::post(QuicPeer& p, QuicConnection& c, const std::shared_ptr<OutFrame>& f) {
  c.post_frame(f, now_ns());
  if (f->payload->size() > options_.duplicate_bytes) return;
  c.post_frame(f, now_ns());
  p.frames_duplicated.fetch_add(1, std::memory_order_relaxed);
}

void QuicDevice::watch() {
  watch_timer_ = group_.loop().add_timer(Clock::now() + std::chrono::milliseconds(250), [this] {
    watch_timer_ = 0;
    if (closing_.load()) return;
    watch();
  });
  const auto now = Clock::now();
  for (auto& pp : peers_)
    if (pp->conn) measure(*pp, now);
  if (options_.redial_after.count() <= 0) return;
  for (auto& pp : peers_) {
    QuicPeer& p = *pp;
    QuicConnection* c = p.conn;
    if (!p.known || p.rank >= group_.rank() || !c || p.redial || p.goodbye) continue;
    // Silence is suspect when this side waits for an acknowledgement or for a frame.
    const auto silent = now - c->last_received();
    if (silent < options_.redial_after || (c->bytes_in_flight() == 0 && !p.session.window().pending())) {
      if (silent < options_.redial_after) p.redials = 0;
      continue;
    }
    if (now - p.last_redial < options_.redial_after) continue;
    p.last_redial = now;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
    if (p.redials++ == 0)
      GEOCCL_LOG(kInfo, "QUIC: nothing from rank " << p.rank << " for " << ms
                                                   << " ms with data in flight: dialling it again beside the old connection");
    dial_again(p);
  }
}

void QuicDevice::dial_again(QuicPeer& p) {
  try {
    auto nc = std::make_unique<QuicConnection>(*this, &p, p.endpoint, now_ns(), options_.redial_after);
    p.redial = nc.get();
    conns_.push_back(std::move(nc));
    // 0-RTT: the frames not yet acknowledged ride the first flight (and are not posted again
    // when it is established: established()).
    if (p.redial->early()) {
      std::vector<std::shared_ptr<OutFrame>> again;
      for (const auto& [frame, k] : p.session.unacked()) again.push_back(k.token);
      for (const auto& f : again)
        if (p.redial) post(p, *p.redial, f);  // (a failed send retires it)
    }
    if (p.redial) p.redial->write(now_ns());
  } catch (const Error& e) {
    GEOCCL_LOG(kWarn, "QUIC: cannot dial rank " << p.rank << " again: " << e.what());
  }
}

void QuicDevice::redial_now(int peer_rank) {
  group_.loop().run_owned([&] {
    QuicPeer& p = peer(peer_rank);
    if (p.rank >= group_.rank() || !p.conn || p.redial) return;
    p.last_redial = Clock::now();
    dial_again(p);
  });
}

void QuicDevice::deafen_for_test(int peer_rank) {
  group_.loop().run_owned([&] {
    if (QuicConnection* c = peer(peer_rank).conn) c->deafen_for_test();
  });
}

void QuicDevice::measure(QuicPeer& p, Clock::time_point now) {
  const ngtcp2_conn_stat st = p.conn->conn_stat();
  const uint64_t rx = p.bytes_received.load(std::memory_order_relaxed);
  uint64_t rate = st.delivery_rate_sec * 8;
  if (p.rate_mark_at != Clock::time_point{} && rx >= p.rate_mark_bytes) {
    const double s = std::chrono::duration<double>(now - p.rate_mark_at).count();
    if (s > 0) rate = std::max(rate, static_cast<uint64_t>(static_cast<double>(rx - p.rate_mark_bytes) * 8 / s));
  }
  p.rate_mark_bytes = rx;
  p.rate_mark_at = now;
  // Before the first acknowledged packet ngtcp2's RTT is its initial guess, not a measurement.
  // The path's own delay is the lowest RTT seen (the handshake's is the first sample): the
  // smoothed RTT adds the queue that the windows themselves let build up, and sizing from it would
  // feed on itself (measured on p2p-150ms under load: 245-400 ms smoothed for a 150 ms path).
  if (st.min_rtt == UINT64_MAX || st.min_rtt == 0) return;
  p.path_rtt_ns = st.min_rtt;
  p.path_rate_bps = std::max(p.path_rate_bps, rate);
  if (p.path_rate_bps == 0) return;
  const FlowWindows w = size_windows(p.path_rtt_ns, p.path_rate_bps, options_.window_limits());
  if (p.conn->widen(w, p.path_rtt_ns, p.path_rate_bps, now_ns()))
    GEOCCL_LOG(kDebug, "QUIC: windows to rank " << p.rank << " sized for " << p.path_rtt_ns / 1000 << " us x "
                                                << p.path_rate_bps / 1000000 << " Mbit/s: connection " << w.connection
                                                << " B, stream " << w.stream << " B");
}

void QuicDevice::connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
                         Clock::time_point deadline) {
  ThrottledPoll maybe_poll(poll);
  // Every peer's address: the lower ranks' to dial, the higher ranks' to check their
  // certificates against when they dial us.
  for (int r : peers) {
    Address a;
    if (!decode_address(address_of(r), &a))
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(r) + " published a malformed QUIC address");
    const Endpoint ep = resolve_endpoint(a.endpoint);
    group_.loop().run_owned([&] {
      QuicPeer& p = peer(r);
      p.address = a;
      p.endpoint = ep;
      p.known = true;
      for (auto& c : conns_)
        if (c->awaiting_fingerprint()) c->recheck_hello(now_ns());
    });
  }
  group_.loop().run_owned([&] { dialing_ = true; });
  struct DialGuard {
    QuicDevice* d;
    ~DialGuard() {
      d->group_.loop().run_owned([this] {
        d->dialing_ = false;
        d->drop_retired();
      });
    }
  } guard{this};
  std::map<int, QuicConnection*> dialled;
  auto dial = [&](int r) {
    group_.loop().run_owned([&] {
      QuicPeer& p = peer(r);
      auto c = std::make_unique<QuicConnection>(*this, &p, p.endpoint, now_ns());
      dialled[r] = c.get();
      conns_.push_back(std::move(c));
      dialled[r]->write(now_ns());
    });
  };
  for (int r : peers)
    if (r < group_.rank()) dial(r);
  for (;;) {
    std::string missing, refused;
    std::vector<int> redial;
    group_.loop().run_owned([&] {
      for (int r : peers) {
        QuicPeer& p = peer(r);
        if (p.conn) continue;
        missing += (missing.empty() ? "" : ",") + std::to_string(r);
        auto it = dialled.find(r);
        if (it == dialled.end() || it->second->state() != QuicConnection::State::kClosed) continue;
        if (it->second->rejected()) refused = it->second->close_reason();
        else redial.push_back(r);  // lost handshake, timeout: dial again
      }
    });
    if (!refused.empty()) {
      maybe_poll();  // a peer with other group parameters: its own reason says more
      throw Error(ErrorCode::kProtocol, refused);
    }
    if (missing.empty()) break;
    if (Clock::now() > deadline)
      throw Error(ErrorCode::kTimeout, "rank(s) " + missing + " did not connect in time (QUIC)");
    for (int r : redial) dial(r);
    maybe_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// ---- Frames.

RequestPtr QuicDevice::send(int peer_rank, const FrameHeader& h, std::span<const uint8_t> payload) {
  auto req = std::make_shared<Request>();
  if (payload.size() > protocol::kMaxPayload) {
    complete(req, {ErrorCode::kInvalidArgument, "frame payload over " + std::to_string(protocol::kMaxPayload) + " bytes"});
    return req;
  }
  auto f = std::make_shared<OutFrame>();
  // The copy is made here, on the caller's thread, so the loop thread keeps its time for packets
  // and crypto; the loop numbers the frame and completes the request (buffer reusable).
  f->payload = std::make_shared<std::vector<uint8_t>>(payload.begin(), payload.end());
  f->delivery = req;
  FrameHeader hh = h;
  hh.type = protocol::FrameType::kData;
  hh.payload_len = static_cast<uint32_t>(payload.size());
  group_.loop().post([this, peer_rank, hh, f, req]() mutable {
    if (group_.complete_if_failed(req)) return;
    QuicPeer& p = peer(peer_rank);
    if (!p.conn) {
      complete(req, {ErrorCode::kPeerLost, "QUIC connection to rank " + std::to_string(peer_rank) + " is closed"});
      group_.notify();
      return;
    }
    FrameHeader numbered = hh;
    numbered.frame = p.session.number_frame();
    f->frame = numbered.frame;
    f->header = protocol::encode_frame_header(numbered);
    p.session.written(f->frame, 0, f->header, *f->payload, f, f->payload);
    p.frames_sent.fetch_add(1, std::memory_order_relaxed);
    complete(req);
    group_.notify();
    post(p, *p.conn, f);
  });
  return req;
}

void QuicDevice::frame_delivered(QuicPeer& p, uint64_t frame) {
  p.session.delivered(frame);
  if (p.recovering) check_recovered(p);
  group_.notify();
}

void QuicDevice::check_recovered(QuicPeer& p) {
  if (!p.session.unacked().empty() && p.session.unacked().begin()->first <= p.recover_upto) return;
  p.recovering = false;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - p.recover_since).count();
  p.reconnect_us.store(static_cast<uint64_t>(us), std::memory_order_relaxed);
  GEOCCL_LOG(kInfo, "QUIC: rank " << p.rank << ": every frame re-sent was acknowledged " << us / 1000.0
                                  << " ms after the re-dialled connection's first answer ("
                                  << (p.conn && p.conn->zero_rtt() ? "0-RTT" : "full handshake") << ")");
}

RequestPtr QuicDevice::recv(int peer_rank, const FrameHeader& expect, std::span<uint8_t> dst) {
  auto req = std::make_shared<Request>();
  QuicRecvOp op{expect, dst, req};
  group_.loop().post([this, peer_rank, op = std::move(op)]() mutable {
    if (group_.complete_if_failed(op.req)) return;
    QuicPeer& p = peer(peer_rank);
    if (!p.conn && p.staged.empty()) {
      complete(op.req, {ErrorCode::kPeerLost, "QUIC connection to rank " + std::to_string(peer_rank) + " is closed"});
      group_.notify();
      return;
    }
    const uint64_t frame = p.session.window().post(std::move(op));
    auto it = p.staged.find(frame);
    if (it != p.staged.end() && it->second.complete()) deliver_staged(p, frame);
  });
  return req;
}

void QuicDevice::deliver_staged(QuicPeer& p, uint64_t frame) {
  auto it = p.staged.find(frame);
  StagedFrame& s = it->second;
  QuicRecvOp& op = p.session.window().at(frame);
  if (!group_.check_frame(p.rank, op.expect, s.h, op.dst.size())) return;
  if (!s.payload.empty()) std::memcpy(op.dst.data(), s.payload.data(), s.payload.size());
  QuicRecvOp done = p.session.window().complete(frame);
  done.req->bytes = s.payload.size();
  p.staged.erase(it);
  p.frames_received.fetch_add(1, std::memory_order_relaxed);
  complete(done.req);
  group_.notify();
}

void QuicDevice::frame_header(QuicPeer& p, const FrameHeader& h, int* target) {
  *target = kDiscard;
  // The second copy of a small frame, or a frame sent again on a replacing connection: it may
  // fill in what the first copy still lacks (each stream's bytes arrive in order from 0, so the
  // bytes present are the longest prefix either copy brought).
  if (auto it = p.staged.find(h.frame); it != p.staged.end()) {
    if (!it->second.complete() && it->second.h == h) *target = kStaged;
    return;
  }
  switch (p.session.window().lookup(h.frame)) {
    case protocol::RecvWindow<QuicRecvOp>::Lookup::kPosted: {
      QuicRecvOp& op = p.session.window().at(h.frame);
      if (group_.check_frame(p.rank, op.expect, h, op.dst.size())) *target = kPosted;
      return;
    }
    case protocol::RecvWindow<QuicRecvOp>::Lookup::kNotPosted: {
      StagedFrame s;
      s.h = h;
      s.payload.resize(h.payload_len);
      p.staged.emplace(h.frame, std::move(s));
      *target = kStaged;
      group_.early_frame(p.rank, h);
      return;
    }
    case protocol::RecvWindow<QuicRecvOp>::Lookup::kStale: return;  // received already
  }
}

void QuicDevice::frame_bytes(QuicPeer& p, const FrameHeader& h, int target, size_t at, std::span<const uint8_t> bytes) {
  p.bytes_received.fetch_add(bytes.size(), std::memory_order_relaxed);
  if (target == kPosted) {
    if (p.session.window().lookup(h.frame) != protocol::RecvWindow<QuicRecvOp>::Lookup::kPosted) return;  // failed
    std::memcpy(p.session.window().at(h.frame).dst.data() + at, bytes.data(), bytes.size());
  } else if (target == kStaged) {
    auto it = p.staged.find(h.frame);
    if (it == p.staged.end()) return;
    std::memcpy(it->second.payload.data() + at, bytes.data(), bytes.size());
    it->second.got = std::max(it->second.got, at + bytes.size());
  }
}

void QuicDevice::frame_complete(QuicPeer& p, const FrameHeader& h, int target) {
  if (target == kPosted) {
    if (p.session.window().lookup(h.frame) != protocol::RecvWindow<QuicRecvOp>::Lookup::kPosted) return;
    QuicRecvOp op = p.session.window().complete(h.frame);
    op.req->bytes = h.payload_len;
    p.frames_received.fetch_add(1, std::memory_order_relaxed);
    complete(op.req);
    group_.notify();
  } else if (target == kStaged) {
    // Its receive may have been posted while it arrived.
    if (p.session.window().lookup(h.frame) == protocol::RecvWindow<QuicRecvOp>::Lookup::kPosted)
      deliver_staged(p, h.frame);
  }
}

void QuicDevice::recheck_early_frames() {
  for (auto& p : peers_)
    for (auto& [frame, s] : p->staged) group_.early_frame(p->rank, s.h);
}

void QuicDevice::connection_lost(QuicPeer& p, ErrorCode code, const std::string& why) {
  if (p.conn) p.conn = nullptr;
  if (closing_.load()) return;
  if (p.goodbye && !p.session.window().pending()) return;
  group_.fail(code, why, true, failed_peers(code, p.rank));
}

void QuicDevice::on_group_failure(const Failure& f, bool tell_peers) {
  for (auto& p : peers_) {
    p->session.window().drain([&](QuicRecvOp& r) { complete(r.req, f); });
    p->staged.clear();
    p->session.drop_unacked([](std::shared_ptr<OutFrame>&) {});
  }
  if (!tell_peers) return;
  const auto payload = protocol::encode_abort(static_cast<uint8_t>(f.code), f.message, f.ranks);
  for (auto& p : peers_)
    if (p->conn) p->conn->post_control(protocol::FrameType::kAbort, payload, now_ns());
}

// ---- Liveness and statistics.

void QuicDevice::send_heartbeat(int peer_rank, std::span<const uint8_t> payload) {
  QuicPeer& p = peer(peer_rank);
  if (p.conn) p.conn->post_control(protocol::FrameType::kHeartbeat, payload, now_ns());
}

bool QuicDevice::host_answers(int peer_rank, std::chrono::milliseconds recent) const {
  const QuicPeer& p = *peers_[static_cast<size_t>(peer_rank)];
  if (!p.conn) return false;
  return p.conn->bytes_in_flight() == 0 || Clock::now() - p.conn->last_received() < recent;
}

void QuicDevice::stats(LinkStats* ps) const {
  const QuicPeer& p = *peers_[static_cast<size_t>(ps->peer)];
  ps->bytes_sent = p.bytes_sent.load();
  ps->bytes_received = p.bytes_received.load();
  ps->frames_sent = p.frames_sent.load();
  ps->frames_received = p.frames_received.load();
  group_.loop().run_owned([&] {
    LinkStats::Quic& q = ps->quic;
    q.congestion_control = options_.congestion_control;
    q.gso = sock_.gso();
    q.frames_duplicated = p.frames_duplicated.load();
    q.reconnects = p.reconnects.load();
    q.frames_resent = p.frames_resent.load();
    q.zero_rtt = p.zero_rtt.load();
    q.zero_rtt_refused = p.zero_rtt_refused.load();
    q.reconnect_ms = static_cast<double>(p.reconnect_us.load()) / 1e3;
    if (!p.conn) return;
    const ngtcp2_conn_stat st = p.conn->conn_stat();
    ps->rtt_ms = static_cast<double>(st.smoothed_rtt) / 1e6;
    q.min_rtt_ms = static_cast<double>(st.min_rtt) / 1e6;
    q.cwnd_bytes = st.cwnd;
    q.bytes_in_flight = st.bytes_in_flight;
    q.delivery_rate_bps = st.delivery_rate_sec * 8;
    q.pacing_rate_bps = static_cast<uint64_t>(st.pacing_rate * 8e9);
    q.streams_opened = p.conn->streams_opened();
    const FlowWindows& w = p.conn->windows();
    q.window_bytes = w.connection;
    q.stream_window_bytes = w.stream;
    q.max_window_bytes = w.max_connection;
    q.window_rtt_ns = p.conn->windows_rtt_ns();
    q.window_rate_bps = p.conn->windows_rate_bps();
  });
}

void QuicDevice::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  closing_.store(true);
  group_.loop().run_owned([this] {
    for (auto& p : peers_)
      if (p->conn) p->conn->post_control(protocol::FrameType::kGoodbye, {}, now_ns());
  });
  // Bounded wait for goodbyes (and aborts) to be acknowledged; a dead peer must not hold us.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool drained = true;
    group_.loop().run_owned([&] {
      for (auto& p : peers_)
        if (p->conn && !p->conn->control_drained()) drained = false;
    });
    if (drained || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  group_.loop().run_owned([this] {
    for (auto& c : conns_) c->close("shutdown", false, now_ns());
    for (auto& p : peers_) p->conn = nullptr;
  });
}

}  // namespace geoccl::transport::quic
