// Connection: one peer pair of the shared-memory device, seen from one end. Loop thread only.
//
// The pair shares one segment (created by the dialler, segment.h) holding a ring per direction
// (ring.h), and each end has an eventfd its peer signals when it asked to be woken (data in its
// inbound ring, room or progress in its outbound one). The pair's unix socket stays open as its
// control channel: abort and goodbye frames go there (one SEQPACKET packet each), and its end
// without a goodbye means the peer process died (even by SIGKILL: the kernel closes its socket).
//
// Data frames are records in the ring: the encoded frame header, then the payload, the next
// record starting at the next multiple of 8. The sender copies each frame from the caller's
// memory into the ring on the loop thread (streaming a frame larger than the ring in pieces);
// the request is `done` once the payload is in the ring and `delivered` once the reader's position
// has passed the frame (for the pair's PeerSession, the reader's position is its acknowledgement).
// The receiver matches frame k to its k-th posted receive (the session's window),
// copies or reduces the payload straight out of the ring into the destination, and stops at a
// frame whose receive is not posted yet (it waits in the ring; Group::early_frame checks it).
// A forwarded receive (Forward) goes from this ring straight into another connection's: a ring
// step's receive, reduce and send in one pass, with no write to the destination and re-read.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "geoccl/types.h"
#include "protocol/frame.h"
#include "transport/group.h"
#include "protocol/shm_hello.h"
#include "transport/shm/ring.h"
#include "transport/shm/segment.h"
#include "protocol/peer_session.h"
#include "transport/transport.h"

namespace geoccl::transport::shm {

using protocol::shm::Token;

// A file descriptor closed when it goes out of scope.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// One packet on a unix socket with descriptors attached (SCM_RIGHTS): the packet's size, or -1
// with errno. `flags` as sendmsg's / recvmsg's; a receive adds every descriptor that came to *fds
// (MSG_CMSG_CLOEXEC) and its msg_flags to *msg_flags.
ssize_t send_with_fds(int sock, std::span<const uint8_t> bytes, std::span<const int> fds, int flags);
ssize_t recv_with_fds(int sock, std::span<uint8_t> buf, std::vector<UniqueFd>* fds, int* msg_flags,
                      int flags);

// Segment layout: a header page, then the ring the dialler writes, then the one it reads.
//   header: u64 magic "GEOSHMSG" | u32 version | u32 reserved | u64 ring capacity | 16-byte token
//   at 128 and 256: the RingControl of the dialler's and of the acceptor's ring
size_t segment_bytes(size_t ring_capacity);
// Dialler: writes the header into a fresh (zero-filled) segment.
void init_segment(const Segment& seg, size_t ring_capacity, const Token& token);
// Acceptor: "" when the mapped segment carries `token` and the expected layout, else the reason.
std::string check_segment(const Segment& seg, size_t ring_capacity, const Token& token);

// Counters of one peer, read by stats() from any thread.
struct Counters {
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0};
  std::atomic<uint64_t> bytes_forwarded{0};  // of bytes_sent: straight from another pair's ring
};

class Connection;

// A receive sent on as it arrives (ShmDevice::recv_forward): the frame read from the feeding
// connection's ring is written straight into the sending connection's ring, reduced with its
// operand (Transport::Forwarding) or as itself with a copy left in dst. The sending connection writes the frame's header
// when the frame's turn comes. While it has not, or its ring is full, the feeder waits for it only
// as long as its own ring is less than half full; past that it reduces (or copies) what arrives
// into dst, and the sender writes those bytes from dst when it can, as a plain send would; once
// the sender has caught up, the feeder writes straight into its ring again. A ring that leaves
// its writer (a feeder) no room is more than half full, so its reader spills instead of waiting:
// no cycle of rings can wait on each other. Shared by the two connections; loop thread only.
struct Forward {
  std::span<uint8_t> dst;
  Transport::Forwarding how;
  size_t elem = 1;  // the unit moved at once: an element when reducing, else a byte
  std::weak_ptr<Connection> from, to;
  bool header_out = false;    // the sender wrote the header
  bool feeder_waits = false;  // the feeder waits for the sender: kick it once it is ready
  size_t ready = 0;           // payload bytes through the feeder: in the sender's ring or in dst
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  struct RecvOp {
    protocol::FrameHeader expect;
    std::span<uint8_t> dst;
    RequestPtr req;
    bool reduce = false;  // recv_reduce: dst = dst op payload, payload exactly dst.size() (a
                          // forwarded receive: fwd->how says what it does)
    DataType dtype = DataType::kUInt8;
    ReduceOp op = ReduceOp::kSum;
    std::shared_ptr<Forward> fwd;  // set: the payload goes on to fwd->to (exactly dst.size())
  };

