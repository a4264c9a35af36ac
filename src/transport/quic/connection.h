// QuicConnection: one QUIC connection of a QuicDevice (one peer pair), driven from the group's
// event loop. It does no I/O and reads no clock: packets and a timestamp go in (on_packet,
// on_expiry, write), packets and the next expiry come out (outbox(), expiry()); the device owns
// the UDP socket and the timers, and sends the outbox whenever the connection says it has
// filled it (QuicDevice::flush). Between ngtcp2 (the QUIC core) and the peer's frames it moves
// the bytes. Loop thread only.
//
// Streams:
//  - one bidirectional control stream, opened by the dialler (the higher rank) once the TLS
//    handshake is done: Hello (dialler) and Reply (acceptor) of protocol/handshake_machine.h, then
//    control frames (abort, goodbye, heartbeat: a 64-byte header and its payload), in order;
//    (data streams of an acceptor that come before its Reply mean it accepted us: it sends data
//    only on connections it accepted, and a lost packet may hold up the Reply);
//  - one stream per data frame, opened by its sender: the frame's header, its payload, FIN (the
//    receiver answers with an empty FIN, which closes the stream on both ends). A lost packet delays only the frame whose bytes it carried; frames after it
//    on other streams complete meanwhile (receives complete in any order; the receive window
//    matches frame k to the k-th posted receive).
//
// Delivery: the sender keeps each frame (a copy of its payload, so the user's buffer is reusable
// at once) until QUIC has acknowledged every byte of its stream; the frame is then "delivered"
// (the request's second completion) and forgotten. The receiver's QUIC stack acknowledges a
// packet only after handing its bytes to this connection, so an acknowledged frame is in the
// peer process's memory.
#pragma once

#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <gnutls/gnutls.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "protocol/handshake_machine.h"
#include "transport/quic/address.h"
#include "transport/quic/flow_window.h"
#include "transport/quic/udp.h"
#include "transport/transport.h"

namespace geoccl::transport::quic {

class QuicDevice;
struct QuicPeer;

// Length of the connection IDs geoccl chooses (the server reads a packet's destination ID by it).
inline constexpr size_t kCidLen = 8;

// A data frame to a peer, kept until QUIC acknowledges all of it.
struct OutFrame {
  uint64_t frame = 0;
  protocol::FrameHeaderBytes header{};
  std::shared_ptr<std::vector<uint8_t>> payload;  // the sender's copy
  RequestPtr delivery;                            // marked delivered when acknowledged
  size_t size() const { return header.size() + payload->size(); }
};

class QuicConnection {
 public:
  enum class State {
    kHandshake,   // TLS handshake (and, for the dialler, the Hello/Reply) in progress
    kAwaitHello,  // acceptor: handshake done, waiting for the dialler's Hello
    kEstablished, // Hello accepted: frames flow
    kClosed,      // closed or failed; the device drops it
  };

  // Packets to send, in order: a run of `count` datagrams of `segment` bytes each (the last may be
  // shorter), one UDP GSO send when the socket offers it.
  struct TxBatch {
    std::vector<uint8_t> bytes;
    size_t segment = 0;
    size_t count = 0;
  };

  // Timestamps are nanoseconds of steady_clock, as ngtcp2 takes them.
  // Dialler side: a connection to rank `peer` at `to` (its certificate must be the one it
  // published); `handshake_timeout` 0 = the device's.
  QuicConnection(QuicDevice& dev, QuicPeer* peer, const Endpoint& to, uint64_t now,
                 std::chrono::milliseconds handshake_timeout = std::chrono::milliseconds(0));
  // Acceptor side: from a client's first Initial packet (decoded header `hd`), before anything
  // says who sent it.
  QuicConnection(QuicDevice& dev, const Endpoint& from, const ngtcp2_pkt_hd& hd, uint64_t now);
  ~QuicConnection();
  QuicConnection(const QuicConnection&) = delete;
  QuicConnection& operator=(const QuicConnection&) = delete;

