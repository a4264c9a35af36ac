#include "transport/shm/connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "core/logging.h"
#include "core/reduce.h"
#include "protocol/wire.h"

namespace geoccl::transport::shm {

using protocol::FrameHeader;
using protocol::FrameType;
using protocol::kFrameHeaderSize;

namespace {

constexpr uint64_t kSegmentMagic = 0x4753'4D48'5345'4F47ull;  // "GEOSHMSG"
constexpr uint32_t kSegmentVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kControlOffset = 128;
constexpr size_t kDataOffset = 4096;
// Commit granularity: the reader can start on a piece while the writer copies the next.
constexpr size_t kPiece = 256 << 10;
// Bytes moved per direction in one pass before the loop thread serves others.
constexpr size_t kBudget = 8 << 20;
// The largest control packet: an abort, or a control frame of a newer minor version to skip.
constexpr size_t kMaxControl =
    kFrameHeaderSize +
    std::max<size_t>(protocol::kMaxAbortPayload, protocol::kMaxUnknownControlPayload);

RingControl* control_block(const Segment& seg, int ring) {
  return reinterpret_cast<RingControl*>(seg.data() + kControlOffset +
                                        static_cast<size_t>(ring) * sizeof(RingControl));
}
uint8_t* ring_data(const Segment& seg, size_t capacity, int ring) {
  return seg.data() + kDataOffset + static_cast<size_t>(ring) * capacity;
}

}  // namespace

namespace {

// The `n` payload bytes of a forwarded frame at `at`, arrived at `in`: their result written to the
// next ring at `out` (a copying forward leaves them in dst too).
void forward_into(const Forward& f, size_t at, const uint8_t* in, size_t n, uint8_t* out) {
  const Transport::Forwarding& h = f.how;
  const size_t count = n / f.elem;
  if (!h.reduce) {
    std::memcpy(out, in, n);
    std::memcpy(f.dst.data() + at, in, n);
  } else if (h.payload_first) {
    core::reduce_to(out, in, h.operand.data() + at, count, h.dtype, h.op);
  } else {
    core::reduce_to(out, h.operand.data() + at, in, count, h.dtype, h.op);
  }
}

// The same result written to dst instead, where the sender writes it from once it is ready.
void spill_into_dst(const Forward& f, size_t at, const uint8_t* in, size_t n) {
  const Transport::Forwarding& h = f.how;
  const size_t count = n / f.elem;
  uint8_t* d = f.dst.data() + at;
  if (!h.reduce) {
    std::memcpy(d, in, n);
  } else if (h.operand.data() == f.dst.data()) {  // reduced in place
    core::reduce_into(d, in, count, h.dtype, h.op,
                      h.payload_first ? core::Operands::kSrcFirst : core::Operands::kDstFirst);
  } else if (h.payload_first) {
    core::reduce_to(d, in, h.operand.data() + at, count, h.dtype, h.op);
  } else {
    core::reduce_to(d, h.operand.data() + at, in, count, h.dtype, h.op);
  }
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {
constexpr size_t kMaxFds = 8;
}

ssize_t send_with_fds(int sock, std::span<const uint8_t> bytes, std::span<const int> fds, int flags) {
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  const size_t nfds = std::min(fds.size(), kMaxFds);
  if (nfds > 0) {
    msg.msg_control = cbuf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * nfds);
  }
  return ::sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
}

ssize_t recv_with_fds(int sock, std::span<uint8_t> buf, std::vector<UniqueFd>* fds, int* msg_flags,
                      int flags) {
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxFds)];
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof cbuf;
  const ssize_t n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  *msg_flags = msg.msg_flags;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int v;
      std::memcpy(&v, CMSG_DATA(c) + i * sizeof(int), sizeof v);
      fds->emplace_back(v);
    }
  }
  return n;
}

size_t segment_bytes(size_t ring_capacity) { return kDataOffset + 2 * ring_capacity; }

