#include "transport/shm/device.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "core/logging.h"
#include "protocol/handshake.h"
#include "security/auth.h"
#include "transport/dial_all.h"

namespace geoccl::transport::shm {

using protocol::FrameHeader;

namespace {

constexpr size_t kDescriptors = 3;  // segment, the acceptor's eventfd, the dialler's eventfd

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool is_eventfd(int fd) {
  char path[64], target[64] = {};
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof target - 1);
  return n > 0 && std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

UniqueFd new_eventfd() {
  UniqueFd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (fd.get() < 0) throw Error(ErrorCode::kIo, std::string("eventfd: ") + std::strerror(errno));
  return fd;
}

}  // namespace

struct ShmDevice::Pending {
  UniqueFd fd;
  runtime::EventLoop::TimerId timer = 0;
  // With a secret, once its Hello is judged: the dialler's proof (AuthFin) comes next, and the
  // connection is adopted with what its Hello brought only when that proof is right.
  std::unique_ptr<security::AuthAcceptor> auth;
  Hello hello;
  Segment seg;
  UniqueFd wake_self, wake_peer;
};

struct ShmDevice::Dialled {
  UniqueFd sock, wake_self, wake_peer;
  Segment seg;
  size_t capacity = 0;
};

ShmDevice::ShmDevice(Group& group, const ShmOptions& options)
    : group_(group),
      loop_(group.loop()),
      options_(options),
      conns_(static_cast<size_t>(group.size())),
      alive_(std::make_shared<bool>(true)),
      linked_(static_cast<size_t>(group.size()), 0),
      expected_(static_cast<size_t>(group.size()), 0) {
  for (int r = 0; r < group.size(); ++r) {
    counters_.push_back(std::make_unique<Counters>());
    expected_[static_cast<size_t>(r)] = r > group.rank();  // until connect() names its peers
  }
  uint64_t nonce = 0;
  fill_random(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&nonce), sizeof nonce));
  address_.host = HostId::current();
  address_.socket_name = "geoccl-shm." + hex64(group.session_id()) + "." +
                         std::to_string(group.rank()) + "." + hex64(nonce);
  listen_fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_un sa;
  const socklen_t len = abstract_sockaddr(address_.socket_name, &sa);
  if (listen_fd_.get() < 0 || ::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      ::listen(listen_fd_.get(), 128) != 0)
    throw Error(ErrorCode::kIo, std::string("shared-memory listener: ") + std::strerror(errno));
  on_loop([this] {
    loop_.add_fd(listen_fd_.get(), EPOLLIN, [this](uint32_t) { on_accept(); });
    failure_listener_ = group_.on_failure([this, alive = alive_](const Failure& f, bool tell_peers) {
      if (!*alive) return;
      const auto abort = protocol::encode_abort(static_cast<uint8_t>(f.code), f.message, f.ranks);
      for (auto& c : conns_) {
        if (!c) continue;
        c->fail_requests(f);
        if (tell_peers) c->post_control(protocol::FrameType::kAbort, abort);
      }
    });
  });
}

ShmDevice::~ShmDevice() {
  shutdown();
  group_.remove_failure_listener(failure_listener_);
}

void ShmDevice::on_loop(const std::function<void()>& f) { loop_.run_owned(f); }

bool ShmDevice::reaches(std::span<const uint8_t> peer_address) const {
  Address a;
  return decode_address(peer_address, &a) && address_.host.same_host(a.host);
}

void ShmDevice::on_accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto p = std::make_unique<Pending>();
    p->fd.reset(fd);
    p->timer = loop_.add_timer(Clock::now() + options_.handshake_timeout, [this, fd] {
      GEOCCL_LOG(kWarn, "dropping shared-memory connection that sent no handshake");
      rejected_.fetch_add(1);
      take_pending(fd);
    });
    loop_.add_fd(fd, EPOLLIN, [this, fd](uint32_t) { on_pending_readable(fd); });
    pending_.push_back(std::move(p));
  }
}

