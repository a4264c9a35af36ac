// TcpDevice, accepting: the listening socket's inbound connections run the handshake
// (protocol/handshake_machine.h) on the loop thread; an accepted stream is adopted (or resumes
// the one it replaces), a relay request hands the socket to the relay (relay.h), a dial-back
// request goes to on_demand.cc, and anything else is refused with its reason while the group
// goes on.
#include "transport/tcp/device.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/logging.h"

#include "protocol/handshake_machine.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

namespace {
// An inbound connection must introduce itself within this time or it is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
}  // namespace

void TcpDevice::on_accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    set_nodelay(fd);
    auto p = std::make_unique<PendingAccept>();
    p->fd = fd;
    p->hs = std::make_unique<protocol::HandshakeAcceptor>(
        tcp_handshake());
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
  // A lower rank asks us to dial it: judged, and with a secret proved as well (on_demand.cc).
  if ((hs.state() == protocol::HandshakeState::kJudge || hs.state() == protocol::HandshakeState::kDone) &&
      hs.dial_back_request())
    return serve_dial_back(fd, hs);
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

void TcpDevice::adopt(int fd, int peer_rank, int stream, const security::ConnectionKeys& keys, int via) {
  TcpPeer& p = peer(peer_rank);
  p.streams[static_cast<size_t>(stream)] = std::make_unique<TcpConnection>(p, fd, stream, keys, via);
  if (stream == kControlStream) p.control_up.store(true);
  if (p.wan && stream != kControlStream) {  // opened after set_wan_peer
    p.streams[static_cast<size_t>(stream)]->tune_for_wan();
    const int want = p.width_control ? p.width_control->width() : initial_streams_ - 1;
    set_width(p, std::clamp(want, 1, std::max(1, open_prefix(p))));
  }
  if (!p.met && p.streams[kControlStream] && p.streams[1]) {
    // The pair is connected: the frames posted while it was not go now, in their order.
    p.met = true;
    auto waiting = std::move(p.waiting);
    p.waiting.clear();
    for (auto& op : waiting) {
      const size_t bytes = op.payload.size();
      next_send_conn(p, bytes).post_send(std::move(op));
    }
    if (p.wan) open_initial_wan_streams(p);
  }
  ++connected_;
  group_.notify();
}

}  // namespace geoccl::transport::tcp
