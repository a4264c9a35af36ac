// TcpConnection: one socket of a TcpDevice's mesh and its frame queues. Loop thread only.
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "security/auth.h"
#include "security/crypto_lane.h"
#include "security/sealed_stream.h"
#include "transport/tcp/stall.h"
#include "transport/transport.h"

namespace geoccl::transport::tcp {

class TcpDevice;
struct TcpPeer;

class TcpConnection {
 public:
  struct SendOp {
    protocol::FrameHeaderBytes header;
    std::span<const uint8_t> payload;
    std::shared_ptr<std::vector<uint8_t>> owned;  // payload storage for control frames
    RequestPtr req;       // completed when written: null for control frames and re-sent copies
    RequestPtr delivery;  // marked delivered when the peer acknowledges the frame (data frames)
    bool data = false;  // a data frame (numbered `frame`), as opposed to a control frame
    uint64_t frame = 0;
    size_t sent = 0;    // bytes of header+payload written
    // With MSG_ZEROCOPY the kernel reads the header after sendmsg() returns: it is sent from this
    // heap copy, kept alive until the kernel's completion.
    std::shared_ptr<protocol::FrameHeaderBytes> stable_header;
    // A sealing connection: header tag and sealed records of `payload` (security/sealer.h),
    // made when the frame's first byte is written on a socket. A data frame's are the same bytes
    // on every connection of the pair (kept across a break); a re-sent copy is sealed again, to
    // the same bytes.
    std::shared_ptr<uint8_t[]> wire;  // security::sealed_payload_size(payload.size()) bytes
    // A large data frame sealed by the workers: how much of `wire` is ready (null: all of it).
    std::shared_ptr<security::CryptoLane::Sealing> sealing;
    const uint8_t* header_data() const { return stable_header ? stable_header->data() : header.data(); }
  };
  // A posted receive; lives in the peer's session window (any data stream may fill it).
  struct RecvOp {
    protocol::FrameHeader expect;
    std::span<uint8_t> dst;  // at most this many bytes
    RequestPtr req;
  };

  // Takes ownership of `fd` (non-blocking) and registers it with the loop. `keys` from the
  // connection's authentication (cipher 0: plaintext, no group secret).
  // `via`: the rank whose relay carries the socket (-1: direct).
  TcpConnection(TcpPeer& peer, int fd, int stream, const security::ConnectionKeys& keys, int via);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  void post_send(SendOp op);
  // Writes what is queued: the device stopped holding this stream (TcpPeer::holding).
  void resume_writing();
  // A receive for data frame `frame` of this peer was posted: resume reading if this stream
  // stalled on exactly that frame.
  void on_recv_posted(uint64_t frame);
  // Queues a control frame (abort / goodbye) with its own copy of the payload.
  void post_control(protocol::FrameType type, std::vector<uint8_t> payload);
  // Completes every queued request with `f` (the control frames stay queued).
  void fail_requests(const Failure& f);
  // The group failed: no worker reads a payload or writes a destination of this connection's
  // frames any more (frames being opened are forgotten), so their requests may fail.
  void stop_crypto();
  // Reports a data frame waiting for its receive to the group's early-frame check.
  void check_early_frame();
  bool send_queue_empty() const { return sendq_.empty(); }
  // The lowest-numbered data frame not yet fully written (~0 when none waits).
  uint64_t oldest_queued_frame() const;
  bool open() const { return fd_ >= 0; }
  // Open, or broken and being re-established (frames posted meanwhile wait for the new socket).
  bool usable() const { return fd_ >= 0 || reconnecting_; }
  // The peer said goodbye on this connection (it is shutting down).
  bool said_goodbye() const { return goodbye_; }
  // The rank whose relay carries the current socket (-1: direct), given with each socket.
  int via() const { return via_; }
  // The port of this end of the socket (0 when closed).
  uint16_t local_port() const;