std::unique_ptr<ShmDevice::Pending> ShmDevice::take_pending(int fd) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if ((*it)->fd.get() != fd) continue;
    loop_.cancel_timer((*it)->timer);
    loop_.remove_fd(fd);
    auto out = std::move(*it);
    pending_.erase(it);
    return out;
  }
  return nullptr;
}

namespace {

// One small packet on a socket that carried only the handshake: it fits.
void send_packet(int fd, std::span<const uint8_t> bytes) {
  [[maybe_unused]] ssize_t w = ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

Reply reply_of(int rank, const std::string& reason) {
  Reply rep;
  rep.accepted = reason.empty();
  rep.rank = static_cast<uint32_t>(rank);
  rep.reason = reason;
  return rep;
}

}  // namespace

void ShmDevice::on_pending_readable(int fd) {
  Pending* p = nullptr;
  for (auto& q : pending_)
    if (q->fd.get() == fd) p = q.get();
  if (!p) return;
  if (p->auth) return on_auth_fin(fd);
  const security::GroupKey* key = group_.security();
  std::array<uint8_t, kHelloSize + security::kAuthInitSize + 64> buf;
  std::vector<UniqueFd> fds;  // every descriptor received is closed unless adopted
  int flags = 0;
  const ssize_t n = recv_with_fds(fd, buf, &fds, &flags, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // closed (or failed) without a word
    take_pending(fd);
    rejected_.fetch_add(1);
    return;
  }
  // The Hello, then (with a secret) AuthInit, in one packet.
  const std::span<const uint8_t> hello_bytes(buf.data(), std::min(static_cast<size_t>(n), kHelloSize));
  const size_t want = kHelloSize + (key ? security::kAuthInitSize : 0);
  Hello h;
  Segment seg;
  std::string reason;
  if (flags & (MSG_TRUNC | MSG_CTRUNC))
    reason = protocol::handshake_status_name(protocol::HandshakeStatus::kMalformed);
  else if (!decode_hello(hello_bytes, &h))
    reason = protocol::handshake_status_name(protocol::HandshakeStatus::kBadMagic);
  else if (((h.flags & protocol::shm::kShmFlagAuth) != 0) != (key != nullptr))
    reason = protocol::handshake_status_name(protocol::HandshakeStatus::kAuthMismatch);
  else if (static_cast<size_t>(n) != want)
    reason = protocol::handshake_status_name(protocol::HandshakeStatus::kMalformed);
  else
    reason = judge(h, fds, &seg);
  auto rb = encode_reply(reply_of(group_.rank(), reason));
  std::array<uint8_t, security::kAuthRespSize> resp{};
  std::unique_ptr<security::AuthAcceptor> auth;
  if (reason.empty() && key) {
    auth = std::make_unique<security::AuthAcceptor>(*key);
    const auto ast = auth->on_init(hello_bytes, rb,
                                   std::span<const uint8_t, security::kAuthInitSize>(buf.data() + kHelloSize,
                                                                                    security::kAuthInitSize),
                                   &resp);
    if (ast != security::AuthStatus::kOk) {
      reason = security::auth_status_name(ast);
      rb = encode_reply(reply_of(group_.rank(), reason));
    }
  }
  // A refusal is counted before the dialler hears it: whoever sees the answer sees the count.
  if (!reason.empty()) {
    rejected_.fetch_add(1);
    GEOCCL_LOG(kWarn, "rejected shared-memory connection: " << reason);
  }
  send_packet(fd, rb);
  if (!reason.empty()) {
    take_pending(fd);
    return;
  }
  if (auth) {  // the dialler's proof comes next; the handshake timer still runs
    send_packet(fd, resp);
    p->auth = std::move(auth);
    p->hello = h;
    p->seg = std::move(seg);
    p->wake_self = std::move(fds[1]);
    p->wake_peer = std::move(fds[2]);
    return;
  }
  auto taken = take_pending(fd);
  adopt(static_cast<int>(h.rank), false, std::move(taken->fd), std::move(fds[1]), std::move(fds[2]),
        std::move(seg), h.ring_bytes);
}

void ShmDevice::on_auth_fin(int fd) {
  std::array<uint8_t, security::kAuthFinSize + 1> buf;
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  auto p = take_pending(fd);
  const std::string who = "a shared-memory connection claiming to be rank " + std::to_string(p->hello.rank);
  std::string reason;
  security::ConnectionKeys keys;  // unused: frames go through the segment unsealed
  if (n != static_cast<ssize_t>(security::kAuthFinSize)) {
    reason = n <= 0 ? "closed before its proof of the group secret"
                    : security::auth_status_name(security::AuthStatus::kMalformed);
  } else if (const auto ast = p->auth->on_fin(
                 std::span<const uint8_t, security::kAuthFinSize>(buf.data(), security::kAuthFinSize), &keys);
             ast != security::AuthStatus::kOk) {
    reason = security::auth_status_name(ast);
  } else {
    std::lock_guard lk(mu_);
    if (linked_[p->hello.rank]) reason = "rank " + std::to_string(p->hello.rank) + " is connected already";
  }
  if (!reason.empty()) {
    rejected_.fetch_add(1);
    GEOCCL_LOG(kWarn, "rejected " << who << ": failed authentication: " << reason);
  }
  send_packet(fd, encode_reply(reply_of(group_.rank(), reason)));
  if (!reason.empty()) return;
  adopt(static_cast<int>(p->hello.rank), false, std::move(p->fd), std::move(p->wake_self), std::move(p->wake_peer),
        std::move(p->seg), p->hello.ring_bytes);
}

std::string ShmDevice::judge(const Hello& h, std::vector<UniqueFd>& fds, Segment* seg) {
  std::string why = check_hello(h, group_.rank(), group_.size(), group_.session_id(), group_.params_hash());
  if (!why.empty()) return why;
  const size_t from = h.rank;
  {
    std::lock_guard lk(mu_);
    if (linked_[from]) return "rank " + std::to_string(from) + " is connected already";
    if (!expected_[from])
      return "rank " + std::to_string(from) + " is not a shared-memory peer of rank " +
             std::to_string(group_.rank());
  }
  if (shut_.load()) return "rank " + std::to_string(group_.rank()) + " is shutting down";
  if (fds.size() != kDescriptors)
    return "expected " + std::to_string(kDescriptors) + " descriptors (segment, two eventfds), got " +
           std::to_string(fds.size());
  if (!is_eventfd(fds[1].get()) || !is_eventfd(fds[2].get())) return "the wake-up descriptors are not eventfds";
  *seg = Segment::map(fds[0].release(), segment_bytes(h.ring_bytes), &why);
  if (!seg->mapped()) return "shared memory: " + why;
  why = check_segment(*seg, h.ring_bytes, h.token);
  if (!why.empty()) seg->reset();
  else seg->close_fd();  // the mapping keeps the memory
  return why;
}

void ShmDevice::adopt(int peer, bool dialler, UniqueFd sock, UniqueFd wake_self, UniqueFd wake_peer,
                      Segment seg, size_t capacity) {
  auto c = std::make_shared<Connection>(group_, peer, dialler, std::move(sock), std::move(wake_self),
                                        std::move(wake_peer), std::move(seg), capacity,
                                        *counters_[static_cast<size_t>(peer)]);
  conns_[static_cast<size_t>(peer)] = c;
  c->start();
  {
    std::lock_guard lk(mu_);
    linked_[static_cast<size_t>(peer)] = 1;
  }
  linked_cv_.notify_all();
  group_.notify();
}

bool ShmDevice::authenticate(int sock, security::AuthDialler& auth, std::span<const uint8_t> hello,
                             std::span<const uint8_t> reply, const std::string& where, std::string* why,
                             bool* rejected) {
  // The acceptor's proof, ours, then its verdict on ours (protocol/shm_hello.h).
  std::array<uint8_t, security::kAuthRespSize + 1> resp;
  ssize_t n = ::recv(sock, resp.data(), resp.size(), 0);
  if (n != static_cast<ssize_t>(security::kAuthRespSize)) {
    *rejected = n > 0;
    *why = "authentication with " + where + " failed: " +
           (n > 0 ? security::auth_status_name(security::AuthStatus::kMalformed) : n == 0 ? "closed" : std::strerror(errno));
    return false;
  }
  std::array<uint8_t, security::kAuthFinSize> fin{};
  security::ConnectionKeys keys;  // unused: frames go through the segment unsealed
  const auto ast =
      auth.on_resp(hello, reply, std::span<const uint8_t, security::kAuthRespSize>(resp.data(), security::kAuthRespSize),
                   &fin, &keys);
  // On a wrong proof the acceptor still hears ours, saying so: both sides report a wrong secret.
  if (ast == security::AuthStatus::kOk || ast == security::AuthStatus::kBadProof || ast == security::AuthStatus::kBadKey)
    n = ::send(sock, fin.data(), fin.size(), MSG_NOSIGNAL);
  std::array<uint8_t, 512> vb;
  if (ast != security::AuthStatus::kOk) {
    // Its verdict on our answer, so that the refusal is on record at both ends when this returns
    // (bounded by the socket's timeout, the connect deadline).
    if (n == static_cast<ssize_t>(fin.size())) (void)::recv(sock, vb.data(), vb.size(), 0);
    *rejected = true;
    *why = "authentication with " + where + " failed: " + security::auth_status_name(ast);
    return false;
  }
  n = n == static_cast<ssize_t>(fin.size()) ? ::recv(sock, vb.data(), vb.size(), 0) : -1;
  Reply verdict;
  if (n <= 0) {
    *why = "authentication with " + where + " failed: " + (n == 0 ? "closed" : std::strerror(errno));
    return false;
  }
  *rejected = true;
  if (!decode_reply(std::span<const uint8_t>(vb.data(), static_cast<size_t>(n)), &verdict))
    *why = where + " did not answer our proof of the group secret as a geoccl shared-memory peer";
  else if (!verdict.accepted)
    *why = where + " rejected us: " + verdict.reason;
  else
    *rejected = false;
  return !*rejected;
}

std::unique_ptr<ShmDevice::Dialled> ShmDevice::dial(int peer, const Address& a, Clock::time_point deadline,
                                                    std::string* why, bool* rejected) {
  *rejected = false;
  const std::string where = "rank " + std::to_string(peer) + " (shared-memory socket @" + a.socket_name + ")";
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  if (left.count() <= 0) {
    *why = "cannot connect to " + where + ": deadline passed";
    return nullptr;
  }
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throw Error(ErrorCode::kIo, std::string("socket: ") + std::strerror(errno));
  const timeval tv{static_cast<time_t>(left.count() / 1000000), static_cast<suseconds_t>(left.count() % 1000000)};
  setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_un sa;
  const socklen_t len = abstract_sockaddr(a.socket_name, &sa);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    *why = "cannot connect to " + where + ": " + std::strerror(errno);
    return nullptr;
  }
  auto d = std::make_unique<Dialled>();
  d->capacity = options_.ring_bytes ? ring_capacity(options_.ring_bytes) : auto_ring_bytes(local_peers_);
  Hello h;
  h.rank = static_cast<uint32_t>(group_.rank());
  h.world_size = static_cast<uint32_t>(group_.size());
  h.session_id = group_.session_id();
  h.params_hash = group_.params_hash();
  h.ring_bytes = d->capacity;
  const security::GroupKey* key = group_.security();
  if (key) h.flags |= protocol::shm::kShmFlagAuth;
  fill_random(h.token);
  d->seg = Segment::create(segment_bytes(d->capacity), "geoccl-shm");
  init_segment(d->seg, d->capacity, h.token);
  d->wake_self = new_eventfd();
  d->wake_peer = new_eventfd();

