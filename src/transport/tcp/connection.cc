#include "transport/tcp/connection.h"

#include <linux/errqueue.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "core/logging.h"
#include "transport/tcp/device.h"
#include "transport/tcp/socket_util.h"
#include "transport/tcp/stall_probe.h"

namespace geoccl::transport::tcp {

using protocol::FrameHeader;
using protocol::FrameType;
using protocol::kFrameHeaderSize;

namespace {

// Bound on frames handled per readiness event so one busy peer cannot starve the others.
constexpr int kFramesPerEvent = 64;
constexpr int kMaxIov = 64;
// A sealing connection seals frames as it writes them, at most this far ahead of what one
// sendmsg() takes, so that sealing a long queue does not hold the loop thread (and the receives
// and acknowledgements it serves) for long.
constexpr size_t kSealAhead = 1 << 20;

// TCP_NOTSENT_LOWAT (0: leave the kernel's).
void set_notsent_lowat(int fd, uint64_t bytes) {
  if (bytes == 0) return;
  const int v = static_cast<int>(std::min<uint64_t>(bytes, 1u << 30));
  setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v);
}

}  // namespace

TcpConnection::TcpConnection(TcpPeer& peer, int fd, int stream,
                             const security::ConnectionKeys& keys, int via)
    : peer_(peer), fd_(fd), stream_(stream), via_(via) {
  set_keys(keys);
  configure_socket();
}

void TcpConnection::set_keys(const security::ConnectionKeys& keys) {
  if (keys.cipher == 0) {
    if (peer_.group().security())  // cannot happen: the handshake of a secured group gives keys
      throw Error(ErrorCode::kInternal, "unsealed connection in a group with a secret");
    sealed_.reset();
    return;
  }
  // Data frames: the pair's keys for the session, the same on every connection of the pair (a
  // frame re-sent on a resumed stream seals to the same bytes); control frames: this
  // connection's keys from its handshake.
  const security::Key& job = peer_.group().security()->job_key;
  const auto me = static_cast<uint32_t>(peer_.group().rank()), them = static_cast<uint32_t>(peer_.rank);
  const uint8_t ch = peer_.options().channel;  // each channel's device numbers its own frames
  const security::Key pair_send = security::pair_frame_key(job, ch, me, them, keys.cipher);
  const security::Key pair_recv = security::pair_frame_key(job, ch, them, me, keys.cipher);
  sealed_ = std::make_unique<security::SealedStream>(keys.cipher, keys.send, keys.recv, pair_send, pair_recv);
  // The pair's keys outlive a resumed socket: so does the lane, with the frames it seals.
  runtime::WorkerPool* workers = peer_.crypto_workers();
  if (!lane_ && workers) {
    runtime::EventLoop& loop = peer_.group().loop();
    lane_ = std::make_unique<security::CryptoLane>(
        *workers, keys.cipher, pair_send, pair_recv, [&loop, alive = std::weak_ptr<TcpConnection*>(alive_)] {
          loop.post([alive] {
            if (const auto c = alive.lock()) (*c)->on_crypto();
          });
        });
  }
}

size_t TcpConnection::wire_size(const SendOp& op) const {
  return sealed_ ? security::SealedStream::wire_size(op.payload.size()) : kFrameHeaderSize + op.payload.size();
}

void TcpConnection::auth_failed(const char* what) {
  GEOCCL_LOG(kError, "a frame on stream " << stream_ << " from rank " << peer_.rank << " failed authentication ("
                                          << what << ", after " << sealed_->describe() << ")");
  peer_.group().fail(ErrorCode::kProtocol,
                      "a frame from rank " + std::to_string(peer_.rank) + " on stream " + std::to_string(stream_) +
                          " failed authentication (" + what +
                          "): tampered, replayed, reordered or injected; dropped before use",
                      true);
  close_fd();
}