  State state() const { return state_; }
  QuicPeer* peer() const { return peer_; }
  const Endpoint& remote() const { return remote_; }
  // Why the connection closed, or why its handshake failed ("" while open).
  const std::string& close_reason() const { return close_reason_; }
  // The acceptor refused our Hello (its reason is close_reason()).
  bool rejected() const { return rejected_; }

  // A packet from the connection's peer.
  void on_packet(const Endpoint& from, std::span<const uint8_t> pkt, uint64_t now);
  // The time expiry() named has come (loss detection, acknowledgement delay, idle, handshake).
  void on_expiry(uint64_t now);
  // Fault injection: every packet from now on is dropped on arrival (QuicDevice::deafen_for_test).
  void deafen_for_test() { deaf_ = true; }
  // Writes what ngtcp2 has to send (stream data, acks, retransmissions) into the outbox as the
  // congestion controller and pacer allow.
  void write(uint64_t now);

  // ---- Out (for the device).
  // Packets written and not sent yet, oldest first; the device sends them, cuts what it sent of
  // a batch from its front, and hands a batch sent in full back (batch_sent: its buffer is kept
  // for the next).
  std::deque<TxBatch>& outbox() { return outbox_; }
  void batch_sent();
  // The socket is full: write nothing until it drains (the device says so).
  void set_socket_full(bool full) { socket_full_ = full; }
  bool socket_full() const { return socket_full_; }
  // The socket refused the packets: the connection fails.
  void send_failed();
  // When on_expiry() is due next (UINT64_MAX: never).
  uint64_t expiry() const;
  // The last write() used its whole send quantum: write again soon, after the loop's other work.
  bool wants_write() const { return wants_write_; }

  // Established connections: queues a data frame (its stream opens when ngtcp2 allows) and writes.
  void post_frame(std::shared_ptr<OutFrame> f, uint64_t now);
  // Queues a control frame on the control stream and writes.
  void post_control(protocol::FrameType type, std::span<const uint8_t> payload, uint64_t now);
  // Control bytes queued or in flight that the peer has not acknowledged.
  bool control_drained() const { return ctrl_acked_ == ctrl_written_; }
  // Closes with CONNECTION_CLOSE (no error: after a goodbye; else the application error and
  // `reason`) and stops.
  void close(const std::string& reason, bool error, uint64_t now);
  // Closes without telling the peer (a replaced connection: the peer drops its end itself).
  void drop(const std::string& reason);
  // Acceptor: whether a Hello waits for the dialler's published fingerprint.
  bool awaiting_fingerprint() const {
    return accepting_ && accepting_->state() == protocol::HandshakeState::kJudge;
  }
  // Acceptor: the addresses of the dialling ranks are known now: judges a waiting Hello.
  void recheck_hello(uint64_t now);

  // Flow control: widens the receive windows to `w` (sized from the path figures `rtt_ns`,
  // `rate_bps`) when it is at least the current windows and more in one of them; a credit once
  // given cannot be taken back, so smaller windows are ignored. Returns whether it widened.
  bool widen(const FlowWindows& w, uint64_t rtt_ns, uint64_t rate_bps, uint64_t now);
  // The windows in effect (the connection and stream windows grow by widen(); the auto-tuning
  // ceilings are the ones it was made with) and the path figures they were sized from.
  const FlowWindows& windows() const { return windows_; }
  uint64_t windows_rtt_ns() const { return windows_rtt_ns_; }
  uint64_t windows_rate_bps() const { return windows_rate_bps_; }

  // Statistics (loop thread).
  ngtcp2_conn_stat conn_stat() const;
  std::chrono::steady_clock::time_point last_received() const { return last_rx_; }
  // When the first packet of the peer arrived (the epoch while none has).
  std::chrono::steady_clock::time_point first_received() const { return first_rx_; }
  uint64_t bytes_in_flight() const;
  uint64_t streams_opened() const { return streams_opened_; }