  const auto hb = encode_hello(h);
  std::optional<security::AuthDialler> auth;
  std::vector<uint8_t> first = hb;
  if (key) {
    auth.emplace(*key);
    const auto init = auth->init();
    first.insert(first.end(), init.begin(), init.end());
  }
  const int fds[kDescriptors] = {d->seg.fd(), d->wake_peer.get(), d->wake_self.get()};
  std::array<uint8_t, 512> rb;
  ssize_t n = send_with_fds(s.get(), first, fds, 0);
  n = n == static_cast<ssize_t>(first.size()) ? ::recv(s.get(), rb.data(), rb.size(), 0) : -1;
  if (n <= 0) {
    *why = "handshake with " + where + " failed: " + (n == 0 ? "closed" : std::strerror(errno));
    return nullptr;
  }
  Reply rep;
  *rejected = true;
  if (!decode_reply(std::span<const uint8_t>(rb.data(), static_cast<size_t>(n)), &rep))
    *why = where + " did not answer as a geoccl shared-memory peer";
  else if (!rep.accepted)
    *why = where + " rejected us: " + rep.reason;
  else if (rep.rank != static_cast<uint32_t>(peer))
    *why = where + " answered as rank " + std::to_string(rep.rank);
  else
    *rejected = false;
  if (*rejected) return nullptr;
  if (auth && !authenticate(s.get(), *auth, hb, std::span<const uint8_t>(rb.data(), static_cast<size_t>(n)), where,
                            why, rejected))
    return nullptr;
  d->seg.close_fd();  // the peer has its own descriptor; the mapping keeps the memory
  fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK);
  d->sock = std::move(s);
  return d;
}