void init_segment(const Segment& seg, size_t ring_capacity, const Token& token) {
  std::vector<uint8_t> h;
  protocol::Writer w(&h);
  w.u64(kSegmentMagic);
  w.u32(kSegmentVersion);
  w.u32(0);
  w.u64(ring_capacity);
  w.bytes(token);
  std::memcpy(seg.data(), h.data(), h.size());
  for (int ring = 0; ring < 2; ++ring) new (control_block(seg, ring)) RingControl{};
}

std::string check_segment(const Segment& seg, size_t ring_capacity, const Token& token) {
  if (seg.size() < segment_bytes(ring_capacity)) return "segment too small";
  protocol::Reader r(std::span<const uint8_t>(seg.data(), kHeaderBytes));
  uint64_t magic = 0, capacity = 0;
  uint32_t version = 0, reserved = 1;
  Token got{};
  r.u64(&magic);
  r.u32(&version);
  r.u32(&reserved);
  r.u64(&capacity);
  for (auto& b : got) r.u8(&b);
  if (!r.ok() || magic != kSegmentMagic || version != kSegmentVersion || reserved != 0)
    return "the segment is not a geoccl shared-memory segment";
  if (capacity != ring_capacity) return "the segment's ring size differs from the hello's";
  if (got != token) return "token mismatch: the shared memory does not hold the hello's token";
  return "";
}

Connection::Connection(Group& group, int peer, bool dialler, UniqueFd sock, UniqueFd wake_self,
                       UniqueFd wake_peer, Segment seg, size_t ring_capacity, Counters& counters)
    : group_(group),
      loop_(group.loop()),
      peer_(peer),
      sock_(std::move(sock)),
      wake_self_(std::move(wake_self)),
      wake_peer_(std::move(wake_peer)),
      seg_(std::move(seg)),
      counters_(counters) {
  // The dialler writes ring 0 and reads ring 1; the acceptor the other way round.
  const int out = dialler ? 0 : 1, in = 1 - out;
  out_ = RingWriter(control_block(seg_, out), ring_data(seg_, ring_capacity, out), ring_capacity);
  in_ = RingReader(control_block(seg_, in), ring_data(seg_, ring_capacity, in), ring_capacity);
}

Connection::~Connection() {
  close_socket();
  if (wake_self_.get() >= 0) loop_.remove_fd(wake_self_.get());
}

void Connection::start() {
  sock_interest_ = EPOLLIN | EPOLLRDHUP;
  loop_.add_fd(sock_.get(), sock_interest_, [this](uint32_t ev) { on_socket(ev); });
  loop_.add_fd(wake_self_.get(), EPOLLIN, [this](uint32_t) { on_wake(); });
  progress();
}

void Connection::post_send(FrameHeader h, std::span<const uint8_t> payload, RequestPtr req) {
  h.type = FrameType::kData;
  h.payload_len = static_cast<uint32_t>(payload.size());
  h.frame = session_.number_frame();
  sendq_.push_back(SendOp{protocol::encode_frame_header(h), payload, std::move(req), h.frame});
  progress();
}

void Connection::post_forward(FrameHeader h, std::shared_ptr<Forward> fwd, RequestPtr req) {
  h.type = FrameType::kData;
  h.payload_len = static_cast<uint32_t>(fwd->dst.size());
  h.frame = session_.number_frame();
  const std::span<const uint8_t> length(fwd->dst.data(), fwd->dst.size());  // never read here
  sendq_.push_back(SendOp{protocol::encode_frame_header(h), length, std::move(req), h.frame});
  sendq_.back().fwd = std::move(fwd);
  progress();
}

void Connection::kick() {
  if (continuation_posted_) return;
  continuation_posted_ = true;
  loop_.post([w = weak_from_this()] {
    if (auto c = w.lock()) {
      c->continuation_posted_ = false;
      c->progress();
    }
  });
}

void Connection::post_recv(RecvOp op) {
  session_.window().post(std::move(op));
  progress();
}