void TcpConnection::configure_socket() {
  {
    const auto& o = peer_.options();
    set_liveness_options(fd_, o.user_timeout, o.keepalive_idle, o.keepalive_interval);
  }
  if (stream_ != TcpDevice::kControlStream) {
    const auto& o = peer_.options();
    set_notsent_lowat(fd_, peer_.wan ? o.wan_notsent_lowat : o.notsent_lowat);
    if (o.zerocopy && !sealed_) {  // sealed frames are written from their own buffers
      const int one = 1;
      zerocopy_ = setsockopt(fd_, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0;
      if (!zerocopy_)
        GEOCCL_LOG(kWarn, "SO_ZEROCOPY refused (" << std::strerror(errno) << "); plain sendmsg");
    }
  }
  if (peer_.wan && stream_ != TcpDevice::kControlStream) peer_.tune_wan_socket(fd_);
  if (pacing_rate_) set_pacing_rate(pacing_rate_);
  interest_ = EPOLLIN;
  peer_.group().loop().add_fd(fd_, interest_, [this](uint32_t ev) { on_events(ev); });
}

TcpConnection::~TcpConnection() {
  lane_.reset();  // no worker reads or writes this connection's frames after this
  if (resume_timer_) peer_.group().loop().cancel_timer(resume_timer_);
  close_fd();
}

void TcpConnection::close_fd() {
  if (fd_ < 0) return;
  peer_.group().loop().remove_fd(fd_);
  ::close(fd_);
  fd_ = -1;
}

void TcpConnection::post_send(SendOp op) {
  if (fd_ < 0 && !reconnecting_) {
    complete(op.req, {ErrorCode::kPeerLost, "connection to rank " + std::to_string(peer_.rank) + " is closed"});
    peer_.group().notify();
    return;
  }
  queued_ += wire_size(op) - op.sent;
  if (op.req) ++frames_sent_;
  if (zerocopy_) op.stable_header = std::make_shared<protocol::FrameHeaderBytes>(op.header);
  const bool was_empty = sendq_.empty();
  sendq_.push_back(std::move(op));
  if (was_empty && stream_ != TcpDevice::kControlStream) peer_.queue_changed();
  write_some();
}

void TcpConnection::enter_reconnecting(const std::string& why, bool recover) {
  close_fd();
  reconnecting_ = true;
  // Whatever part of a frame came in on the broken socket is forgotten: the peer sends that
  // frame again from its start (into the same destination; a frame already complete is dropped).
  have_hdr_ = false;
  hdr_got_ = 0;
  payload_got_ = 0;
  payload_checked_ = false;
  discard_ = false;
  // Frames whose records are with the workers: those that opened complete now (before a copy
  // sent again could be read); the one cut short is zeroed and comes again, unless a record of
  // it was changed (then it fails authentication here, as it would have on the loop thread).
  if (lane_) {
    opening_.reset();
    record_got_ = 0;
    lane_->settle_opens();
    finish_opened();
    if (peer_.group().failed()) return;
  }
  // A sealed stream's record staging goes with its keys: resume() gives the new socket new ones.
  // Zero-copy frames waiting for the kernel's completion: the socket and its buffers are gone,
  // and the session keeps a copy of each (taken when it was written), so their requests are done.
  for (auto& z : zc_wait_) complete(z.req, {});
  const bool any_zc = !zc_wait_.empty();
  zc_wait_.clear();
  zc_calls_ = zc_done_ = 0;
  // New queue: unacknowledged copies (all older), then data frames not yet fully written, each
  // from its first byte. Control frames (goodbye) meant for the old socket are dropped.
  std::deque<SendOp> q;
  for (auto& k : peer_.session.take_kept(stream_)) {
    if (!k.copy) {  // written before copies were kept (cannot happen when copies start on)
      peer_.group().fail(ErrorCode::kPeerLost,
                          "data stream " + std::to_string(stream_) + " to rank " +
                              std::to_string(peer_.rank) +
                              " broke with frames that were sent without a copy to re-send",
                          true, {peer_.rank});
      return;
    }
    SendOp op;
    op.header = k.header;
    op.owned = std::move(k.copy);
    op.payload = *op.owned;
    op.delivery = std::move(k.token);
    op.data = true;
    op.frame = k.frame;
    q.push_back(std::move(op));
  }
  const size_t copies = q.size();
  for (auto& op : sendq_) {
    if (!op.data) continue;
    op.sent = 0;
    // A data frame sealed already keeps its bytes: the pair's key and its number seal it the same
    // on the new socket.
    q.push_back(std::move(op));
  }
  sendq_.swap(q);
  queued_ = 0;
  for (const auto& op : sendq_) queued_ += wire_size(op);
  frames_resent_ += copies;
  GEOCCL_LOG(kWarn, (stream_ == TcpDevice::kControlStream ? "control" : "data") << " stream " << stream_
                                   << " to rank " << peer_.rank << " broke (" << why
                                   << "); re-establishing it, " << copies
                                   << " unacknowledged frame(s) to re-send");
  if (any_zc) peer_.group().notify();
  if (recover) peer_.stream_broken(stream_);
}

void TcpConnection::resume(int fd, const security::ConnectionKeys& keys, int via) {
  if (fd_ >= 0) enter_reconnecting("the peer replaced it", /*recover=*/false);
  if (peer_.group().failed()) {  // a frame settled there failed authentication
    ::close(fd);
    return;
  }
  if (resume_timer_) {
    peer_.group().loop().cancel_timer(resume_timer_);
    resume_timer_ = 0;
  }
  fd_ = fd;
  via_ = via;
  idle_seen_ = std::chrono::steady_clock::now();  // a new socket: nothing of it in flight yet
  acked_seen_ = 0;                                // and nothing of it acknowledged
  reconnecting_ = false;
  goodbye_ = false;
  ++reconnects_;
  set_keys(keys);
  configure_socket();
  GEOCCL_LOG(kWarn, "stream " << stream_ << " to rank " << peer_.rank << " re-established; "
                               << sendq_.size() << " frame(s) queued on it");
  write_some();
  if (stream_ == TcpDevice::kControlStream) peer_.control_resumed();
  peer_.group().notify();
}

void TcpConnection::replace(const std::string& why) {
  if (fd_ < 0) return;
  const linger lg{1, 0};  // the old socket ends with an RST, not a FIN that waits in backoff
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  enter_reconnecting(why);
}

StallSample TcpConnection::stall_sample(std::chrono::steady_clock::time_point now) {
  return tcp::stall_sample(fd_, now, idle_seen_);
}

uint16_t TcpConnection::local_port() const { return fd_ >= 0 ? tcp::local_port(fd_) : 0; }

bool TcpConnection::acked_within(std::chrono::milliseconds ms) const {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return false;
  return ti.tcpi_unacked == 0 || ti.tcpi_last_ack_recv < static_cast<uint32_t>(ms.count());
}

std::chrono::microseconds TcpConnection::srtt() const {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return {};
  return std::chrono::microseconds(ti.tcpi_rtt);
}

uint64_t TcpConnection::oldest_queued_frame() const {
  for (const SendOp& op : sendq_)  // posting order: the first data frame is the oldest
    if (op.data) return op.frame;
  return ~uint64_t{0};
}

uint64_t TcpConnection::take_acked() {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked)  // before Linux 4.1
    return 0;
  const uint64_t now = ti.tcpi_bytes_acked;
  const uint64_t since = now >= acked_seen_ ? now - acked_seen_ : now;
  acked_seen_ = now;
  return since;
}

