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
// An inbound connection must introduce itself within this time or it is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// How often the stream width controller samples (stream_width.h).
constexpr auto kWidthInterval = std::chrono::milliseconds(50);
}  // namespace

// An inbound connection in its handshake (protocol/handshake_machine.h). Nothing but the
// handshake is read from it until the dialler has proven the secret; the machine asks for no more
// than its messages, so the first frames stay in the socket for the connection.
struct TcpDevice::PendingAccept {
  int fd = -1;
  runtime::EventLoop::TimerId timer = 0;
  std::unique_ptr<protocol::HandshakeAcceptor> hs;
};

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
  for (int r = 0; r < group_.size(); ++r) {
    auto p = std::make_unique<TcpPeer>();
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

void TcpDevice::on_accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    set_nodelay(fd);
    auto p = std::make_unique<PendingAccept>();
    p->fd = fd;
    p->hs = std::make_unique<protocol::HandshakeAcceptor>(
        group_.handshake_setup(protocol::Transport::kTcp, static_cast<uint16_t>(streams_)));
    p->timer = group_.loop().add_timer(Clock::now() + kHandshakeTimeout, [this, fd] {
      GEOCCL_LOG(kWarn, "dropping inbound connection that sent no handshake");
      rejected_.fetch_add(1);
      drop_pending(fd);
      ::close(fd);
    });
    group_.loop().add_fd(fd, EPOLLIN, [this, fd](uint32_t) { on_pending_readable(fd); });
    pending_.push_back(std::move(p));
  }
}

void TcpDevice::drop_pending(int fd) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if ((*it)->fd != fd) continue;
    group_.loop().cancel_timer((*it)->timer);
    group_.loop().remove_fd(fd);
    pending_.erase(it);
    return;
  }
}

protocol::HandshakeStatus TcpDevice::admit(const protocol::Hello& hello, TcpConnection** existing, std::string* why) {
  // Only higher ranks connect to us, once per stream; a data stream may be connected again when
  // we resume streams (the peer found it broken), and only while the group stands.
  const int from = static_cast<int>(hello.rank);
  auto who = [&] { return "rank " + std::to_string(from) + " stream " + std::to_string(hello.stream); };
  *existing = from > group_.rank() ? conn(from, hello.stream) : nullptr;  // the handshake saw to that
  if (const char* refusal = *existing ? resume_refusal(peer(from), hello.stream) : nullptr) {
    *why = who() + " is connected and cannot be replaced: " + refusal;
    return protocol::HandshakeStatus::kBadRank;
  }
  return protocol::HandshakeStatus::kAccepted;
}

const char* TcpDevice::resume_refusal(const TcpPeer& p, int stream) const {
  const TcpConnection* control = p.streams[kControlStream].get();
  if (!p.resume) return "stream resume is off for the peer";
  if (group_.failed()) return "the group has failed";
  if (closing_.load()) return "this rank is closing";
  if (!control) return "no control stream";
  if (control->said_goodbye()) return "the peer said goodbye";
  if (stream != kControlStream && !control->usable()) return "the control stream is closed";
  return nullptr;
}

void TcpDevice::reject_pending(int fd, const std::string& why) {
  GEOCCL_LOG(kWarn, "rejected inbound connection: " << why);
  rejected_.fetch_add(1);
  drop_pending(fd);
  ::close(fd);
}