void Connection::recheck_early_frame() {
  if (have_hdr_ && !stopped() &&
      session_.window().lookup(hdr_.frame) == protocol::RecvWindow<RecvOp>::Lookup::kNotPosted)
    group_.early_frame(peer_, hdr_);
}

void Connection::fail_requests(const Failure& f) {
  session_.window().drain([&](RecvOp& r) { complete(r.req, f); });
  for (auto& s : sendq_) complete(s.req, f);
  sendq_.clear();
  inflight_.clear();
  session_.drop_unacked([](RequestPtr&) {});  // never delivered
  stopped_ = true;
}

void Connection::on_wake() {
  uint64_t v;
  [[maybe_unused]] ssize_t n = ::read(wake_self_.get(), &v, sizeof v);
  progress();
}

void Connection::wake_peer() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_peer_.get(), &one, sizeof one);
}

void Connection::fail_protocol(const std::string& what) {
  group_.fail(ErrorCode::kProtocol, what + " (shared memory link with rank " + std::to_string(peer_) + ")",
              true);
}

void Connection::progress() {
  size_t budget = 2 * kBudget;
  for (;;) {
    if (stopped()) return;
    const bool wrote = write_some(&budget);
    if (stopped()) return;
    const bool read = read_some(&budget);
    if (stopped()) return;
    if (out_.corrupt() || in_.corrupt()) return fail_protocol("ring positions out of range");
    settle_delivered();
    if (budget == 0) return kick();
    if (peer_left_ && (!sendq_.empty() || session_.window().pending())) {
      group_.fail(
          ErrorCode::kPeerLost,
          "rank " + std::to_string(peer_) + " left the group while operations with it were pending",
          true, {peer_});
      return;
    }
    if (wrote || read) continue;
    if (!arm_waits()) return;  // asleep until the peer signals
  }
}

bool Connection::reader_waits_for_peer() const {
  // A reader stopped at an early frame waits for a local receive, not for the peer.
  return !peer_left_ &&
         !(have_hdr_ && session_.window().lookup(hdr_.frame) == protocol::RecvWindow<RecvOp>::Lookup::kNotPosted);
}

bool Connection::peer_moved() {
  if (reader_waits_for_peer() && in_.available(need_) >= need_) return true;
  if (!sendq_.empty()) {
    const SendOp& f = sendq_.front();
    // A forwarded frame whose payload bytes are all written so far waits for its feeder, which
    // waits for room when it says so.
    const bool caught_up = f.fwd && f.written >= kFrameHeaderSize && f.written - kFrameHeaderSize == f.fwd->ready;
    const size_t want = caught_up ? f.fwd->elem : f.aligned ? 1 : std::max<size_t>(out_.pad(), 1);
    if ((!caught_up || f.fwd->feeder_waits) && out_.room(want) >= want) return true;
  }
  return !inflight_.empty() && out_.consumed() >= inflight_.front().end;
}

// No spinning before sleeping: measured with the 96 MiB benchmark on 2 cores, watching the
// peer's positions for 20 us before arming cost 25% of the throughput, 100 us half of it (the
// spinner takes the core the peer or the caller needs).
bool Connection::arm_waits() {
  if (reader_waits_for_peer()) in_.arm_wait();
  if (!sendq_.empty() || !inflight_.empty()) out_.arm_wait();
  // Judged again from the positions read after asking (seq_cst: see ring.h).
  return peer_moved();
}