void TcpConnection::await_resume(std::chrono::milliseconds timeout) {
  if (resume_timer_) peer_.group().loop().cancel_timer(resume_timer_);
  resume_timer_ = peer_.group().loop().add_timer(std::chrono::steady_clock::now() + timeout, [this, timeout] {
    resume_timer_ = 0;
    if (!reconnecting_) return;
    peer_.group().fail(ErrorCode::kPeerUnreachable,
                        "stream " + std::to_string(stream_) + " to rank " +
                            std::to_string(peer_.rank) +
                            " broke and the peer did not re-establish it within " +
                            std::to_string(timeout.count()) + " ms",
                        true, {peer_.rank});
  });
}

void TcpConnection::post_ack(uint64_t upto) {
  if (fd_ < 0) return;
  FrameHeader h;
  h.type = FrameType::kAck;
  h.frame = upto;
  SendOp op;
  op.header = protocol::encode_frame_header(h);
  op.owned = std::make_shared<std::vector<uint8_t>>();
  if (zerocopy_) op.stable_header = std::make_shared<protocol::FrameHeaderBytes>(op.header);
  queued_ += wire_size(op);
  sendq_.push_back(std::move(op));
  write_some();
}

int TcpConnection::reset_for_test(bool silent) {
  if (fd_ < 0) return -1;
  // Silent: a second descriptor keeps the socket alive, so closing ours sends nothing.
  const int kept = silent ? ::dup(fd_) : -1;
  if (!silent) {
    const linger lg{1, 0};  // close() sends an RST instead of a FIN
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  on_closed(silent ? "flow forgotten (fault injection)" : "reset (fault injection)");
  return kept;
}

void TcpConnection::tune_for_wan() {
  if (fd_ < 0) return;
  peer_.tune_wan_socket(fd_);
  set_notsent_lowat(fd_, peer_.options().wan_notsent_lowat);
}

TcpConnection::PathSample TcpConnection::path_sample() const {
  PathSample out;
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return out;
  out.srtt = std::chrono::microseconds(ti.tcpi_rtt);
  out.min_rtt = std::chrono::microseconds(ti.tcpi_min_rtt == ~0u ? 0 : ti.tcpi_min_rtt);
  out.in_flight = ti.tcpi_unacked > 0;
  if (!ti.tcpi_delivery_rate_app_limited) out.delivery_bps = ti.tcpi_delivery_rate * 8;
  out.delivered = ti.tcpi_delivered;
  return out;
}

void TcpConnection::set_pacing_rate(uint64_t bytes_per_second) {
  pacing_rate_ = bytes_per_second;
  if (fd_ < 0) return;
  if (setsockopt(fd_, SOL_SOCKET, SO_MAX_PACING_RATE, &bytes_per_second, sizeof bytes_per_second) != 0)
    GEOCCL_LOG(kDebug, "SO_MAX_PACING_RATE refused: " << std::strerror(errno));
}

void TcpConnection::on_recv_posted(uint64_t frame) {
  if (fd_ < 0 || !have_hdr_ || hdr_.type != FrameType::kData || hdr_.frame != frame) return;
  read_some();
  update_interest();
}

bool TcpConnection::waiting_for_recv() const {
  // A frame received before (re-sent after a break) is read and dropped: no wait for it.
  return have_hdr_ && hdr_.type == FrameType::kData &&
         peer_.session.window().lookup(hdr_.frame) == protocol::RecvWindow<RecvOp>::Lookup::kNotPosted;
}

uint64_t TcpConnection::backlog() const {
  int unsent = 0;
  if (fd_ >= 0 && ioctl(fd_, SIOCOUTQNSD, &unsent) != 0) unsent = 0;
  return queued_ + static_cast<uint64_t>(std::max(unsent, 0));
}

StreamStats TcpConnection::info() const {
  StreamStats s;
  s.index = stream_;
  s.frames_sent = frames_sent_;
  s.frames_received = frames_received_;
  s.bytes_sent = bytes_sent_;
  s.reconnects = reconnects_;
  s.frames_resent = frames_resent_;
  s.via = via_;
  if (fd_ < 0) return s;
  char cc[32] = {};
  socklen_t len = sizeof cc;
  if (getsockopt(fd_, IPPROTO_TCP, TCP_CONGESTION, cc, &len) == 0)
    s.congestion_control.assign(cc, strnlen(cc, sizeof cc));
  int v = 0;
  len = sizeof v;
  if (getsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &v, &len) == 0) s.send_buffer = static_cast<uint64_t>(v);
  len = sizeof v;
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0) s.receive_buffer = static_cast<uint64_t>(v);
  tcp_info ti{};
  len = sizeof ti;
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return s;
  // Older kernels fill a prefix of the structure; fields past `len` stay zero.
  s.rtt_ms = ti.tcpi_rtt / 1000.0;
  s.cwnd_segments = ti.tcpi_snd_cwnd;
  s.mss = ti.tcpi_snd_mss;
  s.retransmits = ti.tcpi_total_retrans;
  s.min_rtt_ms = ti.tcpi_min_rtt == ~0u ? 0 : ti.tcpi_min_rtt / 1000.0;
  s.pacing_rate_bps = ti.tcpi_pacing_rate == ~0ull ? 0 : ti.tcpi_pacing_rate * 8;
  s.delivery_rate_bps = ti.tcpi_delivery_rate * 8;
  s.bytes_retransmitted = ti.tcpi_bytes_retrans;
  return s;
}

