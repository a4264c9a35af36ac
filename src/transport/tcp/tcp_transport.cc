#include "transport/tcp/tcp_transport.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "core/logging.h"
#include "protocol/handshake.h"
#include "transport/tcp/socket_util.h"
#include "transport/tcp/tcp_connection.h"

namespace geoccl::transport::tcp {

using protocol::FrameHeader;
using Clock = std::chrono::steady_clock;

namespace {
// An inbound connection must introduce itself within this time or it is dropped.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

}  // namespace

TcpOptions TcpOptions::from_config(const Config& cfg) {
  const bool wan = !cfg.domain.empty();
  TcpOptions o;
  o.buffer_bytes = cfg.tcp_buf_bytes >= 0 ? static_cast<uint64_t>(cfg.tcp_buf_bytes) : (wan ? 32ull << 20 : 0);
  o.notsent_lowat =
      cfg.tcp_notsent_lowat >= 0 ? static_cast<uint64_t>(cfg.tcp_notsent_lowat) : (wan ? 1ull << 20 : 0);
  o.zerocopy = cfg.tcp_zerocopy;
  o.zerocopy_min_bytes = cfg.tcp_zerocopy_min_bytes;
  o.round_robin = cfg.tcp_stripe == "rr";
  o.resume = cfg.tcp_resume == "on" || (cfg.tcp_resume == "auto" && wan);
  o.resume_timeout = cfg.tcp_resume_timeout;
  return o;
}

struct TcpTransport::PendingAccept {
  int fd = -1;
  std::array<uint8_t, protocol::kHelloSize> buf{};
  size_t got = 0;
  runtime::EventLoop::TimerId timer = 0;
};

TcpTransport::TcpTransport(runtime::EventLoop& loop, int rank, int size,
                           const std::string& bind_addr, uint64_t session_id,
                           std::function<void()> on_progress,
                           const std::string& congestion_control, int data_streams,
                           const TcpOptions& options)
    : loop_(loop),
      rank_(rank),
      size_(size),
      session_id_(session_id),
      on_progress_(std::move(on_progress)),
      cc_(congestion_control),
      streams_(1 + std::max(1, data_streams)),
      options_(options),
      frames_sent_(static_cast<size_t>(size), 0),
      rotate_(static_cast<size_t>(size), 0),
      width_(static_cast<size_t>(size), streams_ - 1),
      resume_peer_(static_cast<size_t>(size), options.resume ? 1 : 0),
      recv_windows_(static_cast<size_t>(size)),
      acked_(static_cast<size_t>(size), 0),
      ack_sent_(static_cast<size_t>(size), 0),
      ack_bytes_(static_cast<size_t>(size), 0),
      peer_addrs_(static_cast<size_t>(size)),
      conns_(static_cast<size_t>(size) * static_cast<size_t>(streams_)),
      dialers_(conns_.size()) {
  for (int i = 0; i < size; ++i) {
    bytes_sent_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
    bytes_received_.push_back(std::make_unique<std::atomic<uint64_t>>(0));
  }
  // Buffers are set on the listening socket so that accepted sockets inherit them before the
  // handshake: the receive buffer decides the window scale offered in the SYN-ACK.
  listen_fd_ = listen_on(bind_addr, 0);
  if (options_.buffer_bytes > 0) {
    const auto got = set_buffer_sizes(listen_fd_, options_.buffer_bytes);
    GEOCCL_LOG(kInfo, "TCP buffers: requested " << options_.buffer_bytes << " B, kernel holds snd "
                                                << got.first << " rcv " << got.second);
  }
  if (!cc_.empty()) {
    const std::string got = set_congestion_control(listen_fd_, cc_);
    GEOCCL_LOG(kInfo, "TCP congestion control: requested " << cc_ << ", kernel uses " << got);
    if (got != cc_) GEOCCL_LOG(kWarn, "congestion control " << cc_ << " refused; using " << got);
  }
  address_ = bind_addr + ":" + std::to_string(local_port(listen_fd_));
  if (bind_addr.find(':') != std::string::npos)
    address_ = "[" + bind_addr + "]:" + std::to_string(local_port(listen_fd_));
  loop_.run_sync([this] { loop_.add_fd(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept(); }); });
}

