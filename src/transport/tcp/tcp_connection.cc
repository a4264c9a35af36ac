#include "transport/tcp/tcp_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "transport/tcp/tcp_transport.h"

namespace geoccl::transport::tcp {

using protocol::FrameHeader;
using protocol::FrameType;
using protocol::kFrameHeaderSize;

namespace {

void complete(const RequestPtr& req, const Failure& f) {
  if (!req) return;
  req->failure = f;
  req->done.store(true, std::memory_order_release);
}

// Bound on frames handled per readiness event so one busy peer cannot starve the others.
constexpr int kFramesPerEvent = 64;
constexpr int kMaxIov = 64;

}  // namespace

TcpConnection::TcpConnection(TcpTransport& owner, int fd, int peer, int stream)
    : owner_(owner), fd_(fd), peer_(peer), stream_(stream) {
  interest_ = EPOLLIN;
  owner_.loop_.add_fd(fd_, interest_, [this](uint32_t ev) { on_events(ev); });
}

TcpConnection::~TcpConnection() { close_fd(); }

void TcpConnection::close_fd() {
  if (fd_ < 0) return;
  owner_.loop_.remove_fd(fd_);
  ::close(fd_);
  fd_ = -1;
}

void TcpConnection::post_send(SendOp op) {
  if (fd_ < 0) {
    complete(op.req, {ErrorCode::kPeerLost, "connection to rank " + std::to_string(peer_) + " is closed"});
    owner_.notify();
    return;
  }
  sendq_.push_back(std::move(op));
  write_some();
}

void TcpConnection::post_recv(RecvOp op) {
  if (fd_ < 0) {
    complete(op.req, {ErrorCode::kPeerLost, "connection to rank " + std::to_string(peer_) + " is closed"});
    owner_.notify();
    return;
  }
  recvq_.push_back(std::move(op));
  // A header may be waiting for exactly this receive.
  if (have_hdr_) read_some();
  update_interest();
}

void TcpConnection::post_control(FrameType type, std::vector<uint8_t> payload) {
  if (fd_ < 0) return;
  FrameHeader h;
  h.type = type;
  h.payload_len = static_cast<uint32_t>(payload.size());
  SendOp op;
  op.header = protocol::encode_frame_header(h);
  op.owned = std::make_shared<std::vector<uint8_t>>(std::move(payload));
  op.payload = *op.owned;
  sendq_.push_back(std::move(op));
  write_some();
}

void TcpConnection::fail_requests(const Failure& f) {
  for (auto& r : recvq_) complete(r.req, f);
  recvq_.clear();
  // Data frames are dropped even when partly written: their payload is user memory, which the
  // caller may free as soon as the request completes. The stream is dead from here on; the
  // peer learns why from the abort frame on the control stream.
  std::deque<SendOp> keep;
  for (auto& s : sendq_) {
    if (s.req)
      complete(s.req, f);
    else if (s.sent == 0 || s.owned)
      keep.push_back(std::move(s));
  }
  sendq_.swap(keep);
}

void TcpConnection::update_interest() {
  if (fd_ < 0) return;
  uint32_t want = 0;
  // Stop reading while a data header waits for a receive: its payload stays in the kernel.
  const bool stalled = have_hdr_ && hdr_.type == FrameType::kData && recvq_.empty();
  if (!stalled) want |= EPOLLIN;
  if (!sendq_.empty()) want |= EPOLLOUT;
  if (want != interest_) {
    interest_ = want;
    owner_.loop_.modify_fd(fd_, want);
  }
}

void TcpConnection::on_events(uint32_t events) {
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_some();
  if (fd_ >= 0 && (events & (EPOLLOUT | EPOLLERR))) write_some();
  update_interest();
}

void TcpConnection::on_closed(const std::string& why) {
  const bool pending = !recvq_.empty() || std::any_of(sendq_.begin(), sendq_.end(),
                                                      [](const SendOp& s) { return s.req; });
  close_fd();
  if (goodbye_ && !pending) return;
  const std::string msg = "rank " + std::to_string(peer_) + " " +
                          (goodbye_ ? "left the group while operations with it were pending"
                                    : "closed its connection (" + why + "); process died?");
  owner_.fail(ErrorCode::kPeerLost, msg, /*tell_peers=*/true);
}

// Returns false when the connection failed.
bool TcpConnection::handle_header() {
  protocol::FrameHeader h;
  const auto st = protocol::decode_frame_header(std::span<const uint8_t, kFrameHeaderSize>(hdr_buf_), &h);
  if (st != protocol::DecodeStatus::kOk) {
    owner_.fail(ErrorCode::kProtocol,
                "undecodable frame from rank " + std::to_string(peer_) + ": " +
                    protocol::decode_status_name(st),
                true);
    close_fd();
    return false;
  }
  if (h.type == FrameType::kData && stream_ == TcpTransport::kControlStream) {
    owner_.fail(ErrorCode::kProtocol, "data frame on the control stream of rank " + std::to_string(peer_), true);
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
  if (!have_hdr_ || hdr_.type != FrameType::kData || !recvq_.empty() || !owner_.current_op_) return;
  const FrameHeader& cur = *owner_.current_op_;
  if (hdr_.kind == protocol::OpKind::kSendRecv || hdr_.seq > cur.seq) return;
  std::string why = hdr_.seq < cur.seq ? "a frame of an earlier operation arrived late"
                                       : protocol::describe_mismatch(cur, hdr_);
  if (why.empty()) return;
  owner_.fail(ErrorCode::kMismatch,
              std::string("ranks disagree on ") + protocol::op_kind_name(cur.kind) + " #" +
                  std::to_string(cur.seq) + " with rank " + std::to_string(peer_) + ": " + why,
              true);
}

void TcpConnection::read_some() {
  for (int frames = 0; fd_ >= 0 && frames < kFramesPerEvent;) {
    if (!have_hdr_) {
      const ssize_t n = ::recv(fd_, hdr_buf_.data() + hdr_got_, kFrameHeaderSize - hdr_got_, MSG_DONTWAIT);
      if (n == 0) return on_closed("end of stream");
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        return on_closed(std::strerror(errno));
      }
      owner_.bytes_received_[peer_]->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      hdr_got_ += static_cast<size_t>(n);
      if (hdr_got_ < kFrameHeaderSize) continue;
      hdr_got_ = 0;
      if (!handle_header()) return;
    }

    std::span<uint8_t> dst;
    if (hdr_.type == FrameType::kData) {
      if (recvq_.empty()) {  // stalled until a receive is posted
        check_early_frame();
        return;
      }
      RecvOp& r = recvq_.front();
      if (!payload_checked_) {
        std::string why = protocol::describe_mismatch(r.expect, hdr_);
        if (why.empty() && hdr_.payload_len != r.dst.size())
          why = "message length: expected " + std::to_string(r.dst.size()) + " bytes, peer sent " +
                std::to_string(hdr_.payload_len);
        if (!why.empty()) {
          owner_.fail(ErrorCode::kMismatch,
                      std::string("ranks disagree on ") + protocol::op_kind_name(r.expect.kind) +
                          " #" + std::to_string(r.expect.seq) + " with rank " +
                          std::to_string(peer_) + ": " + why,
                      true);
          return;
        }
        payload_checked_ = true;
      }
      dst = r.dst;
    } else {
      dst = control_payload_;
    }

    if (payload_got_ < dst.size()) {
      const ssize_t n = ::recv(fd_, dst.data() + payload_got_, dst.size() - payload_got_, MSG_DONTWAIT);
      if (n == 0) return on_closed("end of stream");
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        return on_closed(std::strerror(errno));
      }
      owner_.bytes_received_[peer_]->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      payload_got_ += static_cast<size_t>(n);
      if (payload_got_ < dst.size()) continue;
    }

    // A whole frame is in.
    have_hdr_ = false;
    ++frames;
    switch (hdr_.type) {
      case FrameType::kData: {
        RequestPtr req = std::move(recvq_.front().req);
        recvq_.pop_front();
        complete(req, {});
        owner_.notify();
        break;
      }
      case FrameType::kGoodbye:
        goodbye_ = true;
        break;
      case FrameType::kAbort: {
        uint8_t code = 0;
        std::string msg;
        if (!protocol::decode_abort(control_payload_, &code, &msg) || code == 0 ||
            code > static_cast<uint8_t>(ErrorCode::kInternal)) {
          code = static_cast<uint8_t>(ErrorCode::kAborted);
          msg = "malformed abort frame";
        }
        owner_.fail(static_cast<ErrorCode>(code), "rank " + std::to_string(peer_) + " reports: " + msg,
                    /*tell_peers=*/false);
        break;
      }
    }
  }
}