void TcpConnection::post_control(FrameType type, std::vector<uint8_t> payload) {
  if (fd_ < 0 || (stream_ != TcpDevice::kControlStream && peer_.group().failed())) return;
  FrameHeader h;
  h.type = type;
  h.payload_len = static_cast<uint32_t>(payload.size());
  SendOp op;
  op.header = protocol::encode_frame_header(h);
  op.owned = std::make_shared<std::vector<uint8_t>>(std::move(payload));
  op.payload = *op.owned;
  if (zerocopy_) op.stable_header = std::make_shared<protocol::FrameHeaderBytes>(op.header);
  queued_ += wire_size(op);
  sendq_.push_back(std::move(op));
  write_some();
}

void TcpConnection::stop_crypto() {
  if (!lane_) return;
  lane_->cancel_seals();
  lane_->cancel_opens();
  opening_.reset();
}

void TcpConnection::fail_requests(const Failure& f) {
  stop_crypto();
  // Zero-copy frames still referenced by the kernel complete now: the group has failed and the
  // peer drops what it gets; the kernel holds its own references to the pages it still reads.
  // Storage stays referenced until the kernel's completion; only the requests complete now.
  for (auto& z : zc_wait_) {
    complete(z.req, f);
    z.req = nullptr;
  }
  // Data frames are dropped even when partly written: their payload is user memory, which the
  // caller may free as soon as the request completes. A data stream is dead from here on: its
  // whole queue goes (re-sent copies and acks too), it is neither read nor written again, and no
  // goodbye follows on it (a goodbye after a cut frame would be read as that frame's bytes). The
  // peer learns why from the abort frame on the control stream, which keeps its control frames.
  std::deque<SendOp> keep;
  for (auto& s : sendq_) {
    if (s.req)
      complete(s.req, f);
    else if (stream_ == TcpDevice::kControlStream && (s.sent == 0 || s.owned))
      keep.push_back(std::move(s));
  }
  sendq_.swap(keep);
  reconnecting_ = false;
  queued_ = 0;
  for (const auto& s : sendq_) queued_ += wire_size(s) - s.sent;
  if (stream_ != TcpDevice::kControlStream) peer_.queue_changed();
}