bool Connection::write_some(size_t* budget) {
  bool progressed = false;
  while (!sendq_.empty() && *budget > 0) {
    SendOp& op = sendq_.front();
    bool wake = false;
    if (!op.aligned) {
      if (!out_.align(&wake)) break;
      op.aligned = true;
    }
    size_t n = 0;
    if (op.written < kFrameHeaderSize)
      n += out_.write(std::span<const uint8_t>(op.header).subspan(op.written), kPiece, &wake);
    op.written += n;
    if (op.written >= kFrameHeaderSize) {
      // A forwarded frame's payload goes from dst as far as its feeder left it there; the feeder,
      // told the header is out, writes the rest straight into the ring.
      const std::span<const uint8_t> src =
          op.fwd ? std::span<const uint8_t>(op.fwd->dst.data(), op.fwd->ready) : op.payload;
      const size_t at = op.written - kFrameHeaderSize;
      const size_t m = out_.write(src.subspan(at, std::min(src.size() - at, *budget)), kPiece, &wake);
      op.written += m;
      *budget -= m;
      n += m;
      if (Forward* f = op.fwd.get()) {
        f->header_out = true;
        if (f->feeder_waits && op.written == kFrameHeaderSize + f->ready && out_.room(f->elem) >= f->elem) {
          f->feeder_waits = false;
          if (auto from = f->from.lock()) from->kick();
        }
      }
    }
    if (wake) wake_peer();
    counters_.bytes_sent.fetch_add(n, std::memory_order_relaxed);
    progressed = progressed || n > 0;
    if (op.written < kFrameHeaderSize + op.payload.size()) break;  // no room, budget spent, or fed
    finish_front_send();
    progressed = true;
  }
  return progressed;
}

void Connection::finish_front_send() {
  SendOp& op = sendq_.front();
  counters_.frames_sent.fetch_add(1, std::memory_order_relaxed);
  complete(op.req);
  session_.written(op.frame, 0, op.header, {}, std::move(op.req));
  inflight_.push_back(Inflight{out_.position(), op.frame});
  sendq_.pop_front();
  group_.notify();
}

bool Connection::feed(RecvOp& r, size_t* budget, bool* progressed) {
  Forward& f = *r.fwd;
  const auto to = f.to.lock();
  const size_t es = f.elem;
  // Straight into the sender's ring while this frame is its next and every byte before is in.
  auto sender_ready = [&] {
    return to && !to->stopped() && f.header_out && !to->sendq_.empty() && to->sendq_.front().fwd == r.fwd &&
           to->sendq_.front().written == kFrameHeaderSize + f.ready;
  };
  bool spilled = false;
  while (got_ < hdr_.payload_len) {
    if (*budget < es) {
      *budget = 0;
      break;
    }
    need_ = es;
    const auto in = in_.peek(es);
    if (in.size() < es) break;  // waits for the peer
    size_t n = std::min({in.size(), size_t{hdr_.payload_len} - got_, *budget, kPiece});
    std::span<uint8_t> out;
    if (sender_ready()) out = to->out_.writable(es);
    const size_t half = in_.capacity() / 2;
    // A peer that left wrote all it will: what is in the ring is drained now, not waited on.
    if (out.size() < es && to && !to->stopped() && !peer_left_ && in_.available(half) < half) {
      // Waits for the sender while this ring has room for the peer: asks the sender's reader for
      // a wake-up, then looks again (ring.h); the sender kicks this connection once it is ready,
      // and each write of the peer wakes it to look again (it spills once the ring is half full).
      f.feeder_waits = true;
      to->out_.arm_wait();
      if (sender_ready()) out = to->out_.writable(es);
      if (out.size() < es) {
        if (to->out_.corrupt()) to->kick();  // the sender reports it
        need_ = half;
        return false;
      }
      f.feeder_waits = false;
    }
    if (out.size() >= es) {
      n = std::min(n, out.size());
      n -= n % es;
      forward_into(f, got_, in.data(), n, out.data());
      bool wake_to = false;
      to->out_.advance(n, &wake_to);
      if (wake_to) to->wake_peer();
      to->sendq_.front().written += n;
      to->counters_.bytes_sent.fetch_add(n, std::memory_order_relaxed);
      to->counters_.bytes_forwarded.fetch_add(n, std::memory_order_relaxed);
    } else {  // the sender is not ready for it: into dst, from where the sender takes it
      n -= n % es;
      spill_into_dst(f, got_, in.data(), n);
      spilled = true;
    }
    got_ += n;
    f.ready = got_;
    *budget -= n;
    if (in_.consume(n)) wake_peer();
    counters_.bytes_received.fetch_add(n, std::memory_order_relaxed);
    *progressed = true;
  }
  if (spilled && to) to->kick();
  if (got_ < hdr_.payload_len) return false;
  // All of it is through: the sender finishes the frame now, or once it has written what is in dst.
  f.feeder_waits = false;
  if (sender_ready() && to->sendq_.front().written == kFrameHeaderSize + f.dst.size()) {
    to->finish_front_send();
    to->kick();
  }
  return true;
}