void ShmDevice::connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
                        Clock::time_point deadline) {
  const int me = group_.rank();
  {
    std::lock_guard lk(mu_);
    std::fill(expected_.begin(), expected_.end(), 0);
    for (int p : peers)
      if (p > me) expected_[static_cast<size_t>(p)] = 1;
  }
  local_peers_ = peers.size();
  std::vector<int> lower;
  std::vector<Address> addresses(static_cast<size_t>(group_.size()));
  for (int p : peers) {
    if (p >= me) continue;
    Address& a = addresses[static_cast<size_t>(p)];
    if (!decode_address(address_of(p), &a))
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p) + " published no shared-memory address");
    if (!address_.host.same_host(a.host))
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p) +
                                            " is not on this host (another boot id or network namespace)");
    lower.push_back(p);
  }
  // Several lower peers at once (dial_all.h).
  dial_all(lower, poll, [&](int p, const std::atomic<bool>& stop) {
    for (;;) {
      std::string why;
      bool rejected = false;
      if (auto d = dial(p, addresses[static_cast<size_t>(p)], deadline, &why, &rejected)) {
        on_loop([&] {
          adopt(p, true, std::move(d->sock), std::move(d->wake_self), std::move(d->wake_peer),
                std::move(d->seg), d->capacity);
        });
        return;
      }
      if (rejected) throw Error(ErrorCode::kProtocol, why);  // dial_all polls for the peer's reason
      if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, why);
      if (stop.load()) return;  // another dial failed: the set-up is over
      // It published its address, so it listens: a refusal is brief (its backlog is full).
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::unique_lock lk(mu_);
  auto missing = [&] {
    std::string m;
    for (int p : peers)
      if (p > me && !linked_[static_cast<size_t>(p)]) m += (m.empty() ? "" : ",") + std::to_string(p);
    return m;
  };
  while (!missing().empty()) {
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout, "rank(s) " + missing() + " did not connect over shared memory in time");
    linked_cv_.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if (poll) {
      lk.unlock();
      poll();
      lk.lock();
    }
  }
}