void TcpConnection::update_interest() {
  if (fd_ < 0) return;
  uint32_t want = 0;
  // Stop reading while a data header waits for a receive: its payload stays in the kernel. A
  // data stream of a failed group is not read at all (see on_events).
  const bool stalled = waiting_for_recv() ||
                       (stream_ != TcpDevice::kControlStream && peer_.group().failed());
  if (!stalled) want |= EPOLLIN;
  if (!sendq_.empty() && !seal_blocked_ && !(stream_ != TcpDevice::kControlStream && peer_.holding()))
    want |= EPOLLOUT;
  if (want != interest_) {
    interest_ = want;
    peer_.group().loop().modify_fd(fd_, want);
  }
}

void TcpConnection::on_events(uint32_t events) {
  if (stream_ != TcpDevice::kControlStream && peer_.group().failed()) {
    // The group is gone: nothing more is read from a data stream (update_interest drops EPOLLIN,
    // so a peer still sending cannot make the loop spin), and a hang-up, reported whatever the
    // interest, closes it.
    if (events & (EPOLLHUP | EPOLLERR)) close_fd();
    update_interest();
    return;
  }
  if (zerocopy_ && (events & EPOLLERR)) read_errqueue();
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_some();
  if (fd_ >= 0 && (events & (EPOLLOUT | EPOLLERR))) write_some();
  update_interest();
}

void TcpConnection::on_closed(const std::string& why) {
  // Frames read in full whose records are still with the workers are not pending: they complete
  // now (the peer may have said goodbye right behind its last frame).
  if (lane_) {
    lane_->settle_opens();
    finish_opened();
    if (peer_.group().failed()) return close_fd();  // nothing more is read or written on it
  }
  if (!goodbye_ && peer_.can_resume(stream_)) return enter_reconnecting(why);
  // A stream that ended after its goodbye has delivered every frame put on it; receives of the
  // peer still pending may be filled by its other data streams, so they matter only when this
  // was the last one open (or when a frame on this stream was cut short).
  const bool mid_frame = have_hdr_ || hdr_got_ > 0;
  const bool recv_pending = stream_ != TcpDevice::kControlStream &&
                            peer_.session.window().pending() &&
                            (mid_frame || !peer_.data_stream_open(this));
  const bool pending = recv_pending ||
                       std::any_of(zc_wait_.begin(), zc_wait_.end(), [](const ZcWait& z) { return z.req; }) ||
                       std::any_of(sendq_.begin(), sendq_.end(), [](const SendOp& s) { return s.req; });
  close_fd();
  if (goodbye_ && !pending) return;
  const std::string msg = "rank " + std::to_string(peer_.rank) + " " +
                          (goodbye_ ? "left the group while operations with it were pending"
                                    : "closed its connection (" + why + "); process died?");
  peer_.group().fail(ErrorCode::kPeerLost, msg, /*tell_peers=*/true, {peer_.rank});
}

// Returns false when the connection failed.
bool TcpConnection::handle_header() {
  protocol::FrameHeader h;
  const auto st = protocol::decode_frame_header(std::span<const uint8_t, kFrameHeaderSize>(hdr_buf_.data(), kFrameHeaderSize), &h);
  if (st == protocol::DecodeStatus::kUnknownControl) {
    // A control frame of a newer minor version: read past its payload and go on.
    hdr_ = h;
    have_hdr_ = true;
    payload_got_ = 0;
    discard_ = true;
    return true;
  }
  if (st != protocol::DecodeStatus::kOk) {
    peer_.group().fail(ErrorCode::kProtocol,
                "undecodable frame from rank " + std::to_string(peer_.rank) + ": " +
                    protocol::decode_status_name(st),
                true);
    close_fd();
    return false;
  }
  if (h.type == FrameType::kData && stream_ == TcpDevice::kControlStream) {
    peer_.group().fail(ErrorCode::kProtocol, "data frame on the control stream of rank " + std::to_string(peer_.rank), true);
    close_fd();
    return false;
  }
  hdr_ = h;
  have_hdr_ = true;
  payload_got_ = 0;
  payload_checked_ = false;
  if (h.type != FrameType::kData) control_payload_.assign(h.payload_len, 0);
  return true;
}

