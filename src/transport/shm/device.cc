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
#include <thread>

#include "core/logging.h"
#include "protocol/handshake_machine.h"
#include "protocol/shm_hello.h"
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
  std::unique_ptr<protocol::HandshakeAcceptor> hs;
  // Once its Hello is accepted (with a secret, the dialler's proof comes next and the connection
  // is adopted only when that proof is right): what the Hello brought.
  Segment seg;
  size_t ring_bytes = 0;
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
    p->hs = std::make_unique<protocol::HandshakeAcceptor>(
        group_.handshake_setup(protocol::Transport::kSharedMemory));
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


}  // namespace

void ShmDevice::on_pending_readable(int fd) {
  Pending* p = nullptr;
  for (auto& q : pending_)
    if (q->fd.get() == fd) p = q.get();
  if (!p) return;
  protocol::HandshakeAcceptor& hs = *p->hs;
  // Each of the dialler's messages is one packet: the Hello with its extension (and AuthInit),
  // with the descriptors; then, with a secret, AuthFin.
  std::array<uint8_t, protocol::kHelloSize + protocol::kMaxExtension + security::kAuthInitSize + 1> buf;
  std::vector<UniqueFd> fds;  // every descriptor received is closed unless adopted
  int flags = 0;
  const ssize_t n = recv_with_fds(fd, buf, &fds, &flags, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  // A mapped segment: its Hello was accepted, and the dialler's proof is what comes now.
  const std::string who = p->seg.mapped() ? "a shared-memory connection claiming to be rank " +
                                                  std::to_string(hs.hello().rank)
                                            : "a shared-memory connection";
  if (n <= 0) {  // closed (or failed) without a word
    GEOCCL_LOG(kWarn, "rejected " << who << ": closed in its handshake");
    take_pending(fd);
    rejected_.fetch_add(1);
    return;
  }
  const size_t used = hs.feed(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
  // A packet that holds more or less than the message is malformed.
  if ((flags & (MSG_TRUNC | MSG_CTRUNC)) || used != static_cast<size_t>(n) ||
      hs.state() == protocol::HandshakeState::kRunning)
    hs.refuse(protocol::HandshakeStatus::kMalformed, "");
  if (hs.state() == protocol::HandshakeState::kJudge) {
    if (std::string reason = judge(*p, fds); !reason.empty()) {
      hs.refuse(protocol::HandshakeStatus::kRefused, std::move(reason));
    } else {
      hs.accept();
      p->wake_self = std::move(fds[1]);
      p->wake_peer = std::move(fds[2]);
    }
  } else if (hs.state() == protocol::HandshakeState::kDone) {  // the dialler's proof was right
    // The state may have changed while the proof travelled (refused now: the dialler sees the
    // socket close).
    std::lock_guard lk(mu_);
    if (linked_[hs.hello().rank])
      hs.refuse(protocol::HandshakeStatus::kRefused, "rank " + std::to_string(hs.hello().rank) + " is connected already");
    else if (shut_.load())
      hs.refuse(protocol::HandshakeStatus::kRefused, "rank " + std::to_string(group_.rank()) + " is shutting down");
  }
  if (hs.state() == protocol::HandshakeState::kRefused) {
    // A refusal is counted before the dialler hears it: whoever sees the answer sees the count.
    rejected_.fetch_add(1);
    GEOCCL_LOG(kWarn, "rejected " << who << ": " << (hs.auth_failed() ? "failed authentication: " : "") << hs.why());
  }
  if (const auto out = hs.take_output(); !out.empty()) send_packet(fd, out);
  if (hs.state() == protocol::HandshakeState::kRefused) {
    take_pending(fd);
    return;
  }
  if (hs.state() != protocol::HandshakeState::kDone) return;  // the dialler's proof comes next
  auto taken = take_pending(fd);
  adopt(static_cast<int>(taken->hs->hello().rank), false, std::move(taken->fd), std::move(taken->wake_self),
        std::move(taken->wake_peer), std::move(taken->seg), taken->ring_bytes);
}

std::string ShmDevice::judge(Pending& p, std::vector<UniqueFd>& fds) {
  const size_t from = p.hs->hello().rank;
  protocol::shm::Extension ext;
  if (!protocol::shm::decode_extension(p.hs->extension(), &ext))
    return "no shared-memory extension (ring size, token) behind the Hello";
  if (std::string why = protocol::shm::check_extension(ext); !why.empty()) return why;
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
  std::string why;
  Segment& seg = p.seg;
  seg = Segment::map(fds[0].release(), segment_bytes(ext.ring_bytes), &why);
  if (!seg.mapped()) return "shared memory: " + why;
  why = check_segment(seg, ext.ring_bytes, ext.token);
  if (!why.empty()) seg.reset();
  else seg.close_fd();  // the mapping keeps the memory
  p.ring_bytes = ext.ring_bytes;
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
  protocol::shm::Extension ext;
  ext.ring_bytes = d->capacity;
  fill_random(ext.token);
  d->seg = Segment::create(segment_bytes(d->capacity), "geoccl-shm");
  init_segment(d->seg, d->capacity, ext.token);
  d->wake_self = new_eventfd();
  d->wake_peer = new_eventfd();

  protocol::HandshakeDialler hs(group_.handshake_setup(protocol::Transport::kSharedMemory),
                                static_cast<uint32_t>(peer), 0, protocol::shm::encode_extension(ext));
  const int fds[kDescriptors] = {d->seg.fd(), d->wake_peer.get(), d->wake_self.get()};
  const auto first = hs.take_output();
  bool sent = send_with_fds(s.get(), first, fds, 0) == static_cast<ssize_t>(first.size());
  // The acceptor answers in one packet (Reply, and AuthResp or the reason).
  std::array<uint8_t, 512> rb;
  ssize_t n = sent ? ::recv(s.get(), rb.data(), rb.size(), 0) : -1;
  if (n > 0) hs.feed(std::span<const uint8_t>(rb.data(), static_cast<size_t>(n)));
  if (const auto out = hs.take_output(); !out.empty())  // our proof (also when theirs was wrong)
    sent = ::send(s.get(), out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  if (hs.state() == protocol::HandshakeState::kDone && sent) {
    d->seg.close_fd();  // the peer has its own descriptor; the mapping keeps the memory
    fcntl(s.get(), F_SETFL, fcntl(s.get(), F_GETFL) | O_NONBLOCK);
    d->sock = std::move(s);
    return d;
  }
  if (hs.state() != protocol::HandshakeState::kRefused) {
    *why = "handshake with " + where + " failed: " +
           (n > 0 ? "did not answer as a geoccl shared-memory peer" : n == 0 ? "closed" : std::strerror(errno));
    return nullptr;
  }
  *rejected = true;
  if (!hs.auth_failed()) {
    *why = where + " rejected us: " + hs.why();
    return nullptr;
  }
  *why = "authentication with " + where + " failed: " + hs.why();
  // The acceptor heard why and closes: wait for that (bounded by the socket's timeout, the connect
  // deadline), so that the refusal is on record at both ends when this returns.
  if (sent) (void)::recv(s.get(), rb.data(), rb.size(), 0);
  return nullptr;
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

Transport::Forwarded ShmDevice::recv_forward(int from, const FrameHeader& expect, std::span<uint8_t> dst, int to,
                                             const FrameHeader& h, const Transport::Forwarding& how) {
  Transport::Forwarded r{std::make_shared<Request>(), std::make_shared<Request>()};
  // An operand is dst itself or apart from it (the kernels' arguments do not alias).
  const auto* a = how.operand.data();
  const bool apart = a == dst.data() || a + how.operand.size() <= dst.data() || dst.data() + dst.size() <= a;
  if ((how.reduce && (!is_valid(how.dtype) || !is_valid(how.op) || dst.size() % dtype_size(how.dtype) != 0 ||
                      how.operand.size() != dst.size() || !apart)) ||
      dst.size() > protocol::kMaxPayload || from == to) {
    const Failure f{ErrorCode::kInvalidArgument,
                    "recv_forward: invalid dtype or op, a size that is not whole elements or over the frame limit, "
                    "an operand of another size or partly over dst, or one peer both ways"};
    complete(r.recv, f);
    complete(r.send, f);
    return r;
  }
  auto fwd = std::make_shared<Forward>();
  fwd->dst = dst;
  fwd->how = how;
  fwd->elem = how.reduce ? dtype_size(how.dtype) : 1;
  loop_.post([this, from, to, expect, h, fwd, r] {
    const bool failed = group_.complete_if_failed(r.recv);
    if (group_.complete_if_failed(r.send) || failed) return;
    auto conn = [&](int p) { return p >= 0 && p < group_.size() ? conns_[static_cast<size_t>(p)] : nullptr; };
    const auto in = conn(from), out = conn(to);
    if (!in || !out) {
      const Failure f{ErrorCode::kPeerLost, "no shared-memory link to rank " + std::to_string(in ? to : from)};
      complete(r.recv, f);
      complete(r.send, f);
      group_.notify();
      return;
    }
    fwd->from = in;
    fwd->to = out;
    out->post_forward(h, fwd, r.send);
    Connection::RecvOp op{expect, fwd->dst, r.recv};
    op.fwd = fwd;  // what the payload becomes is fwd's (Connection::feed)
    in->post_recv(std::move(op));
  });
  return r;
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
  ps->forwarded_bytes = c.bytes_forwarded.load(std::memory_order_relaxed);
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