RequestPtr ShmDevice::send(int peer, const FrameHeader& h, std::span<const uint8_t> payload) {
  auto req = std::make_shared<Request>();
  if (payload.size() > protocol::kMaxPayload) {
    complete(req, {ErrorCode::kInvalidArgument, "frame payload over " + std::to_string(protocol::kMaxPayload) + " bytes"});
    return req;
  }
  loop_.post([this, peer, h, payload, req] {
    if (group_.complete_if_failed(req)) return;
    Connection* c = peer >= 0 && peer < group_.size() ? conns_[static_cast<size_t>(peer)].get() : nullptr;
    if (!c) {
      complete(req, {ErrorCode::kPeerLost, "no shared-memory link to rank " + std::to_string(peer)});
      group_.notify();
      return;
    }
    c->post_send(h, payload, req);
  });
  return req;
}

void ShmDevice::post_recv(int peer, Connection::RecvOp op) {
  loop_.post([this, peer, op = std::move(op)]() mutable {
    if (group_.complete_if_failed(op.req)) return;
    Connection* c = peer >= 0 && peer < group_.size() ? conns_[static_cast<size_t>(peer)].get() : nullptr;
    if (!c) {
      complete(op.req, {ErrorCode::kPeerLost, "no shared-memory link to rank " + std::to_string(peer)});
      group_.notify();
      return;
    }
    c->post_recv(std::move(op));
  });
}