void TcpConnection::check_early_frame() {
  if (waiting_for_recv()) peer_.group().early_frame(peer_.rank, hdr_);
}

ssize_t TcpConnection::receive(uint8_t* dst, size_t n) {
  iovec iov{dst, n};
  return receive(&iov, 1);
}

ssize_t TcpConnection::receive(iovec* iov, int n_iov) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(n_iov);
  const ssize_t got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
  if (got > 0) {
    peer_.bytes_received.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
    peer_.group().heard(peer_.rank);
    return got;
  }
  if (got == 0)
    on_closed("end of stream");
  else if (errno != EAGAIN && errno != EINTR)
    on_closed(std::strerror(errno));
  return 0;
}

void TcpConnection::read_some() {
  for (int frames = 0; fd_ >= 0 && frames < kFramesPerEvent;) {
    if (!have_hdr_) {
      const size_t need = header_wire_size();
      const ssize_t n = receive(hdr_buf_.data() + hdr_got_, need - hdr_got_);
      if (n <= 0) return;
      hdr_got_ += static_cast<size_t>(n);
      if (hdr_got_ < need) continue;
      hdr_got_ = 0;
      // Sealed: no field of the header is used before its tag is verified.
      if (sealed_)
        if (const char* bad = sealed_->open_header(hdr_buf_)) return auth_failed(bad);
      if (!handle_header()) return;
    }

    std::span<uint8_t> dst;
    auto& window = peer_.session.window();
    using Lookup = protocol::RecvWindow<RecvOp>::Lookup;
    if (hdr_.type == FrameType::kData) {
      if (peer_.group().failed()) return;  // the group is gone: on_events stops reading
      const auto found = window.lookup(hdr_.frame);
      if (found == Lookup::kNotPosted) {  // stalled until it is posted
        check_early_frame();
        return;
      }
      if (found == Lookup::kStale) {
        // Received in full already: the peer re-sent it after a stream broke, before our
        // acknowledgement reached it. Read it and drop it.
        discard_ = true;
      }
    }
    if (discard_) {
      const size_t want = std::min<size_t>(hdr_.payload_len - payload_got_, 256 << 10);
      if (discard_buf_.size() < want) discard_buf_.resize(want);
      dst = std::span<uint8_t>(discard_buf_).first(want);
    } else if (hdr_.type == FrameType::kData) {
      RecvOp& r = window.at(hdr_.frame);
      if (!payload_checked_) {
        if (!peer_.group().check_frame(peer_.rank, r.expect, hdr_, r.dst.size())) return;
        payload_checked_ = true;
      }
      dst = r.dst.first(hdr_.payload_len);
    } else {
      dst = control_payload_;
    }

    if (opening_ || (lane_ && hdr_.type == FrameType::kData && !discard_ &&
                     hdr_.payload_len >= security::CryptoLane::kMinPayload)) {
      // A large data frame: its records are read in place and opened by the workers; the frame
      // completes when they all have (finish_opened).
      if (!read_record(dst)) return;
      if (payload_got_ < hdr_.payload_len) continue;
      have_hdr_ = false;
      ++frames;
      sealed_->end_frame();
      opening_.reset();
      continue;
    }
    if (sealed_ && payload_got_ < hdr_.payload_len) {
      // One record at a time into the stream's staging, opened straight into `dst` (a wrong tag
      // leaves no unverified byte there); a discarded frame's records are opened in the staging.
      const std::span<uint8_t> space = sealed_->record_space(hdr_.payload_len);
      const ssize_t n = receive(space.data(), space.size());
      if (n <= 0) return;
      size_t plain = 0;
      const auto got =
          sealed_->record_got(static_cast<size_t>(n), discard_ ? nullptr : dst.data() + payload_got_, &plain);
      if (got == security::SealedStream::Record::kFailed) return auth_failed("payload record");
      if (got == security::SealedStream::Record::kMore) continue;
      payload_got_ += plain;
      if (payload_got_ < hdr_.payload_len) continue;
    }
    // Where the next bytes go: a discarded frame reuses its small buffer from the start.
    const size_t at = discard_ ? 0 : payload_got_;
    if (payload_got_ < hdr_.payload_len) {
      const ssize_t n = receive(dst.data() + at, dst.size() - at);
      if (n <= 0) return;
      payload_got_ += static_cast<size_t>(n);
      if (payload_got_ < hdr_.payload_len) continue;
    }

    // A whole frame is in.
    have_hdr_ = false;
    ++frames;
    if (sealed_) sealed_->end_frame();
    if (discard_) {
      discard_ = false;
      continue;
    }
    switch (hdr_.type) {
      case FrameType::kData: {
        RequestPtr req = window.complete(hdr_.frame).req;
        ++frames_received_;
        req->bytes = hdr_.payload_len;
        complete(req, {});
        peer_.received(hdr_.payload_len);
        peer_.group().notify();
        break;
      }
      case FrameType::kAck:
        peer_.acked(hdr_.frame);
        break;
      case FrameType::kGoodbye:
        goodbye_ = true;
        break;
      case FrameType::kAbort:
        peer_.group().peer_aborted(peer_.rank, control_payload_);
        break;
      case FrameType::kHeartbeat:
        peer_.group().heartbeat(peer_.rank, control_payload_);
        break;
    }
  }
}