  // Stream recovery (data streams, TcpOptions::resume). Takes `fd`, a new socket for this stream (the old one broke or the peer replaced it), and
  // re-sends every frame the peer has not acknowledged, in frame order, before newer ones.
  void resume(int fd, const security::ConnectionKeys& keys, int via);
  // Fault injection for tests: resets the socket (RST, as a middlebox would) and handles the
  // break as if the kernel had reported it. `silent`: the peer is told nothing (its socket stays
  // open, as when a NAT forgets the flow); the abandoned socket is returned, for the caller to
  // close later (-1 if none).
  int reset_for_test(bool silent);
  // The dialler replaces a stalled connection (TcpOptions::stall_timeout): the old socket is
  // reset and the stream re-established as if it had broken.
  void replace(const std::string& why);
  // TCP's view of the socket for the stall detector (stall.h) at `now`, one TCP_INFO read; `open`
  // false when closed or unreadable. Notes when the stream has nothing in flight (the start of
  // any later wait for an acknowledgement).
  StallSample stall_sample(std::chrono::steady_clock::time_point now);
  // Whether the peer's host acknowledged everything or something within `ms`. False when closed.
  bool acked_within(std::chrono::milliseconds ms) const;
  // Smoothed RTT of the socket (0 when closed or unknown).
  std::chrono::microseconds srtt() const;
  // Bytes the peer's host acknowledged on this stream since the last call (TCP_INFO
  // tcpi_bytes_acked): what the path delivered, where bytes written count the kernel's buffer
  // too. A resumed stream counts from its new socket. 0 when closed.
  uint64_t take_acked();
  // The lower rank of a broken stream waits for the peer to connect it again: the group fails
  // with peer-unreachable if that takes longer than `timeout`.
  void await_resume(std::chrono::milliseconds timeout);
  // Queues an acknowledgement: every data frame below `upto` from the peer is in.
  void post_ack(uint64_t upto);
  // Bytes of queued frames not yet handed to the kernel, plus the kernel's not-yet-sent bytes
  // (SIOCOUTQNSD): how far behind this stream is. The sender picks the stream with the least.
  uint64_t backlog() const;
  // TCP_INFO of the socket plus this stream's counters (loop thread).
  StreamStats info() const;
  // The kernel's view of the path, for the bulk class's delay controller: smoothed and minimum
  // RTT, and whether data is in flight (an RTT sample is fresh only then). Zero when closed.
  struct PathSample {
    std::chrono::microseconds srtt{0}, min_rtt{0};
    bool in_flight = false;
    // The kernel's latest delivery-rate sample (bit/s), when the flow was not limited by what
    // the application gave it (else 0).
    uint64_t delivery_bps = 0;
    uint32_t delivered = 0;  // segments delivered so far: a sample is new when this moved
  };
  PathSample path_sample() const;
  // The peer turned out to be in another domain: WAN socket options (TcpPeer::tune_wan_socket).
  void tune_for_wan();
  // The most bytes/s the kernel may send on this socket (SO_MAX_PACING_RATE; the bulk class's
  // scavenger). Kept for a socket that replaces this one after a break.
  void set_pacing_rate(uint64_t bytes_per_second);
  uint64_t pacing_rate() const { return pacing_rate_; }

 private:
  void on_events(uint32_t events);
  void read_some();
  // One recv() into dst: the bytes read (counted), or 0 when nothing came (EAGAIN) or the
  // stream ended (on_closed has run; the caller returns).
  ssize_t receive(uint8_t* dst, size_t n);
  // The same into several places, in order (one recvmsg()).
  ssize_t receive(iovec* iov, int n_iov);
  void write_some();
  void update_interest();
  // Sealing on the workers: starts the large data frames near the head of the queue.
  void seal_ahead();
  // Wire bytes of `op` (header excluded) that may be written now.
  size_t wire_ready(const SendOp& op) const;
  // The workers made progress: write what is sealed, complete the frames that opened.
  void on_crypto();
  // Completes the data frames whose records all opened on the workers.
  void finish_opened();
  // Reads the current record of a frame opened on the workers: ciphertext in place, tag beside
  // it; hands the record over when it is in. False when the caller returns (nothing to read, or
  // the stream ended).
  bool read_record(std::span<uint8_t> dst);
  // The connection ended: a data stream of a live peer is re-established (resume); otherwise a
  // failure unless the peer said goodbye and nothing is pending.
  void on_closed(const std::string& why);
  // Closes the broken socket, forgets the partial frame being read, and queues every frame the
  // peer has not acknowledged (copies kept after writing, then frames not yet fully written) for
  // the next socket of this stream.
  // `recover`: start recovering it (TcpPeer::stream_broken); not when a new socket is at hand.
  void enter_reconnecting(const std::string& why, bool recover = true);
  void configure_socket();
  void set_keys(const security::ConnectionKeys& keys);
  // Bytes of the frame on the wire (header, payload; sealed: header tag and record tags too).
  size_t wire_size(const SendOp& op) const;
  std::span<const uint8_t> wire_payload(const SendOp& op) const {
    return op.wire ? std::span<const uint8_t>(op.wire.get(), security::sealed_payload_size(op.payload.size()))
                   : op.payload;
  }
  // Bytes of a frame header on the wire (sealed: with its tag).
  size_t header_wire_size() const { return sealed_ ? security::SealedStream::kHeaderWireBytes : protocol::kFrameHeaderSize; }
  // A sealed frame failed to open: the group fails with kProtocol naming the peer.
  void auth_failed(const char* what);
  void close_fd();
  bool handle_header();
  // Data frame header in hdr_ whose receive is not posted yet (the stream waits for it).
  bool waiting_for_recv() const;
  void complete_sent(size_t n);
  void read_errqueue();