void TcpDevice::on_pending_readable(int fd) {
  PendingAccept* p = nullptr;
  for (auto& q : pending_)
    if (q->fd == fd) p = q.get();
  if (!p) return;
  protocol::HandshakeAcceptor& hs = *p->hs;
  std::array<uint8_t, 512> buf;
  const ssize_t n = ::recv(fd, buf.data(), std::min(buf.size(), hs.want()), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    rejected_.fetch_add(1);
    drop_pending(fd);
    ::close(fd);
    return;
  }
  hs.feed(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
  // A rank that cannot reach another asks us to carry its connection there (relay.h).
  if (hs.state() == protocol::HandshakeState::kJudge && hs.relay_request()) return serve_relay(fd, hs);
  TcpConnection* existing = nullptr;
  std::string admit_why;
  if (hs.state() == protocol::HandshakeState::kJudge || hs.state() == protocol::HandshakeState::kDone) {
    // Judged again once the proof is in: the state may have changed while it travelled.
    const bool proven = hs.state() == protocol::HandshakeState::kDone;
    const auto st = admit(hs.hello(), &existing, &admit_why);
    if (proven && st != protocol::HandshakeStatus::kAccepted) return reject_pending(fd, "(authenticated) " + admit_why);
    if (st != protocol::HandshakeStatus::kAccepted) hs.refuse(st, admit_why);
    else if (!proven) hs.accept();
  }
  // The answers are a few dozen bytes on a fresh socket: they fit in the send buffer.
  if (const auto out = hs.take_output(); !out.empty())
    [[maybe_unused]] ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (hs.state() == protocol::HandshakeState::kRefused) {
    const std::string who = "rank " + std::to_string(hs.hello().rank) + " stream " + std::to_string(hs.hello().stream);
    if (!hs.auth_failed()) return reject_pending(fd, hs.why());
    last_auth_failure_ = "a connection claiming to be " + who + " failed authentication: " + hs.why();
    return reject_pending(fd, last_auth_failure_);
  }
  if (hs.state() != protocol::HandshakeState::kDone) return;  // more to read (the rest, the proof)
  const protocol::Hello hello = hs.hello();
  const security::ConnectionKeys keys = hs.keys();
  drop_pending(fd);  // frees *p
  const int via = note_relay(hello);
  if (existing) return existing->resume(fd, keys, via);
  adopt(fd, static_cast<int>(hello.rank), hello.stream, keys, via);
}

int TcpDevice::note_relay(const protocol::Hello& hello) {
  TcpPeer& p = peer(static_cast<int>(hello.rank));
  if (!(hello.flags & protocol::kHelloFlagRelayed)) {
    // The dialler's failed-over pair is direct again.
    if (hello.stream == kControlStream && p.relay.exchange(-1) >= 0)
      GEOCCL_LOG(kInfo, "rank " << hello.rank << " connects to us directly again");
    return -1;
  }
  const int via = static_cast<int>(hello.via);
  if (hello.stream != kControlStream) {
    if (p.relay.load() != via)
      GEOCCL_LOG(kDebug, "data stream " << hello.stream << " of rank " << hello.rank << " comes through rank " << via
                                        << "'s relay (two-hop path)");
    return via;
  }
  if (p.relay.exchange(via) != via)
    GEOCCL_LOG(kInfo, "rank " << hello.rank << " connects to us through rank " << via << "'s relay");
  return via;
}

void TcpDevice::serve_relay(int fd, const protocol::HandshakeAcceptor& hs) {
  const protocol::Hello hello = hs.hello();
  const auto ok = hs.relay_reply(true), no = hs.relay_reply(false);
  const int from = static_cast<int>(hello.rank), to = static_cast<int>(hello.via);
  drop_pending(fd);  // frees hs
  if (closing_.load()) {
    ::close(fd);
    return;
  }
  // Only to a rank of this group, at the address it published (never one the request names):
  // a stranger gets no further than the handshake of a rank it could have reached anyway.
  const std::string target = to == group_.rank() ? "" : endpoint_of(to);
  GEOCCL_LOG(kInfo, "relaying stream " << hello.stream << " of rank " << from << " to rank " << to);
  const auto timeout = options_.relay_after.count() > 0 ? options_.relay_after : std::chrono::milliseconds(5000);
  relay_.serve(fd, from, to, target, timeout, ok, no);
}

std::string TcpDevice::endpoint_of(int rank) const {
  std::lock_guard lk(endpoints_mu_);
  return rank >= 0 && static_cast<size_t>(rank) < endpoints_.size() ? endpoints_[static_cast<size_t>(rank)] : "";
}

void TcpDevice::adopt_dialled(int fd, int peer_rank, int stream, const security::ConnectionKeys& keys, int via) {
  try {
    set_nonblocking(fd, true);
    group_.loop().run_owned([&] { adopt(fd, peer_rank, stream, keys, via); });
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void TcpDevice::connect_through_relay(TcpPeer& p, const std::vector<int>& peers, const Poll& poll,
                                      Clock::time_point deadline) {
  ThrottledPoll maybe_poll(poll);
  // Ranks this one reaches directly first: they answered us, and likely answer the peer.
  std::vector<int> candidates, later;
  group_.loop().run_owned([&] {
    for (int r : peers) {
      if (r == p.rank) continue;
      const TcpPeer& q = peer(r);
      (q.streams[kControlStream] && q.relay.load() < 0 ? candidates : later).push_back(r);
    }
  });
  candidates.insert(candidates.end(), later.begin(), later.end());
  if (const int known = group_.relay(p.rank); known >= 0) {  // another class's relay first
    candidates.erase(std::remove(candidates.begin(), candidates.end(), known), candidates.end());
    candidates.insert(candidates.begin(), known);
  }
  const auto attempt = relayed_attempt();
  std::string why = "no other rank to relay through";
  int chosen = -1;
  while (chosen < 0) {
    for (int c : candidates) {
      p.relay.store(c);
      bool rejected = false;
      security::ConnectionKeys keys;
      const int fd = dial(p, p.wan, kControlStream, std::min(deadline, Clock::now() + attempt), &why, &rejected, &keys);
      if (fd >= 0) {
        adopt_dialled(fd, p.rank, kControlStream, keys, c);
        chosen = c;
        break;
      }
      p.relay.store(-1);
      if (rejected) throw Error(ErrorCode::kProtocol, why);  // the peer itself answered: final
      GEOCCL_LOG(kDebug, why);
      maybe_poll();
      if (Clock::now() >= deadline) break;
    }
    if (chosen >= 0) break;
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout, "rank " + std::to_string(p.rank) + " at " + p.endpoint +
                                           " did not answer directly within " +
                                           std::to_string(options_.relay_after.count()) +
                                           " ms, and no rank relayed to it in time (last: " + why + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // relays still starting
  }
  GEOCCL_LOG(kInfo, "rank " << p.rank << " reached through rank " << chosen << "'s relay");
  group_.set_relay(p.rank, chosen);
  for (int stream = 1; stream < kSetupStreams; ++stream) {
    std::string swhy;
    bool rejected = false;
    security::ConnectionKeys keys;
    int fd = -1;
    while ((fd = dial(p, p.wan, stream, deadline, &swhy, &rejected, &keys)) < 0) {
      if (rejected) throw Error(ErrorCode::kProtocol, swhy);
      if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, swhy);
      maybe_poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    adopt_dialled(fd, p.rank, stream, keys, chosen);
  }
}

void TcpDevice::adopt(int fd, int peer_rank, int stream, const security::ConnectionKeys& keys, int via) {
  TcpPeer& p = peer(peer_rank);
  p.streams[static_cast<size_t>(stream)] = std::make_unique<TcpConnection>(*this, p, fd, stream, keys, via);
  if (p.wan && stream != kControlStream) {  // opened after set_wan_peer
    p.streams[static_cast<size_t>(stream)]->tune_for_wan();
    const int want = p.width_control ? p.width_control->width() : initial_streams_ - 1;
    p.width = std::clamp(want, 1, std::max(1, open_prefix(p)));
  }
  ++connected_;
  group_.notify();
}

void TcpDevice::connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
                        Clock::time_point deadline) {
  ThrottledPoll maybe_poll(poll);
  {
    // Every peer's address, decoded once: where this rank dials, and where the relay requests it
    // may serve connect to (relay.h).
    std::lock_guard lk(endpoints_mu_);
    endpoints_.assign(static_cast<size_t>(group_.size()), "");
    for (int r : peers) {
      std::string ep;
      if (decode_address(address_of(r), &ep)) endpoints_[static_cast<size_t>(r)] = ep;
    }
  }
  std::vector<int> lower;
  for (int r : peers)
    if (r < group_.rank()) lower.push_back(r);
  std::mutex unanswered_mu;
  std::vector<int> unanswered;  // lower peers that no direct attempt reached
  // Each lower peer's streams in order, several peers at once (dial_all.h).
  dial_all(lower, poll, [&](int r, const std::atomic<bool>& stop) {
    TcpPeer& p = peer(r);
    p.endpoint = endpoint_of(r);
    if (p.endpoint.empty())
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(r) + " published a malformed TCP address");
    // The first stream finds out whether the peer answers directly: a path that gives no answer
    // at all within relay_after (a firewall that drops, a cut link) is left to a relay.
    const bool may_relay = options_.relay_after.count() > 0 && group_.size() > 2;
    if (may_relay && group_.relay(r) >= 0) {  // another class of this rank found no direct path
      std::lock_guard lk(unanswered_mu);
      unanswered.push_back(r);
      return;
    }
    const auto direct_deadline = may_relay ? std::min(deadline, Clock::now() + options_.relay_after) : deadline;
    bool relay = false;
    for (int stream = 0; stream < kSetupStreams && !relay; ++stream) {
      std::string why;
      bool rejected = false, refused = false;
      int fd = -1;
      security::ConnectionKeys keys;
      // The peer is listening already (it published its address), but retry briefly on refusal.
      while ((fd = dial(p, p.wan, stream, stream == 0 ? direct_deadline : deadline, &why, &rejected, &keys,
                        &refused)) < 0) {
        if (rejected) throw Error(ErrorCode::kProtocol, why);  // dial_all polls for the peer's reason
        if (stream == 0 && !refused && direct_deadline < deadline && Clock::now() >= direct_deadline) {
          GEOCCL_LOG(kInfo, "rank " << r << " did not answer directly within " << options_.relay_after.count()
                                    << " ms (" << why << "): trying relays");
          relay = true;
          break;
        }
        if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, why);
        if (stop.load()) return;  // another dial failed: the set-up is over
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!relay) adopt_dialled(fd, r, stream, keys, -1);
    }
    if (relay) {
      std::lock_guard lk(unanswered_mu);
      unanswered.push_back(r);
    }
  });
  std::sort(unanswered.begin(), unanswered.end());
  for (int r : unanswered) connect_through_relay(peer(r), peers, poll, deadline);
  // Wait for every higher peer's connections.
  for (;;) {
    std::string missing;
    group_.loop().run_owned([&] {
      for (int r : peers) {
        if (r < group_.rank()) continue;
        const auto& s = peer(r).streams;
        if (std::any_of(s.begin(), s.begin() + kSetupStreams, [](const auto& c) { return !c; }))
          missing += (missing.empty() ? "" : ",") + std::to_string(r);
      }
    });
    if (missing.empty()) break;
    if (Clock::now() > deadline) {
      std::string auth;
      group_.loop().run_owned([&] { auth = last_auth_failure_; });
      throw Error(ErrorCode::kTimeout, "rank(s) " + missing + " did not connect in time" +
                                           (auth.empty() ? "" : " (last refused: " + auth + ")"));
    }
    maybe_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Where the higher peers listen (they published it before dialling us): when a stream to one
  // of them breaks, a connection refused there tells that its process is gone.
  if (!options_.resume && !options_.wan_resume) return;
  for (int r : peers) {
    if (r < group_.rank()) continue;
    if (std::string ep = endpoint_of(r); !ep.empty()) group_.loop().run_owned([&] { peer(r).endpoint = ep; });
  }
}

int TcpDevice::via_for(const TcpPeer& p, int stream) const {
  if (const int r = p.relay.load(); r >= 0) return r;
  return stream >= kFirstTwoHopStream ? p.two_hop.load() : -1;
}

int TcpDevice::dial(const TcpPeer& p, bool wan, int stream, Clock::time_point deadline,
                    std::string* why, bool* rejected, security::ConnectionKeys* keys, bool* refused, int* via_used) {
  *rejected = false;
  *keys = {};
  if (refused) *refused = false;
  const int via = via_for(p, stream);
  if (via_used) *via_used = via;
  const std::string dialled = via >= 0 ? endpoint_of(via) : p.endpoint;
  std::string host;
  uint16_t port = 0;
  split_host_port(dialled, &host, &port);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const std::string where = "rank " + std::to_string(p.rank) + " at " + p.endpoint +
                            (via >= 0 ? " through rank " + std::to_string(via) + "'s relay at " + dialled : "");
  if (left.count() <= 0) {
    *why = "cannot connect to " + where;
    return -1;
  }
  const int fd = connect_with_timeout(host, port, left, [this, wan](int s) {
    const uint64_t b = wan ? options_.wan_buffer_bytes : options_.buffer_bytes;
    if (b > 0) set_buffer_sizes(s, b);
  });
  if (fd < 0) {
    if (refused) *refused = via < 0 && errno == ECONNREFUSED;
    *why = "cannot connect to " + where + ": " + std::strerror(errno);
    return -1;
  }
  set_nodelay(fd);
  const std::string& cc = wan ? options_.wan_congestion_control : options_.congestion_control;
  if (!cc.empty()) set_congestion_control(fd, cc);
  const auto setup = group_.handshake_setup(protocol::Transport::kTcp, static_cast<uint16_t>(streams_));
  // Runs one handshake to its end on the blocking socket; false on an I/O failure (*why says).
  auto run = [&](protocol::HandshakeDialler& hs, const char* what) {
    std::array<uint8_t, 512> buf;
    for (;;) {
      const auto out = hs.take_output();
      if (!out.empty() && !write_all(fd, out, deadline)) break;
      if (hs.state() != protocol::HandshakeState::kRunning) return true;
      const auto in = std::span<uint8_t>(buf.data(), std::min(buf.size(), hs.want()));
      if (!read_all(fd, in, deadline)) break;
      hs.feed(in);
    }
    *why = std::string(what) + " with " + where + " failed: " + std::strerror(errno);
    ::close(fd);
    return false;
  };
  if (via >= 0) {
    // First the relay: "connect me to p". It answers once it reaches p (or cannot).
    protocol::HandshakeDialler request(setup, static_cast<uint32_t>(via), static_cast<uint16_t>(stream), {},
                                       protocol::kHelloFlagRelayRequest, static_cast<uint32_t>(p.rank));
    if (!run(request, "relay request")) return -1;
    if (request.state() != protocol::HandshakeState::kDone) {
      // Not final: another relay, or this one later, may reach the peer.
      *why = "rank " + std::to_string(via) + " did not relay to " + where + ": " + request.why();
      ::close(fd);
      return -1;
    }
  }
  protocol::HandshakeDialler hs(setup, static_cast<uint32_t>(p.rank), static_cast<uint16_t>(stream), {},
                                via >= 0 ? protocol::kHelloFlagRelayed : 0, via >= 0 ? static_cast<uint32_t>(via) : 0);
  if (!run(hs, "handshake")) return -1;
  if (hs.state() == protocol::HandshakeState::kDone) {
    *keys = hs.keys();
    return fd;
  }
  ::close(fd);
  *rejected = true;
  *why = hs.auth_failed() ? "authentication with " + where + " failed: " + hs.why() : where + " rejected us: " + hs.why();
  return -1;
}

bool TcpDevice::can_resume(const TcpPeer& p, int stream) const { return resume_refusal(p, stream) == nullptr; }

void TcpDevice::stream_broken(TcpPeer& p, int stream) {
  if (group_.rank() > p.rank) {  // we connected it: connect it again
    // One attempt sends one SYN: it waits a few round trips (the handshake takes two), so that a
    // path that comes back is found within about that.
    const auto rtt = std::chrono::duration_cast<std::chrono::milliseconds>(p.streams[kControlStream]->srtt());
    auto attempt = std::clamp(3 * rtt + std::chrono::milliseconds(200), std::chrono::milliseconds(300),
                              std::chrono::milliseconds(2000));
    // Through a two-hop path's relay: the relay connects on to the peer first, over another path
    // whose RTT this stream does not know.
    if (p.relay.load() < 0 && via_for(p, stream) >= 0) attempt = std::max(3 * attempt, std::chrono::milliseconds(2000));
    std::thread& t = p.dialers[static_cast<size_t>(stream)];
    if (t.joinable()) t.join();
    t = std::thread([this, &p, stream, wan = p.wan, attempt] { redial(p, wan, stream, attempt); });
    return;
  }
  p.streams[static_cast<size_t>(stream)]->await_resume(options_.resume_timeout);
  // The peer re-establishes it unless its process is gone: then its address refuses connections.
  if (p.endpoint.empty() || p.probing.exchange(true)) return;
  if (p.prober.joinable()) p.prober.join();
  p.prober = std::thread([this, &p] { probe(p); });
}

void TcpDevice::probe(TcpPeer& p) {
  std::string host;
  uint16_t port = 0;
  split_host_port(p.endpoint, &host, &port);
  const int fd = connect_with_timeout(host, port, std::chrono::seconds(2), {});
  const bool refused = fd < 0 && errno == ECONNREFUSED;
  if (fd >= 0) ::close(fd);
  p.probing.store(false);
  if (!refused || closing_.load()) return;
  peer_gone(p, "its address " + p.endpoint + " refuses new ones");
}

void TcpDevice::peer_gone(TcpPeer& p, const std::string& why) {
  group_.loop().post([this, &p, why] {
    if (closing_.load() || group_.failed()) return;
    group_.fail(ErrorCode::kPeerLost,
                "rank " + std::to_string(p.rank) + " closed its connections and " + why +
                    ": its process is gone",
                true, {p.rank});
  });
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
  if (options_.stall_timeout.count() <= 0 || group_.failed() || closing_.load()) return;
  std::vector<StallSample> samples(static_cast<size_t>(streams_));
  for (auto& pp : peers_) {
    TcpPeer& p = *pp;
    // The rank that dials replaces a stalled stream; the other waits for the new connection.
    if (p.rank >= group_.rank() || !p.resume) continue;
    for (int s = 0; s < streams_; ++s) {
      TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
      samples[static_cast<size_t>(s)] = c && c->open() ? c->stall_sample(now) : StallSample{};
    }
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
}

void TcpDevice::send_heartbeat(int peer_rank, std::span<const uint8_t> payload) {
  TcpConnection* c = conn(peer_rank, kControlStream);
  if (c && c->open() && !c->said_goodbye())
    c->post_control(protocol::FrameType::kHeartbeat, std::vector<uint8_t>(payload.begin(), payload.end()));
}

bool TcpDevice::host_answers(int peer_rank, std::chrono::milliseconds recent) const {
  const TcpConnection* c = conn(peer_rank, kControlStream);
  return c && c->acked_within(recent);
}

void TcpDevice::redial(TcpPeer& p, bool wan, int stream, std::chrono::milliseconds attempt) {
  const auto deadline = Clock::now() + options_.resume_timeout;
  // A WAN path that gives no answer at all for relay_after (a cut link) is left to a relay, as at
  // start-up: training goes on through a third domain instead of waiting out the cut.
  const bool may_fail_over = wan && options_.relay_after.count() > 0 && group_.size() > 2;
  auto silent_since = Clock::now();
  std::string why;
  while (!closing_.load() && !group_.failed()) {
    bool rejected = false, refused = false;
    const auto started = Clock::now();
    security::ConnectionKeys keys;
    int via = -1;
    int fd = -1;
    if (may_fail_over && p.relay.load() < 0 && started - silent_since >= options_.relay_after) {
      fd = fail_over(p, stream, deadline, &why, &keys, &via);
      silent_since = Clock::now();  // none relayed: the direct path for another relay_after
    } else {
      fd = dial(p, wan, stream, std::min(deadline, started + attempt), &why, &rejected, &keys, &refused, &via);
    }
    if (rejected || refused) silent_since = Clock::now();  // the path answers
    if (refused) {
      peer_gone(p, why);  // nobody listens where the peer did
      return;
    }
    if (fd >= 0) {
      set_nonblocking(fd, true);
      const bool posted = group_.loop().post([this, &p, stream, fd, keys, via] {
        TcpConnection* c = p.streams[static_cast<size_t>(stream)].get();
        if (closing_.load() || group_.failed() || !c || !c->usable()) {
          ::close(fd);
          return;
        }
        c->resume(fd, keys, via);
      });
      if (!posted) ::close(fd);  // the loop is dead: nobody takes it
      return;
    }
    // A failed-over pair whose relay did not carry us: direct again (and failing over anew
    // after relay_after, through another relay).
    if (!rejected && via >= 0 && p.failed_over.load()) {
      int expected = via;
      if (p.relay.compare_exchange_strong(expected, -1))
        GEOCCL_LOG(kWarn, "the relay of rank " << via << " to rank " << p.rank << " failed (" << why
                                                << "): trying the direct path again");
      continue;
    }
    // A two-hop path whose relay did not carry us (gone, or it lost its path to the peer): the
    // bulk data go direct again, slower but there.
    if (!rejected && via >= 0 && p.relay.load() < 0) {
      int expected = via;
      if (p.two_hop.compare_exchange_strong(expected, -1))
        GEOCCL_LOG(kWarn, "two-hop path to rank " << p.rank << " through rank " << via << " failed (" << why
                                                  << "): its bulk data go direct");
      continue;
    }
    // A failed authentication is final. A refusal is not: the peer takes a data stream back only
    // while its side of the control stream is usable, and that one may be re-established at this
    // very moment (both stalled in the same outage). A peer that is gone refuses the connection
    // (peer_gone above); one that failed tells us so on another path.
    const bool auth_failed = rejected && why.rfind("authentication", 0) == 0;
    if (auth_failed || Clock::now() >= deadline) break;
    // A failure that came at once (no route yet, a refusal) is retried after a short pause; a
    // timed-out attempt has waited already.
    if (rejected) GEOCCL_LOG(kDebug, "stream " << stream << " to rank " << p.rank << ": " << why << "; trying again");
    if (Clock::now() - started < attempt / 2) std::this_thread::sleep_for(std::chrono::milliseconds(rejected ? 200 : 100));
  }
  if (closing_.load() || group_.failed()) return;
  group_.loop().post(
      [this, &p, stream, why, rejected_last = why.find("rejected") != std::string::npos] {
        group_.fail(rejected_last ? ErrorCode::kPeerLost : ErrorCode::kPeerUnreachable,
                    "stream " + std::to_string(stream) + " to rank " + std::to_string(p.rank) +
                        " broke and could not be re-established within " +
                        std::to_string(options_.resume_timeout.count()) + " ms: " + why,
                    true, {p.rank});
      });
}

int TcpDevice::fail_over(TcpPeer& p, int stream, Clock::time_point deadline, std::string* why,
                         security::ConnectionKeys* keys, int* via) {
  *via = -1;
  // Candidates: ranks in other domains than this one whose control stream acknowledged within
  // the last stall bound, so that they answer us (those in the peer's domain, behind the same
  // cut, do not); read on the loop thread, without waiting on it for long.
  auto found = std::make_shared<std::promise<std::vector<int>>>();
  auto fut = found->get_future();
  const auto recent = std::max(options_.stall_timeout, std::chrono::milliseconds(2000));
  group_.loop().post([this, &p, found, recent] {
    std::vector<int> c;
    for (const auto& q : peers_)
      if (q->rank != p.rank && q->rank != group_.rank() && q->wan && q->relay.load() < 0 &&
          host_answers(q->rank, recent))
        c.push_back(q->rank);
    found->set_value(std::move(c));
  });
  if (fut.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    *why = "no relay asked: the event loop did not answer";
    return -1;
  }
  const std::vector<int> candidates = fut.get();
  if (candidates.empty()) *why = "rank " + std::to_string(p.rank) + " gives no answer and no other domain answers us";
  for (int c : candidates) {
    if (closing_.load() || group_.failed() || Clock::now() >= deadline) break;
    int expected = -1;
    if (!p.relay.compare_exchange_strong(expected, c)) {
      *via = expected;  // another stream failed over first: through its relay
      bool rejected = false;
      return dial(p, p.wan, stream, std::min(deadline, Clock::now() + relayed_attempt()), why, &rejected, keys);
    }
    p.failed_over.store(true);
    bool rejected = false;
    const int fd = dial(p, p.wan, stream, std::min(deadline, Clock::now() + relayed_attempt()), why, &rejected, keys);
    if (fd >= 0) {
      *via = c;
      GEOCCL_LOG(kWarn, "rank " << p.rank << " gave no answer for " << options_.relay_after.count()
                                << " ms: its streams go through rank " << c << "'s relay until the direct path answers");
      if (!p.watching.exchange(true)) {
        if (p.direct_watch.joinable()) p.direct_watch.join();
        p.direct_watch = std::thread([this, &p] { watch_direct(p); });
      }
      return fd;
    }
    p.failed_over.store(false);
    p.relay.store(-1);
    GEOCCL_LOG(kDebug, "no relay through rank " << c << " to rank " << p.rank << ": " << *why);
  }
  return -1;
}

void TcpDevice::watch_direct(TcpPeer& p) {
  std::string host;
  uint16_t port = 0;
  split_host_port(p.endpoint, &host, &port);
  while (!closing_.load() && !group_.failed() && p.failed_over.load()) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const int fd = connect_with_timeout(host, port, std::chrono::seconds(1), {});
    if (fd < 0) continue;
    ::close(fd);
    group_.loop().post([this, &p] {
      if (closing_.load() || group_.failed() || !p.failed_over.exchange(false)) return;
      const int via = p.relay.exchange(-1);
      GEOCCL_LOG(kInfo, "the direct path to rank " << p.rank << " answers again: its streams leave rank " << via
                                                   << "'s relay");
      for (auto& c : p.streams)
        if (c && c->open()) c->replace("the direct path is back");
    });
    break;
  }
  p.watching.store(false);
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
  group_.loop().run_owned([this, peer_rank, wan] {
    TcpPeer& p = peer(peer_rank);
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
    // The WAN peer's other initial data streams: the dialling end opens them now, in the
    // background (their handshakes take round trips on the WAN path).
    if (group_.rank() > p.rank && p.streams[kControlStream] && open < initial_streams_ - 1 &&
        !p.opening.exchange(true)) {
      if (p.opener.joinable()) p.opener.join();
      p.opener = std::thread([this, &p, open] { open_streams(p, open + 1, initial_streams_ - 1); });
    }
    if (initial_streams_ < streams_ && !p.width_control) {
      StreamWidthOptions wo;
      wo.start = initial_streams_ - 1;
      wo.max = streams_ - 1;
      p.width_control = std::make_unique<StreamWidth>(wo);
      p.width_bytes = p.bytes_sent.load();
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
  });
}

// ---- Priority between classes.

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

// ---- Measured stream counts.

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
    if (!p.width_control) continue;
    const int open = open_prefix(p);
    // Frames waiting in user space at both ends of the span: the path, not the sender, set
    // what was written in it.
    bool busy = false;
    for (int s = 1; s <= open && !busy; ++s) busy = !p.streams[static_cast<size_t>(s)]->send_queue_empty();
    busy = busy && !holding(p);
    const bool busy_all = busy && p.width_busy;
    p.width_busy = busy;
    const uint64_t sent = p.bytes_sent.load(std::memory_order_relaxed);
    const uint64_t bytes = sent - p.width_bytes;
    p.width_bytes = sent;
    const bool dialler = group_.rank() > p.rank;
    const TcpConnection* control = p.streams[kControlStream].get();
    const auto rtt = control ? control->srtt() : std::chrono::microseconds(0);
    StreamWidth& w = *p.width_control;
    const int before = w.settled();
    w.sample(span, bytes, busy_all, open, dialler ? streams_ - 1 : open, rtt);
    const int want = w.width();
    if (want > open && dialler && !p.opening.exchange(true)) {
      if (p.opener.joinable()) p.opener.join();
      p.opener = std::thread([this, &p, open, want] { open_streams(p, open + 1, want); });
    }
    p.width = std::clamp(want, 1, std::max(1, open));
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

void TcpDevice::open_streams(TcpPeer& p, int from, int upto) {
  for (int s = from; s <= upto && !closing_.load() && !group_.failed(); ++s) {
    std::string why;
    bool rejected = false;
    security::ConnectionKeys keys;
    int via = -1;
    const int fd = dial(p, true, s, Clock::now() + std::chrono::seconds(5), &why, &rejected, &keys, nullptr, &via);
    if (fd < 0) {
      GEOCCL_LOG(kInfo, "data stream " << s << " to rank " << p.rank << " not opened: " << why);
      break;
    }
    set_nonblocking(fd, true);
    const bool posted = group_.loop().post([this, &p, s, fd, keys, via] {
      if (closing_.load() || group_.failed() || p.streams[static_cast<size_t>(s)]) {
        ::close(fd);
        return;
      }
      adopt(fd, p.rank, s, keys, via);
    });
    if (!posted) {
      ::close(fd);
      break;
    }
  }
  p.opening.store(false);
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

DeviceProperties TcpDevice::properties() const {
  DeviceProperties p;
  p.two_hop = true;
  p.reads_paths = true;
  return p;
}

Device::PathReading TcpDevice::path_reading(int peer) const {
  PathReading out;
  group_.loop().run_owned([&] {
    const TcpPeer& p = *peers_[static_cast<size_t>(peer)];
    uint64_t delivered = 0;
    for (int s = 0; s < streams_; ++s) {
      const TcpConnection* c = p.streams[static_cast<size_t>(s)].get();
      if (!c) continue;
      const auto ps = c->path_sample();
      const double srtt = static_cast<double>(ps.srtt.count()) / 1e3;
      if (srtt > 0 && (out.srtt_ms == 0 || srtt < out.srtt_ms)) out.srtt_ms = srtt;
      if (s != kControlStream) delivered += ps.delivery_bps;
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
    // stream that sent nothing still holds its handshake's figure, which a lost SYN or Hello
    // leaves near a retransmission timeout (805 ms beside three streams at 25 ms, on a 20 ms
    // path, to a peer a ring only receives from). With no data sent, the control stream's, which
    // heartbeats keep sampling; the plain mean when there is none.
    double rtt_weighted = 0, rtt_all = 0, weight = 0;
    for (const auto& st : t.each) {
      rtt_all += st.rtt_ms;
      rtt_weighted += st.rtt_ms * static_cast<double>(st.bytes_sent);
      weight += static_cast<double>(st.bytes_sent);
    }
    const TcpConnection* control = p.streams[kControlStream].get();
    const double control_ms = control ? static_cast<double>(control->srtt().count()) / 1e3 : 0;
    if (weight > 0)
      ps->rtt_ms = rtt_weighted / weight;
    else if (control_ms > 0)
      ps->rtt_ms = control_ms;
    else if (!t.each.empty())
      ps->rtt_ms = rtt_all / static_cast<double>(t.each.size());
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
