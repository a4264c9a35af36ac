// TcpConnection: one socket of the mesh and its frame queues. Loop thread only.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "transport/transport.h"

namespace geoccl::transport::tcp {

class TcpTransport;

class TcpConnection {
 public:
  struct SendOp {
    protocol::FrameHeaderBytes header;
    std::span<const uint8_t> payload;
    std::shared_ptr<std::vector<uint8_t>> owned;  // payload storage for control frames
    RequestPtr req;                               // null for control frames
    size_t sent = 0;                              // bytes of header+payload written
  };
  struct RecvOp {
    protocol::FrameHeader expect;
    std::span<uint8_t> dst;
    RequestPtr req;
  };

  // Takes ownership of `fd` (non-blocking) and registers it with the loop.
  TcpConnection(TcpTransport& owner, int fd, int peer, int stream);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  void post_send(SendOp op);
  void post_recv(RecvOp op);
  // Queues a control frame (abort / goodbye) with its own copy of the payload.
  void post_control(protocol::FrameType type, std::vector<uint8_t> payload);
  // Completes every queued request with `f` (the control frames stay queued).
  void fail_requests(const Failure& f);
  // A data frame waiting for its receive must belong to the current collective or a later one;
  // anything else means the ranks called different operations (fails the group with kMismatch).
  void check_early_frame();
  bool send_queue_empty() const { return sendq_.empty(); }
  bool open() const { return fd_ >= 0; }

 private:
  void on_events(uint32_t events);
  void read_some();
  void write_some();
  void update_interest();
  // The connection ended: a failure unless the peer said goodbye and nothing is pending.
  void on_closed(const std::string& why);
  void close_fd();
  bool handle_header();

  TcpTransport& owner_;
  int fd_;
  const int peer_;
  const int stream_;
  uint32_t interest_ = 0;

  std::deque<SendOp> sendq_;
  std::deque<RecvOp> recvq_;

  std::array<uint8_t, protocol::kFrameHeaderSize> hdr_buf_{};
  size_t hdr_got_ = 0;
  bool have_hdr_ = false;
  protocol::FrameHeader hdr_;
  size_t payload_got_ = 0;
  bool payload_checked_ = false;
  std::vector<uint8_t> control_payload_;
  bool goodbye_ = false;
};

}  // namespace geoccl::transport::tcp