bool TcpConnection::read_record(std::span<uint8_t> dst) {
  if (!opening_) {
    opening_ = lane_->begin_open(std::span<const uint8_t, kFrameHeaderSize>(hdr_buf_.data(), kFrameHeaderSize), dst);
    record_got_ = 0;
  }
  const auto index = static_cast<uint32_t>(payload_got_ / security::kRecordBytes);
  const size_t plain = security::record_plain_size(hdr_.payload_len, index);
  const std::span<uint8_t, security::kTagBytes> tag = opening_->tag(index);
  iovec iov[2];
  int n_iov = 0;
  if (record_got_ < plain) iov[n_iov++] = {dst.data() + payload_got_ + record_got_, plain - record_got_};
  const size_t tag_got = record_got_ > plain ? record_got_ - plain : 0;
  iov[n_iov++] = {tag.data() + tag_got, security::kTagBytes - tag_got};
  const ssize_t got = receive(iov, n_iov);
  if (got <= 0) return false;
  record_got_ += static_cast<size_t>(got);
  if (record_got_ < plain + security::kTagBytes) return true;
  lane_->open_record(opening_, index);
  record_got_ = 0;
  payload_got_ += plain;
  return true;
}

void TcpConnection::on_crypto() {
  if (!lane_) return;
  lane_->woken();
  finish_opened();
  if (fd_ >= 0 && seal_blocked_) write_some();
  update_interest();
}

void TcpConnection::finish_opened() {
  for (const auto& o : lane_->take_opened()) {
    if (peer_.group().failed()) return;  // its receive failed with the group
    if (!o->ok()) return auth_failed("payload record");
    RequestPtr req = peer_.session.window().complete(o->frame()).req;
    ++frames_received_;
    req->bytes = o->dst().size();
    complete(req, {});
    peer_.received(o->dst().size());
    peer_.group().notify();
  }
}

void TcpConnection::resume_writing() {
  write_some();
  update_interest();
}

size_t TcpConnection::wire_ready(const SendOp& op) const {
  return op.sealing ? op.sealing->ready() : wire_payload(op).size();
}

void TcpConnection::seal_ahead() {
  if (!lane_) return;
  // Sealing runs at most this far ahead of the socket, in wire bytes and in frames (each frame's
  // sealed bytes are a buffer of their own until written; a queue of small frames is not walked
  // on every write).
  constexpr size_t kAhead = 8u << 20;
  constexpr int kAheadFrames = kMaxIov;
  size_t ahead = 0;
  int frames = 0;
  for (auto& op : sendq_) {
    if (ahead >= kAhead || ++frames > kAheadFrames) break;
    if (op.data && !op.wire && op.payload.size() >= security::CryptoLane::kMinPayload) {
      op.sealing = lane_->seal(op.header, op.payload);
      op.wire = op.sealing->wire();
    }
    ahead += wire_size(op) - op.sent;
  }
}