void TcpConnection::write_some() {
  while (fd_ >= 0 && !sendq_.empty()) {
    iovec iov[kMaxIov];
    int n_iov = 0;
    for (auto it = sendq_.begin(); it != sendq_.end() && n_iov + 2 <= kMaxIov; ++it) {
      size_t skip = it->sent;
      if (skip < kFrameHeaderSize) {
        iov[n_iov++] = {it->header.data() + skip, kFrameHeaderSize - skip};
        skip = 0;
      } else {
        skip -= kFrameHeaderSize;
      }
      if (skip < it->payload.size())
        iov[n_iov++] = {const_cast<uint8_t*>(it->payload.data()) + skip, it->payload.size() - skip};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      on_closed(std::strerror(errno));
      return;
    }
    owner_.bytes_sent_[peer_]->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    size_t left = static_cast<size_t>(n);
    bool completed = false;
    while (left > 0 && !sendq_.empty()) {
      SendOp& op = sendq_.front();
      const size_t total = kFrameHeaderSize + op.payload.size();
      const size_t take = std::min(left, total - op.sent);
      op.sent += take;
      left -= take;
      if (op.sent == total) {
        complete(op.req, {});
        completed = completed || op.req != nullptr;
        sendq_.pop_front();
      }
    }
    // Zero-length payload frames can complete without consuming bytes beyond their header.
    if (completed) owner_.notify();
  }
  update_interest();
}

}  // namespace geoccl::transport::tcp