RequestPtr ShmDevice::recv(int peer, const FrameHeader& expect, std::span<uint8_t> dst) {
  auto req = std::make_shared<Request>();
  post_recv(peer, Connection::RecvOp{expect, dst, req});
  return req;
}

RequestPtr ShmDevice::recv_reduce(int peer, const FrameHeader& expect, std::span<uint8_t> dst,
                                  DataType dtype, ReduceOp op) {
  auto req = std::make_shared<Request>();
  if (!is_valid(dtype) || !is_valid(op) || dst.size() % dtype_size(dtype) != 0) {
    complete(req, {ErrorCode::kInvalidArgument, "recv_reduce: invalid dtype or op, or a size that is not whole elements"});
    return req;
  }
  post_recv(peer, Connection::RecvOp{expect, dst, req, true, dtype, op});
  return req;
}

void ShmDevice::recheck_early_frames() {
  for (auto& c : conns_)
    if (c) c->recheck_early_frame();
}

void ShmDevice::send_heartbeat(int peer, std::span<const uint8_t> payload) {
  if (Connection* c = conns_[static_cast<size_t>(peer)].get()) c->post_control(protocol::FrameType::kHeartbeat, payload);
}

void ShmDevice::stats(LinkStats* ps) const {
  if (ps->peer < 0 || ps->peer >= group_.size()) return;
  const Counters& c = *counters_[static_cast<size_t>(ps->peer)];
  ps->device = "shm";
  ps->bytes_sent = c.bytes_sent.load(std::memory_order_relaxed);
  ps->bytes_received = c.bytes_received.load(std::memory_order_relaxed);
  ps->frames_sent = c.frames_sent.load(std::memory_order_relaxed);
  ps->frames_received = c.frames_received.load(std::memory_order_relaxed);
}

void ShmDevice::shutdown() {
  if (shut_.exchange(true)) return;
  auto goodbye = [this] {
    for (auto& c : conns_)
      if (c) {
        c->set_closing();
        c->post_control(protocol::FrameType::kGoodbye);
      }
  };
  if (loop_.in_loop_thread()) {  // nothing can be waited for here
    goodbye();
    return close_all();
  }
  // Bounded wait: a dead or stuck peer must not hold us here.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  auto drain = [&] {
    for (;;) {
      bool queued = false;
      on_loop([&] {
        for (auto& c : conns_)
          if (c && c->sends_queued()) queued = true;
      });
      if (!queued || Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  drain();  // frames into the rings first: the goodbye says that everything was written
  on_loop(goodbye);
  drain();
  on_loop([&] { close_all(); });
}

void ShmDevice::close_all() {
  *alive_ = false;
  const Failure f{ErrorCode::kAborted,
                  "the shared-memory device of rank " + std::to_string(group_.rank()) + " shut down"};
  for (auto& c : conns_) {
    if (!c) continue;
    c->set_closing();
    c->fail_requests(f);
    c.reset();
  }
  group_.notify();
  for (auto& p : pending_) {
    loop_.cancel_timer(p->timer);
    loop_.remove_fd(p->fd.get());
  }
  pending_.clear();
  if (listen_fd_.get() >= 0) loop_.remove_fd(listen_fd_.get());
  listen_fd_.reset();
}

}  // namespace geoccl::transport::shm