void TcpConnection::write_some() {
  const bool hold = stream_ != TcpDevice::kControlStream && peer_.holding();
  seal_blocked_ = false;
  while (fd_ >= 0 && !sendq_.empty() && !hold) {
    seal_ahead();
    iovec iov[kMaxIov];
    int n_iov = 0;
    size_t bytes = 0;
    bool control = false;
    for (auto it = sendq_.begin(); it != sendq_.end() && n_iov + 2 <= kMaxIov; ++it) {
      control = control || it->owned != nullptr;
      if (sealed_ && it->sent == 0 && !it->wire) {  // sealed in the order frames go on the wire
        if (n_iov > 0 && bytes >= kSealAhead) break;
        // Not zero-filled: the sealer writes every byte.
        it->wire = std::shared_ptr<uint8_t[]>(new uint8_t[security::sealed_payload_size(it->payload.size())]);
        sealed_->seal(it->header, it->payload, it->wire.get());
      }
      const std::span<const uint8_t> payload = wire_payload(*it);
      const size_t ready = wire_ready(*it);
      size_t skip = it->sent;
      if (skip < kFrameHeaderSize) {
        iov[n_iov++] = {const_cast<uint8_t*>(it->header_data()) + skip, kFrameHeaderSize - skip};
        bytes += kFrameHeaderSize - skip;
        skip = 0;
      } else {
        skip -= kFrameHeaderSize;
      }
      if (skip < ready) {
        iov[n_iov++] = {const_cast<uint8_t*>(payload.data()) + skip, ready - skip};
        bytes += ready - skip;
      }
      if (ready < payload.size()) break;  // the rest of it is being sealed: later frames wait
    }
    if (n_iov == 0) {
      // The head frame's next bytes are still being sealed: written when the workers wake us.
      const auto& sealing = *sendq_.front().sealing;
      if (sealing.failed()) {
        peer_.group().fail(ErrorCode::kInternal,
                           "sealing a frame for rank " + std::to_string(peer_.rank) + " failed (the cipher refused)", true);
        return;
      }
      if (lane_->more_sealed(sealing, sendq_.front().sent - kFrameHeaderSize)) continue;
      seal_blocked_ = true;
      break;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    // Zero copy only pays for large writes (page pinning and a completion per call).
    // Control frames (abort, goodbye) are always copied: they may be the last thing written
    // before the socket is closed and their storage freed.
    const bool zc = zerocopy_ && !control && bytes >= peer_.options().zerocopy_min_bytes;
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      if (zc && errno == ENOBUFS) {  // optmem exhausted by pending notifications: wait for them
        read_errqueue();
        break;
      }
      // The peer may have said goodbye and closed: read what it sent first (the goodbye decides
      // whether this is a failure); reading also reports the end of the connection.
      const std::string why = std::strerror(errno);
      read_some();
      if (fd_ >= 0) on_closed(why);
      return;
    }
    if (zc) ++zc_calls_;
    peer_.bytes_sent.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    bytes_sent_ += static_cast<uint64_t>(n);
    queued_ -= std::min<uint64_t>(queued_, static_cast<uint64_t>(n));
    complete_sent(static_cast<size_t>(n));
  }
  update_interest();
}

// Accounts `n` bytes written by the last sendmsg(): frames fully written complete (or, when the
// kernel may still read their pages, wait for its zero-copy completion).
void TcpConnection::complete_sent(size_t n) {
  size_t left = n;
  bool completed = false;
  while (left > 0 && !sendq_.empty()) {
    SendOp& op = sendq_.front();
    const size_t total = kFrameHeaderSize + wire_payload(op).size();
    const size_t take = std::min(left, total - op.sent);
    op.sent += take;
    left -= take;
    if (op.sent < total) break;
    // The session keeps the frame until the peer acknowledges it (marked delivered then), with
    // a copy to re-send if this stream breaks; the caller may reuse its memory as soon as the
    // request completes.
    const bool acked_already =
        op.data && peer_.session.written(op.frame, stream_, op.header, op.payload, op.delivery, op.owned);
    if (zc_done_ < zc_calls_) {
      // Some of its bytes may have left in a zero-copy call still in flight: the request (and
      // the storage of the header and of a control payload) waits for the latest one.
      zc_wait_.push_back({zc_calls_ - 1, std::move(op.req), std::move(op.stable_header),
                          std::move(op.owned)});
    } else {
      complete(op.req, {});
      completed = completed || op.req != nullptr;
    }
    if (acked_already && op.delivery) op.delivery->delivered.store(true, std::memory_order_release);
    sendq_.pop_front();
  }
  if (sendq_.empty() && stream_ != TcpDevice::kControlStream) peer_.queue_changed();
  if (completed) peer_.group().notify();
}

// Drains MSG_ZEROCOPY completions: each reports a range [lo, hi] of zero-copy calls whose pages
// the kernel no longer needs.
void TcpConnection::read_errqueue() {
  bool completed = false;
  while (fd_ >= 0) {
    char control[128];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (::recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
            (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
        continue;
      sock_extended_err ee{};
      std::memcpy(&ee, CMSG_DATA(cm), sizeof ee);
      if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY || ee.ee_errno != 0) continue;
      if (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) ++zc_copied_;
      // Completions arrive in order on TCP; ee_data is the last call of the range.
      if (ee.ee_data + 1 > zc_done_) zc_done_ = ee.ee_data + 1;
    }
  }
  while (!zc_wait_.empty() && zc_wait_.front().call < zc_done_) {
    if (zc_wait_.front().req) {
      complete(zc_wait_.front().req, {});
      completed = true;
    }
    zc_wait_.pop_front();
  }
  if (completed) peer_.group().notify();
}

}  // namespace geoccl::transport::tcp