TcpTransport::~TcpTransport() {
  // Stream re-dialers stop at their next attempt (each is bounded by a few seconds).
  closing_.store(true);
  loop_.run_sync([this] {
    for (auto& t : dialers_)
      if (t.joinable()) t.join();
  });
  loop_.run_sync([this] {
    for (auto& c : conns_)
      if (c && c->open()) c->post_control(protocol::FrameType::kGoodbye, {});
  });
  // Bounded wait for goodbyes (and aborts) to leave; a dead peer must not hold us here.
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    bool empty = true;
    loop_.run_sync([&] {
      for (auto& c : conns_)
        if (c && c->open() && !c->send_queue_empty()) empty = false;
    });
    if (empty || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop_.run_sync([this] {
    for (auto& p : pending_) {
      loop_.cancel_timer(p->timer);
      loop_.remove_fd(p->fd);
      ::close(p->fd);
    }
    pending_.clear();
    conns_.clear();
    for (int fd : forgotten_fds_) ::close(fd);
    loop_.remove_fd(listen_fd_);
    ::close(listen_fd_);
  });
}

void TcpTransport::on_accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    set_nodelay(fd);
    auto p = std::make_unique<PendingAccept>();
    p->fd = fd;
    p->timer = loop_.add_timer(Clock::now() + kHandshakeTimeout, [this, fd] {
      GEOCCL_LOG(kWarn, "dropping inbound connection that sent no handshake");
      rejected_.fetch_add(1);
      drop_pending(fd);
      ::close(fd);
    });
    loop_.add_fd(fd, EPOLLIN, [this, fd](uint32_t) { on_pending_readable(fd); });
    pending_.push_back(std::move(p));
  }
}

void TcpTransport::drop_pending(int fd) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if ((*it)->fd != fd) continue;
    loop_.cancel_timer((*it)->timer);
    loop_.remove_fd(fd);
    pending_.erase(it);
    return;
  }
}

void TcpTransport::on_pending_readable(int fd) {
  PendingAccept* p = nullptr;
  for (auto& q : pending_)
    if (q->fd == fd) p = q.get();
  if (!p) return;
  const ssize_t n = ::recv(fd, p->buf.data() + p->got, p->buf.size() - p->got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    rejected_.fetch_add(1);
    drop_pending(fd);
    ::close(fd);
    return;
  }
  p->got += static_cast<size_t>(n);
  // A stranger that speaks a different protocol is told off at the first wrong byte count.
  if (p->got < p->buf.size()) return;

  protocol::Hello hello;
  auto st = protocol::decode_hello(p->buf, &hello);
  if (st == protocol::HandshakeStatus::kAccepted)
    st = protocol::check_hello(hello, static_cast<uint32_t>(size_), session_id_,
                               static_cast<uint16_t>(streams_));
  // Only higher ranks connect to us, once per stream; a data stream may be connected again when
  // we resume streams (the peer found it broken), and only while the group stands.
  const int from = static_cast<int>(hello.rank);
  TcpConnection* existing = nullptr;
  if (st == protocol::HandshakeStatus::kAccepted) {
    existing = from > rank_ ? conn(from, hello.stream) : nullptr;
    if (from <= rank_ || (existing && (hello.stream == kControlStream || !can_resume(from))))
      st = protocol::HandshakeStatus::kBadRank;
  }
  protocol::Reply reply;
  reply.status = st;
  reply.rank = static_cast<uint32_t>(rank_);
  const auto bytes = protocol::encode_reply(reply);
  // The reply is 16 bytes on a fresh socket: it fits in the send buffer.
  [[maybe_unused]] ssize_t w = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  drop_pending(fd);
  if (st != protocol::HandshakeStatus::kAccepted) {
    GEOCCL_LOG(kWarn, "rejected inbound connection: " << protocol::handshake_status_name(st));
    rejected_.fetch_add(1);
    ::close(fd);
    return;
  }
  if (existing) {
    existing->resume(fd);
    return;
  }
  adopt(fd, from, hello.stream);
}

void TcpTransport::adopt(int fd, int peer, int stream) {
  conns_[static_cast<size_t>(peer * streams_ + stream)] =
      std::make_unique<TcpConnection>(*this, fd, peer, stream);
  ++connected_;
  notify();
}