  // ---- ngtcp2 callbacks (static trampolines in connection.cc).
  int on_stream_data(uint32_t flags, int64_t stream_id, uint64_t offset, const uint8_t* data, size_t len);
  int on_acked(int64_t stream_id, uint64_t offset, uint64_t len);
  int on_stream_close(int64_t stream_id);
  int on_handshake_completed();
  int on_new_cid(ngtcp2_cid* cid, uint8_t* token, size_t cidlen);
  int on_remove_cid(const ngtcp2_cid* cid);
  void on_streams_available() { streams_blocked_ = false; }
  void on_stream_credit(int64_t stream_id);
  ngtcp2_conn* conn() const { return conn_; }
  gnutls_session_t tls() const { return tls_; }
  // Acceptor: the Hello named this peer and was accepted.
  void set_peer(QuicPeer* p) { peer_ = p; }

  // 0-RTT (dialler): the connection resumes the peer's last TLS session and sends its Hello and
  // frames as early data before the handshake completes (early()); once it has, zero_rtt() says
  // the acceptor took them, zero_rtt_refused() that it did not (they went again after the full
  // handshake). Acceptor: zero_rtt() says it accepted early data.
  bool early() const { return early_; }
  bool zero_rtt() const { return zero_rtt_; }
  bool zero_rtt_refused() const { return zero_rtt_refused_; }
  // Whether data frame `frame` is queued or in flight on this connection.
  bool carries(uint64_t frame) const;
  // Dialler: a session ticket arrived; the peer keeps it (and our view of the acceptor's
  // transport parameters) for the next re-dial.
  void on_ticket();

 private:
  // Sending half of one data stream.
  struct OutStream {
    std::shared_ptr<OutFrame> f;
    int64_t id = -1;
    size_t sent = 0;   // bytes handed to ngtcp2
    size_t acked = 0;  // bytes acknowledged
    bool blocked = false;  // flow control: wait for extend_max_stream_data
  };
  // Receiving half of one data stream from the peer.
  struct InStream {
    std::array<uint8_t, protocol::kFrameHeaderSize> hdr{};
    size_t hdr_got = 0;
    protocol::FrameHeader h;
    size_t got = 0;  // payload bytes
    enum class Target { kUnknown, kPosted, kStaged, kDiscard } target = Target::kUnknown;
  };

  void init_common();
  // Dialler: opens the control stream and queues the Hello. False when ngtcp2 refuses.
  bool start_control();
  // Dialler, 0-RTT refused: every stream opened in early data is gone (ngtcp2 discarded them);
  // the control stream and frames start again from scratch.
  void restart_streams();
  // Acceptor: stream bytes held back (0-RTT before the handshake completes; frames before the
  // Hello is accepted) are taken now: control bytes, and data too once established.
  void release_held();
  int take_stream_data(uint32_t flags, int64_t stream_id, const uint8_t* data, size_t len);
  // The windows a new connection announces, from what `p`'s earlier connections measured.
  void size_from(const QuicPeer& p);
  // Fails this connection: before the group knows the peer (handshake, Hello), it only closes;
  // afterwards the group fails with `code`.
  void fail(ErrorCode code, const std::string& why);
  void on_control_bytes(std::span<const uint8_t> data);
  void on_hello();
  void on_control_frame(const protocol::FrameHeader& h, std::span<const uint8_t> payload);
  void write_control_bytes(std::span<const uint8_t> b);
  int on_data_bytes(int64_t stream_id, InStream& s, const uint8_t* data, size_t len, bool fin);
  // Appends one packet to the outbox: to the last batch while it continues a GSO run.
  void queue_packet(const uint8_t* pkt, size_t n);
  // Closes inside an event (now_ is its time).
  void close(const std::string& reason, bool error) { close(reason, error, now_); }
  // Picks the next stream with data to write (opening streams as ngtcp2 allows); null: none.
  OutStream* next_stream();