  // `dialler`: this end created the segment (it writes the first ring). Takes the descriptors.
  Connection(Group& group, int peer, bool dialler, UniqueFd sock, UniqueFd wake_self,
             UniqueFd wake_peer, Segment seg, size_t ring_capacity, Counters& counters);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers the descriptors with the loop and handles whatever the peer sent already.
  void start();
  int peer() const { return peer_; }

  // Queues data frame `h` (type, payload_len and frame number are set here) with `payload`.
  void post_send(protocol::FrameHeader h, std::span<const uint8_t> payload, RequestPtr req);
  // Queues data frame `h` whose payload (fwd->dst.size() bytes) the feeding connection writes.
  void post_forward(protocol::FrameHeader h, std::shared_ptr<Forward> fwd, RequestPtr req);
  void post_recv(RecvOp op);
  // Calls Group::early_frame for the frame waiting for its receive, if any.
  void recheck_early_frame();
  // Completes every pending request with `f`; the data path stops (the group has failed or the
  // device shuts down).
  void fail_requests(const Failure& f);
  // Queues a control frame (abort / goodbye) on the socket.
  void post_control(protocol::FrameType type, std::span<const uint8_t> payload = {});
  // Data frames not yet fully in the ring, or control frames not yet on the socket.
  bool sends_queued() const { return !sendq_.empty() || !ctlq_.empty(); }
  // The device is closing: the peer's end of the socket no longer means anything.
  void set_closing() { closing_ = true; }

 private:
  struct SendOp {
    protocol::FrameHeaderBytes header;
    std::span<const uint8_t> payload;
    RequestPtr req;
    uint64_t frame = 0;
    bool aligned = false;  // the record's start is aligned
    size_t written = 0;    // bytes of header + payload in the ring
    std::shared_ptr<Forward> fwd;  // set: the payload comes from fwd->from (payload: its length)
  };
  struct Inflight {
    uint64_t end;  // ring position after the frame
    uint64_t frame;
  };

  void on_socket(uint32_t events);
  void on_wake();
  // Moves data both ways until nothing moves or the pass's budget is spent (then it goes on in a
  // posted continuation, so that other peers get their turn), then asks the peer to wake us.
  void progress();
  bool write_some(size_t* budget);
  bool read_some(size_t* budget);
  // Moves the payload of the forwarded frame at the reader (hdr_, receive r) on: into the
  // sending connection's ring where it is ready, else into dst. True once all of it is through.
  bool feed(RecvOp& r, size_t* budget, bool* progressed);
  // The frame at the head of sendq_ is all in the ring: completes it (written, in flight).
  void finish_front_send();
  // Runs progress() from the loop soon (another connection moved what this one waits for).
  void kick();
  void settle_delivered();
  // Sets the waiting flags this end needs; true when the peer moved meanwhile (no sleep).
  bool arm_waits();
  // Whether the peer's positions (reloaded) let this end go on.
  bool peer_moved();
  bool reader_waits_for_peer() const;
  bool check_frame(const RecvOp& r);
  void read_control();
  void flush_control();
  void on_closed(const std::string& why);
  void close_socket();
  void wake_peer();
  void fail_protocol(const std::string& what);
  bool stopped() const { return stopped_ || group_.failed(); }

  Group& group_;
  runtime::EventLoop& loop_;
  const int peer_;
  UniqueFd sock_, wake_self_, wake_peer_;
  Segment seg_;
  RingWriter out_;
  RingReader in_;
  Counters& counters_;
  uint32_t sock_interest_ = 0;
  bool closing_ = false, stopped_ = false, continuation_posted_ = false;
  bool goodbye_ = false;     // the peer said goodbye
  bool peer_left_ = false;   // ... and closed its socket: what it wrote is still in the ring

  // Numbering, receive window and delivery of the pair (no copies: the ring holds the bytes).
  protocol::PeerSession<RecvOp, RequestPtr> session_;

  // Sender.
  std::deque<SendOp> sendq_;
  std::deque<Inflight> inflight_;  // in the ring, not yet passed by the reader
  std::deque<std::vector<uint8_t>> ctlq_;
  std::vector<uint8_t> control_buf_;  // one inbound control packet

  // Receiver.
  bool have_hdr_ = false;       // hdr_ is the frame at the reader's position
  bool early_reported_ = false;
  protocol::FrameHeader hdr_;
  size_t got_ = 0;              // payload bytes of hdr_ consumed
  bool checked_ = false;        // hdr_ checked against its receive
  size_t need_ = 1;             // bytes the reader waits for before it can go on
};

}  // namespace geoccl::transport::shm