void Connection::settle_delivered() {
  if (inflight_.empty()) return;
  const uint64_t consumed = out_.consumed();
  uint64_t upto = 0;
  while (!inflight_.empty() && inflight_.front().end <= consumed) {
    upto = inflight_.front().frame + 1;
    inflight_.pop_front();
  }
  if (upto == 0) return;
  session_.acked(upto, [](RequestPtr& r) { r->delivered.store(true, std::memory_order_release); });
  group_.notify();
}

bool Connection::check_frame(const RecvOp& r) {
  return group_.check_frame(peer_, r.expect, hdr_, r.dst.size(), r.reduce || r.fwd);
}

bool Connection::read_some(size_t* budget) {
  using Lookup = protocol::RecvWindow<RecvOp>::Lookup;
  bool progressed = false;
  while (*budget > 0) {
    if (!have_hdr_) {
      const size_t pad = in_.pad();
      need_ = pad + kFrameHeaderSize;
      if (in_.available(need_) < need_) return progressed;
      bool wake = pad > 0 && in_.consume(pad);
      protocol::FrameHeaderBytes hb;
      in_.copy(hb.data(), hb.size());
      group_.heard(peer_);
      wake = in_.consume(hb.size()) || wake;
      if (wake) wake_peer();
      counters_.bytes_received.fetch_add(kFrameHeaderSize, std::memory_order_relaxed);
      progressed = true;
      const auto st = protocol::decode_frame_header(hb, &hdr_);
      if (st != protocol::DecodeStatus::kOk) {
        fail_protocol(std::string("undecodable frame in the ring: ") + protocol::decode_status_name(st));
        return progressed;
      }
      if (hdr_.type != FrameType::kData) {
        fail_protocol("control frame in the data ring");
        return progressed;
      }
      have_hdr_ = true;
      early_reported_ = false;
      checked_ = false;
      got_ = 0;
    }
    const Lookup found = session_.window().lookup(hdr_.frame);
    if (found == Lookup::kNotPosted) {  // waits in the ring until its receive is posted
      if (!early_reported_) {
        early_reported_ = true;
        group_.early_frame(peer_, hdr_);
      }
      return progressed;
    }
    if (found == Lookup::kStale) {
      fail_protocol("data frame " + std::to_string(hdr_.frame) + " arrived twice");
      return progressed;
    }
    RecvOp& r = session_.window().at(hdr_.frame);
    if (!checked_) {
      if (!check_frame(r)) return progressed;
      checked_ = true;
    }
    if (r.fwd && !feed(r, budget, &progressed)) return progressed;
    const size_t es = r.reduce ? dtype_size(r.dtype) : 1;
    while (got_ < hdr_.payload_len) {
      if (*budget < es) {
        *budget = 0;
        return progressed;
      }
      need_ = es;
      const auto span = in_.peek(es);
      size_t n = std::min({span.size(), size_t{hdr_.payload_len} - got_, *budget});
      n -= n % es;  // a partial element waits for the rest (an element never straddles the wrap)
      if (n == 0) return progressed;
      if (r.reduce)
        core::reduce_into(r.dst.data() + got_, span.data(), n / es, r.dtype, r.op);
      else
        std::memcpy(r.dst.data() + got_, span.data(), n);
      got_ += n;
      *budget -= n;
      if (in_.consume(n)) wake_peer();
      counters_.bytes_received.fetch_add(n, std::memory_order_relaxed);
      progressed = true;
    }
    have_hdr_ = false;
    RecvOp done = session_.window().complete(hdr_.frame);
    done.req->bytes = hdr_.payload_len;
    counters_.frames_received.fetch_add(1, std::memory_order_relaxed);
    complete(done.req);
    group_.notify();
  }
  return progressed;
}