  TcpPeer& peer_;  // the pair: what the stream needs of it (TcpPeer's methods)
  int fd_;
  const int stream_;
  int via_;
  uint32_t interest_ = 0;

  std::deque<SendOp> sendq_;
  bool reconnecting_ = false;
  uint64_t reconnects_ = 0, frames_resent_ = 0;
  uint64_t resume_timer_ = 0;  // acceptor side: fails the group if the peer does not come back
  // A data frame that arrived in full before (re-sent after a break): its payload is read and
  // dropped.
  bool discard_ = false;
  std::vector<uint8_t> discard_buf_;
  uint64_t queued_ = 0;  // header+payload bytes in sendq_ not yet written
  uint64_t acked_seen_ = 0;  // tcpi_bytes_acked at the last take_acked()
  uint64_t frames_sent_ = 0, frames_received_ = 0, bytes_sent_ = 0;
  // MSG_ZEROCOPY: frames fully written but whose pages the kernel may still read, with the
  // number of the last zero-copy sendmsg() that carried their bytes. They complete when the
  // error queue reports that call done.
  struct ZcWait {
    uint32_t call;
    RequestPtr req;                                        // null for control frames
    std::shared_ptr<protocol::FrameHeaderBytes> header;    // storage the kernel may still read
    std::shared_ptr<std::vector<uint8_t>> owned;
  };
  bool zerocopy_ = false;
  uint32_t zc_calls_ = 0;  // zero-copy sendmsg() calls made (the kernel numbers them 0, 1, ...)
  uint32_t zc_done_ = 0;   // calls [0, zc_done_) reported complete
  std::deque<ZcWait> zc_wait_;
  uint64_t zc_copied_ = 0;  // completions the kernel reported as copied (zero copy not used)

  std::array<uint8_t, protocol::kFrameHeaderSize + security::kTagBytes> hdr_buf_{};
  // Sealing (a group secret): per direction, this connection's key (control frames) and the
  // pair's key for the session (data frames); the record of a sealed payload being read
  // (verified here before any byte is copied to its destination).
  std::unique_ptr<security::SealedStream> sealed_;  // with a group secret
  // Large data frames sealed and opened on the device's workers (null: all on this thread). The
  // frame being read through it, and the bytes of its current record read (ciphertext and tag).
  std::unique_ptr<security::CryptoLane> lane_;
  std::shared_ptr<security::CryptoLane::Opening> opening_;
  size_t record_got_ = 0;
  bool seal_blocked_ = false;  // write_some stopped at bytes not sealed yet
  // What the workers' wake-ups reach: reset when the connection goes.
  std::shared_ptr<TcpConnection*> alive_ = std::make_shared<TcpConnection*>(this);
  size_t hdr_got_ = 0;
  bool have_hdr_ = false;
  protocol::FrameHeader hdr_;
  size_t payload_got_ = 0;
  bool payload_checked_ = false;
  std::vector<uint8_t> control_payload_;
  bool goodbye_ = false;
  uint64_t pacing_rate_ = 0;  // 0: none set
  // When stall_sample last saw nothing in flight (or the socket was adopted): data in flight now
  // was sent after it.
  std::chrono::steady_clock::time_point idle_seen_ = std::chrono::steady_clock::now();
};

}  // namespace geoccl::transport::tcp