  QuicDevice& dev_;
  QuicPeer* peer_ = nullptr;
  const bool server_;
  State state_ = State::kHandshake;
  Endpoint remote_;
  ngtcp2_conn* conn_ = nullptr;
  gnutls_session_t tls_ = nullptr;
  ngtcp2_crypto_conn_ref conn_ref_{};
  ngtcp2_cid scid_{};
  ngtcp2_cid client_dcid_{};  // acceptor: the dialler's first DCID (routes its Initial retries)
  std::vector<std::string> cids_;
  std::string close_reason_;
  bool rejected_ = false;
  bool deaf_ = false;  // deafen_for_test()
  bool closing_sent_ = false;

  // Control stream.
  int64_t ctrl_id_ = -1;
  std::deque<std::vector<uint8_t>> ctrl_out_;  // chunks, oldest first; kept until acknowledged
  uint64_t ctrl_base_ = 0;     // stream offset of ctrl_out_.front()
  uint64_t ctrl_written_ = 0;  // bytes queued in all
  uint64_t ctrl_sent_ = 0;     // bytes handed to ngtcp2
  uint64_t ctrl_acked_ = 0;
  std::vector<uint8_t> ctrl_in_;
  bool handshake_done_ = false;  // Hello/Reply exchanged
  bool resuming_ = false;        // dialler: GnuTLS took the peer's ticket (make_session)
  bool early_ = false;           // dialler: 0-RTT sent, handshake not complete
  bool zero_rtt_ = false, zero_rtt_refused_ = false;
  // Acceptor: stream bytes not taken yet (release_held), in arrival order. Their flow-control
  // credit is given when they are taken, so the windows bound them.
  struct Held {
    int64_t id;
    uint32_t flags;
    std::vector<uint8_t> bytes;
  };
  std::deque<Held> held_;
  // The handshake on the control stream (protocol/handshake_machine.h): one of them.
  std::unique_ptr<protocol::HandshakeAcceptor> accepting_;
  std::unique_ptr<protocol::HandshakeDialler> dialling_;

  // Data streams.
  std::deque<std::unique_ptr<OutStream>> out_queue_;       // not yet fully handed to ngtcp2
  std::map<int64_t, std::unique_ptr<OutStream>> out_open_; // handed over, awaiting acks
  std::map<int64_t, OutStream*> opened_;  // every opened stream not yet acknowledged in full
  bool streams_blocked_ = false;
  uint64_t streams_opened_ = 0;
  std::map<int64_t, InStream> in_;
  std::deque<int64_t> fin_out_;  // data streams of the peer whose frame is in: our empty FIN

  // Transmission: a batch of packets for one sendmsg() (GSO), and what a full socket left.
  std::vector<uint8_t> pkt_;  // the packet being written
  std::deque<TxBatch> outbox_;
  std::vector<std::vector<uint8_t>> spare_batches_;
  bool gso_ = false;          // the device's socket sends GSO runs
  bool socket_full_ = false;
  bool wants_write_ = false;
  uint64_t now_ = 0;          // the time of the event being handled
  // Inside ngtcp2_conn_read_pkt (its callbacks run then): ngtcp2 may not be called again, so a
  // close decided there is carried out once it returns (close_reason_, pending_error_; and a
  // failure of the group when pending_lost_).
  bool in_read_ = false;
  bool close_pending_ = false;
  bool pending_error_ = false, pending_lost_ = false, flush_before_close_ = false;
  ErrorCode pending_code_ = ErrorCode::kOk;
  void defer_close(const std::string& reason, bool error);
  std::chrono::steady_clock::time_point last_rx_{};
  std::chrono::steady_clock::time_point first_rx_{};
  // Flow control: the windows in effect, the stream window the transport parameters announced
  // (a new frame stream is widened from it), and the figures they were sized from.
  FlowWindows windows_{};
  uint64_t announced_stream_ = 0;
  uint64_t windows_rtt_ns_ = 0, windows_rate_bps_ = 0;
};

}  // namespace geoccl::transport::quic