void Connection::post_control(FrameType type, std::span<const uint8_t> payload) {
  if (sock_.get() < 0) return;
  FrameHeader h;
  h.type = type;
  h.payload_len = static_cast<uint32_t>(payload.size());
  const auto hb = protocol::encode_frame_header(h);
  std::vector<uint8_t> pkt(hb.begin(), hb.end());
  pkt.insert(pkt.end(), payload.begin(), payload.end());
  ctlq_.push_back(std::move(pkt));
  flush_control();
}

void Connection::flush_control() {
  while (sock_.get() >= 0 && !ctlq_.empty()) {
    const auto& pkt = ctlq_.front();
    const ssize_t n = ::send(sock_.get(), pkt.data(), pkt.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) {  // the peer is gone: reading the socket reports it
      ctlq_.clear();
      break;
    }
    ctlq_.pop_front();
  }
  if (sock_.get() < 0) return;
  const uint32_t want = EPOLLIN | EPOLLRDHUP | (ctlq_.empty() ? 0u : uint32_t{EPOLLOUT});
  if (want != sock_interest_) {
    sock_interest_ = want;
    loop_.modify_fd(sock_.get(), want);
  }
}

void Connection::on_socket(uint32_t events) {
  if (events & EPOLLOUT) flush_control();
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) read_control();
}

void Connection::read_control() {
  std::vector<uint8_t>& buf = control_buf_;
  buf.resize(kMaxControl);
  while (sock_.get() >= 0) {
    std::vector<UniqueFd> stray;  // a peer has no descriptors to send here: closed
    int flags = 0;
    const ssize_t n = recv_with_fds(sock_.get(), buf, &stray, &flags, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) return on_closed(n == 0 ? "end of stream" : std::strerror(errno));
    FrameHeader h;
    const size_t len = static_cast<size_t>(n);
    const auto st = len >= kFrameHeaderSize
                        ? protocol::decode_frame_header(std::span<const uint8_t, kFrameHeaderSize>(buf.data(), kFrameHeaderSize), &h)
                        : protocol::DecodeStatus::kBadLength;
    if ((st != protocol::DecodeStatus::kOk && st != protocol::DecodeStatus::kUnknownControl) ||
        (flags & MSG_TRUNC) || len != kFrameHeaderSize + h.payload_len) {
      fail_protocol("undecodable control frame");
      return close_socket();
    }
    group_.heard(peer_);
    if (st == protocol::DecodeStatus::kUnknownControl) continue;  // of a newer minor version
    const std::span<const uint8_t> payload(buf.data() + kFrameHeaderSize, h.payload_len);
    switch (h.type) {
      case FrameType::kGoodbye:
        goodbye_ = true;
        break;
      case FrameType::kAbort:
        group_.peer_aborted(peer_, payload);
        break;
      case FrameType::kHeartbeat:
        group_.heartbeat(peer_, payload);
        break;
      default:
        fail_protocol(std::string("unexpected frame type ") + std::to_string(static_cast<int>(h.type)) +
                      " on the control socket");
        return close_socket();
    }
  }
}

void Connection::on_closed(const std::string& why) {
  close_socket();
  if (closing_ || group_.failed()) return;
  if (!goodbye_) {
    group_.fail(ErrorCode::kPeerLost,
                "rank " + std::to_string(peer_) +
                    " closed its shared-memory link without a goodbye (" + why + "); process died?",
                true, {peer_});
    return;
  }
  // What the peer wrote before its goodbye is still in the ring: receives may still be served.
  peer_left_ = true;
  progress();
}

void Connection::close_socket() {
  if (sock_.get() < 0) return;
  loop_.remove_fd(sock_.get());
  sock_.reset();
  ctlq_.clear();
}

}  // namespace geoccl::transport::shm