void TcpTransport::connect_all(const std::function<std::string(int)>& addr_of,
                               std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (int peer = 0; peer < rank_; ++peer) {
    peer_addrs_[static_cast<size_t>(peer)] = addr_of(peer);
    for (int stream = 0; stream < streams_; ++stream) {
      std::string why;
      bool rejected = false;
      int fd = -1;
      // The peer is listening already (it published its address), but retry briefly on refusal.
      while ((fd = dial(peer, stream, deadline, &why, &rejected)) < 0) {
        if (rejected) throw Error(ErrorCode::kProtocol, why);
        if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, why);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      set_nonblocking(fd, true);
      loop_.run_sync([&] { adopt(fd, peer, stream); });
    }
  }
  // Wait for every higher rank's connections.
  const int expected = (size_ - 1) * streams_;  // every stream of every other rank
  for (;;) {
    int have = 0;
    std::string missing;
    loop_.run_sync([&] {
      have = connected_;
      for (int r = rank_ + 1; r < size_; ++r)
        if (!conn(r, 0) || !conn(r, streams_ - 1))
          missing += (missing.empty() ? "" : ",") + std::to_string(r);
    });
    if (have == expected) return;
    if (Clock::now() > deadline)
      throw Error(ErrorCode::kTimeout, "rank(s) " + missing + " did not connect in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int TcpTransport::dial(int peer, int stream, Clock::time_point deadline, std::string* why,
                       bool* rejected) {
  *rejected = false;
  std::string host;
  uint16_t port = 0;
  split_host_port(peer_addrs_[static_cast<size_t>(peer)], &host, &port);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const std::string where = "rank " + std::to_string(peer) + " at " + host + ":" + std::to_string(port);
  if (left.count() <= 0) {
    *why = "cannot connect to " + where;
    return -1;
  }
  const int fd = connect_with_timeout(host, port, left, [this](int s) {
    if (options_.buffer_bytes > 0) set_buffer_sizes(s, options_.buffer_bytes);
  });
  if (fd < 0) {
    *why = "cannot connect to " + where;
    return -1;
  }
  set_nodelay(fd);
  if (!cc_.empty()) set_congestion_control(fd, cc_);
  protocol::Hello hello;
  hello.stream = static_cast<uint16_t>(stream);
  hello.rank = static_cast<uint32_t>(rank_);
  hello.world_size = static_cast<uint32_t>(size_);
  hello.session_id = session_id_;
  const auto hb = protocol::encode_hello(hello);
  std::array<uint8_t, protocol::kReplySize> rb{};
  if (!write_all(fd, hb, deadline) || !read_all(fd, rb, deadline)) {
    *why = "handshake with " + where + " failed: " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  protocol::Reply reply;
  auto st = protocol::decode_reply(rb, &reply);
  if (st == protocol::HandshakeStatus::kAccepted) st = reply.status;
  if (st == protocol::HandshakeStatus::kAccepted && reply.rank != static_cast<uint32_t>(peer))
    st = protocol::HandshakeStatus::kBadRank;
  if (st != protocol::HandshakeStatus::kAccepted) {
    ::close(fd);
    *rejected = true;
    *why = where + " rejected us: " + protocol::handshake_status_name(st);
    return -1;
  }
  return fd;
}

bool TcpTransport::can_resume(int peer) const {
  const TcpConnection* control = conn(peer, kControlStream);
  return resume_peer_[static_cast<size_t>(peer)] && !failed_.load() && !closing_.load() && control &&
         control->open() && !control->said_goodbye();
}

void TcpTransport::stream_broken(int peer, int stream) {
  if (rank_ > peer) {  // we connected it: connect it again
    std::thread& t = dialers_[static_cast<size_t>(peer * streams_ + stream)];
    if (t.joinable()) t.join();
    t = std::thread([this, peer, stream] { redial(peer, stream); });
    return;
  }
  conn(peer, stream)->await_resume(options_.resume_timeout);
}

void TcpTransport::redial(int peer, int stream) {
  const auto deadline = Clock::now() + options_.resume_timeout;
  auto backoff = std::chrono::milliseconds(10);
  std::string why;
  while (!closing_.load() && !failed_.load()) {
    bool rejected = false;
    // Each attempt is bounded so that shutting down never waits long for this thread.
    const int fd = dial(peer, stream, std::min(deadline, Clock::now() + std::chrono::seconds(2)), &why,
                        &rejected);
    if (fd >= 0) {
      set_nonblocking(fd, true);
      loop_.post([this, peer, stream, fd] {
        TcpConnection* c = conn(peer, stream);
        if (closing_.load() || failed_.load() || !c || !c->usable()) {
          ::close(fd);
          return;
        }
        c->resume(fd);
      });
      return;
    }
    if (rejected || Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  if (closing_.load() || failed_.load()) return;
  loop_.post([this, peer, stream, why] {
    fail(ErrorCode::kPeerLost,
         "data stream " + std::to_string(stream) + " to rank " + std::to_string(peer) +
             " broke and could not be re-established within " +
             std::to_string(options_.resume_timeout.count()) + " ms: " + why,
         true);
  });
}

void TcpTransport::maybe_ack(int peer, uint64_t bytes) {
  const size_t p = static_cast<size_t>(peer);
  ack_bytes_[p] += bytes;
  const auto& w = recv_windows_[p];
  const uint64_t upto = w.base();
  // Often enough to bound what the sender keeps (a few MiB), rarely enough to cost nothing:
  // every 4 MiB, and whenever no receive from the peer is pending (the end of an operation).
  if (upto <= ack_sent_[p] || (ack_bytes_[p] < (4u << 20) && w.pending())) return;
  TcpConnection* c = conn(peer, kControlStream);
  if (!c || !c->open() || c->said_goodbye()) return;  // a peer that is leaving needs no acks
  c->post_ack(upto);
  ack_sent_[p] = upto;
  ack_bytes_[p] = 0;
}

void TcpTransport::on_ack(int peer, uint64_t upto) {
  uint64_t& a = acked_[static_cast<size_t>(peer)];
  if (upto <= a) return;
  a = upto;
  for (int s = 1; s < streams_; ++s)
    if (TcpConnection* c = conn(peer, s)) c->on_ack(upto);
}

void TcpTransport::reset_stream_for_test(int peer, int stream, bool silent) {
  loop_.run_sync([&] {
    if (TcpConnection* c = conn(peer, stream)) {
      const int kept = c->reset_for_test(silent);
      if (kept >= 0) forgotten_fds_.push_back(kept);
    }
  });
}

bool TcpTransport::complete_if_failed(const RequestPtr& req) {
  auto f = failure();
  if (!f) return false;
  req->failure = *f;
  req->done.store(true, std::memory_order_release);
  notify();
  return true;
}

bool TcpTransport::data_stream_open(int peer, const TcpConnection* except) const {
  for (int s = 1; s < streams_; ++s) {
    const TcpConnection* c = conn(peer, s);
    if (c && c != except && c->usable()) return true;
  }
  return false;
}

void TcpTransport::set_local_peer(int peer) {
  loop_.post([this, peer] {
    width_[static_cast<size_t>(peer)] = 1;
    resume_peer_[static_cast<size_t>(peer)] = 0;
    for (int s = 1; s < streams_; ++s)
      if (TcpConnection* c = conn(peer, s)) c->on_ack(~uint64_t{0});  // drop the copies kept
  });
}

TcpConnection& TcpTransport::next_send_conn(int peer, size_t bytes) {
  const int data = width_[static_cast<size_t>(peer)];
  if (data == 1) return *conn(peer, 1);
  // Small messages take one stream: it stays warm, and a latency-bound exchange never waits on a
  // stream that has been idle (measured on the test bed: 4 KiB allreduces across regions had
  // ~220 ms outliers when spread over 4 streams, none on one).
  if (bytes < kSmallFrame && conn(peer, 1)->open() && conn(peer, 1)->backlog() < kSmallFrame)
    return *conn(peer, 1);
  if (options_.round_robin) {
    size_t& k = rotate_[static_cast<size_t>(peer)];
    return *conn(peer, 1 + static_cast<int>(k++ % static_cast<size_t>(data)));
  }
  std::array<uint64_t, 64> backlog{};
  for (int i = 0; i < data; ++i) {
    const TcpConnection* c = conn(peer, 1 + i);
    // Avoid closed streams and those being re-established while any other is open.
    backlog[static_cast<size_t>(i)] = c->open() ? c->backlog() : ~uint64_t{0};
  }
  size_t& rot = rotate_[static_cast<size_t>(peer)];
  const size_t i = pick_stream(std::span<const uint64_t>(backlog.data(), static_cast<size_t>(data)), rot);
  rot = i + 1;
  return *conn(peer, 1 + static_cast<int>(i));
}

RequestPtr TcpTransport::send(int peer, const FrameHeader& h, std::span<const uint8_t> payload) {
  auto req = std::make_shared<Request>();
  FrameHeader hh = h;
  hh.type = protocol::FrameType::kData;
  hh.payload_len = static_cast<uint32_t>(payload.size());
  TcpConnection::SendOp op;
  op.payload = payload;
  op.req = req;
  // The frame number is given on the loop thread, where frames are numbered in posting order.
  loop_.post([this, peer, hh, op = std::move(op)]() mutable {
    if (complete_if_failed(op.req)) return;
    FrameHeader numbered = hh;
    numbered.frame = frames_sent_[static_cast<size_t>(peer)]++;
    op.header = protocol::encode_frame_header(numbered);
    op.data = true;
    op.frame = numbered.frame;
    const size_t bytes = op.payload.size();
    next_send_conn(peer, bytes).post_send(std::move(op));
  });
  return req;
}

RequestPtr TcpTransport::recv(int peer, const FrameHeader& expect, std::span<uint8_t> dst) {
  auto req = std::make_shared<Request>();
  TcpConnection::RecvOp op{expect, dst, req};
  loop_.post([this, peer, op = std::move(op)]() mutable {
    if (complete_if_failed(op.req)) return;
    if (!data_stream_open(peer)) {
      op.req->failure = {ErrorCode::kPeerLost, "connection to rank " + std::to_string(peer) + " is closed"};
      op.req->done.store(true, std::memory_order_release);
      notify();
      return;
    }
    const uint64_t frame = recv_windows_[static_cast<size_t>(peer)].post(std::move(op));
    // The frame may be waiting at the head of one of the data streams already.
    for (int s = 1; s < streams_; ++s) conn(peer, s)->on_recv_posted(frame);
  });
  return req;
}

void TcpTransport::begin_operation(const FrameHeader& h) {
  loop_.post([this, h] {
    current_op_ = h;
    for (auto& c : conns_)
      if (c) c->check_early_frame();
  });
}

void TcpTransport::abort(ErrorCode code, const std::string& message) {
  if (loop_.in_loop_thread()) {
    fail(code, message, true);
    return;
  }
  loop_.run_sync([&] { fail(code, message, true); });
}

void TcpTransport::fail(ErrorCode code, const std::string& message, bool tell_peers) {
  {
    std::lock_guard lk(failure_mu_);
    if (failure_) return;
    failure_ = Failure{code, message};
  }
  failed_.store(true);
  GEOCCL_LOG(kError, "group failed: " << error_code_name(code) << ": " << message);
  const Failure f{code, message};
  for (auto& w : recv_windows_)
    w.drain([&](TcpConnection::RecvOp& r) {
      r.req->failure = f;
      r.req->done.store(true, std::memory_order_release);
    });
  for (auto& c : conns_)
    if (c) c->fail_requests(f);
  if (tell_peers) {
    const auto payload = protocol::encode_abort(static_cast<uint8_t>(code), message);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      if (TcpConnection* c = conn(p, kControlStream)) c->post_control(protocol::FrameType::kAbort, payload);
    }
  }
  notify();
}

std::optional<Failure> TcpTransport::failure() const {
  if (!failed_.load()) return std::nullopt;
  std::lock_guard lk(failure_mu_);
  return failure_;
}

std::vector<PeerStats> TcpTransport::stats() const {
  std::vector<PeerStats> out;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    PeerStats ps;
    ps.peer = p;
    ps.bytes_sent = bytes_sent_[p]->load();
    ps.bytes_received = bytes_received_[p]->load();
    out.push_back(std::move(ps));
  }
  // TCP_INFO is read on the loop thread, the only owner of the sockets.
  auto read_info = [&] {
    for (auto& ps : out) {
      for (int s = 1; s < streams_; ++s) {
        const TcpConnection* c = conn(ps.peer, s);
        if (!c) continue;
        ps.streams.push_back(c->info());
      }
      ps.data_streams = static_cast<int>(ps.streams.size());
      for (const auto& st : ps.streams) {
        if (ps.congestion_control.empty()) ps.congestion_control = st.congestion_control;
        ps.rtt_ms += st.rtt_ms / static_cast<double>(ps.streams.size());
        if (st.min_rtt_ms > 0 && (ps.min_rtt_ms == 0 || st.min_rtt_ms < ps.min_rtt_ms))
          ps.min_rtt_ms = st.min_rtt_ms;
        ps.cwnd_segments += st.cwnd_segments;
        ps.retransmits += st.retransmits;
        ps.bytes_retransmitted += st.bytes_retransmitted;
        ps.delivery_rate_bps += st.delivery_rate_bps;
        ps.pacing_rate_bps += st.pacing_rate_bps;
      }
    }
  };
  if (size_ > 1) {
    if (loop_.in_loop_thread())
      read_info();
    else
      loop_.run_sync(read_info);
  }
  return out;
}

}  // namespace geoccl::transport::tcp
