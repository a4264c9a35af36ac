// QuicDevice: the QUIC transport (RFC 9000, ngtcp2 0.12 with GnuTLS for TLS 1.3), for peers in
// other domains (GEOCCL_TRANSPORT remote=quic, or auto where the decider measures it faster).
//
// One UDP socket per device carries every peer's connection; packets are routed by the
// connection IDs this side chose. For each pair the higher rank dials the lower one: the TLS
// handshake authenticates both ends against the certificate fingerprints they published in the
// store (tls.h), then the dialler's Hello and the acceptor's Reply (protocol/handshake.h, the same
// checks as TCP: session, group parameters, version, rank) open the pair. Strangers, other
// sessions and wrong certificates are refused with a reason while the group goes on.
//
// Frames: one QUIC stream per data frame (connection.h), so a lost packet holds up only its own
// frame. Per-peer state that outlives a connection (frame numbering, the receive window, frames
// staged before their receive, frames not yet acknowledged) is QuicPeer's.
//
// Flow control: the windows are sized from the path's bandwidth-delay product (flow_window.h):
// a path not measured yet starts at QuicOptions::window_bytes; every 250 ms each connection's
// lowest RTT and highest rate are taken, its windows widened to twice the BDP, and a re-dialled
// connection starts there; ngtcp2 auto-tunes up to four times it, within fixed bounds.
// Congestion control: bbr2 by default (GEOCCL_EXPERIMENT quic_cc: cubic, bbr, reno).
//
// Small frames (at most QuicOptions::duplicate_bytes) go out on two streams; the receiver keeps
// the first copy that arrives in full and discards the other (the frame number says which is
// which), so one random loss does not cost a small operation a retransmission timeout.
//
// Liveness: heartbeats ride the control stream; an ICMP port-unreachable from a peer's address
// (its process is gone) fails the group with peer-lost at once; a path that stays silent past the
// idle timeout (GEOCCL_TCP_RESUME_TIMEOUT_MS) fails it with peer-unreachable.
//
// Re-dialling: QUIC retransmits through an outage by itself, but its timer doubles each time, so
// after a long cut the next probe may come as long again after the link is back. A connection
// with data in flight, or whose peer owes a posted receive a frame, that has heard nothing for
// QuicOptions::redial_after is therefore dialled again
// by the higher rank, beside the old one, and again every such interval until one answers. The
// acceptor takes a replacing connection from the same authenticated peer (its certificate is the
// published one) in place of the old. Both ends then drop the old connection silently and re-send
// on the new one every frame not yet acknowledged; the receiver's frame numbers discard the
// copies of frames it has (exactly once), and frames it had in part arrive again from the start.
//
// 0-RTT: the dialler keeps the session ticket of each connection (and the acceptor's transport
// parameters); a re-dial resumes it and sends its Hello and every unacknowledged frame as early
// data. The acceptor holds 0-RTT bytes until the handshake completes and the Hello is judged as
// after a full handshake (tls.h says what binds a resumed session to the pinned certificate);
// frame numbers keep delivery exactly once. An acceptor that refuses the early data makes the
// dialler send it all again after the full handshake (zero_rtt=false refuses, and does not
// try). LinkStats::Quic counts both.
//
// Threads: as device.h. Every socket operation and every ngtcp2 call is on the loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/peer_session.h"
#include "transport/device.h"
#include "transport/quic/address.h"
#include "transport/quic/connection.h"
#include "transport/quic/flow_window.h"
#include "transport/quic/tls.h"
#include "transport/quic/udp.h"

namespace geoccl::transport::quic {

struct QuicOptions {
  std::string congestion_control = "bbr2";  // GEOCCL_EXPERIMENT quic_cc
  uint64_t window_bytes = 32u << 20;         // GEOCCL_EXPERIMENT quic_window
  uint64_t socket_buffer_bytes = 32u << 20;  // SO_SNDBUF / SO_RCVBUF of the UDP socket
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds handshake_timeout{10000};
  uint64_t duplicate_bytes = 16u << 10;          // GEOCCL_EXPERIMENT quic_duplicate
  std::chrono::milliseconds redial_after{2000};  // GEOCCL_EXPERIMENT quic_redial_ms (0 = never)
  bool zero_rtt = true;                           // GEOCCL_EXPERIMENT quic_0rtt
  // The bounds of the flow-control windows (flow_window.h): window_bytes for an unmeasured path.
  WindowLimits window_limits() const {
    WindowLimits l;
    l.unmeasured = window_bytes;
    return l;
  }
};

// A posted receive (the peer's receive window holds them).
struct QuicRecvOp {
  protocol::FrameHeader expect;
  std::span<uint8_t> dst;
  RequestPtr req;
};

// A data frame that arrived (or is arriving) before its receive was posted.
struct StagedFrame {
  protocol::FrameHeader h;
  std::vector<uint8_t> payload;
  size_t got = 0;
  bool complete() const { return got == payload.size(); }
};

// One peer of a QuicDevice and its protocol state. Loop thread, except the counters.
struct QuicPeer {
  // The session keeps every frame sent and not yet acknowledged (its OutFrame, whose payload
  // copy is the kept copy) for a replacement connection to send again.
  using Session = protocol::PeerSession<QuicRecvOp, std::shared_ptr<OutFrame>>;
  QuicPeer() { session.set_keep_copies(true); }
  int rank = -1;
  bool known = false;  // its address was read from the store
  Address address;
  Endpoint endpoint;
  Session session;  // numbering, the frames not acknowledged yet, the receive window
  std::map<uint64_t, StagedFrame> staged;
  QuicConnection* conn = nullptr;  // the established connection (owned by the device)
  QuicConnection* redial = nullptr;  // dialler: a replacement of `conn` being dialled
  std::chrono::steady_clock::time_point last_redial{};
  int redials = 0;                 // attempts since `conn` was last heard from
  bool goodbye = false;            // it said goodbye: its connection's end is no failure
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0}, frames_sent{0}, frames_received{0};
  std::atomic<uint64_t> frames_duplicated{0}, reconnects{0}, frames_resent{0};
  // The path as its connections measured it (flow_window.h; 0 = not yet), kept across re-dials:
  // the connection's lowest RTT and the highest rate seen (the delivery rate ngtcp2 measures for
  // what we send, or what arrived per interval).
  uint64_t path_rtt_ns = 0, path_rate_bps = 0;
  // Dialler: the last session ticket the peer gave us (empty: none yet) and its transport
  // parameters, for a 0-RTT re-dial (tls.h).
  std::vector<uint8_t> ticket;
  ngtcp2_transport_params ticket_params{};
  std::atomic<uint64_t> zero_rtt{0}, zero_rtt_refused{0};
  // Dialler, after a replacement: the frames up to `recover_upto` (those re-sent) are not all
  // acknowledged yet; the time from its first answer until they are is the reconnect time.
  bool recovering = false;
  uint64_t recover_upto = 0;
  std::chrono::steady_clock::time_point recover_since{};
  std::atomic<uint64_t> reconnect_us{0};
  uint64_t rate_mark_bytes = 0;
  std::chrono::steady_clock::time_point rate_mark_at{};
};

class QuicDevice final : public Device {
 public:
  // Binds a UDP socket on bind_addr (any port) and makes this rank's key and certificate.
  // Throws Error(kIo).
  QuicDevice(Group& group, const std::string& bind_addr, const QuicOptions& options);
  ~QuicDevice() override;

  const char* name() const override { return "quic"; }
  std::vector<uint8_t> address() const override;
  bool reaches(std::span<const uint8_t> peer_address) const override;
  void connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
               Clock::time_point deadline) override;
  RequestPtr send(int peer, const protocol::FrameHeader& h, std::span<const uint8_t> payload) override;
  RequestPtr recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) override;
  void recheck_early_frames() override;
  void send_heartbeat(int peer, std::span<const uint8_t> payload) override;
  bool host_answers(int peer, std::chrono::milliseconds recent) const override;
  void stats(LinkStats* ps) const override;
  void shutdown() override;

  uint64_t rejected_connections() const { return rejected_.load(); }
  // Dials a replacement of the connection to lower rank `peer` now, as a silence past
  // redial_after would (tests; any thread).
  void redial_now(int peer);
  // Fault injection (tests; any thread): the established connection to `peer` hears nothing
  // from now on (its packets are dropped on arrival, as on a path that loses everything coming
  // in), so nothing this side sent on it is acknowledged and nothing the peer sent on it
  // arrives; a connection dialled or accepted later hears normally.
  void deafen_for_test(int peer);
  // Whether the connection to `peer` is established (any thread).
  bool connected_to(int peer) const override;

  // ---- For QuicConnection (loop thread).
  Group& group() const { return group_; }
  const QuicOptions& options() const { return options_; }
  const Credentials& credentials() const { return cred_; }
  TicketIssuer& tickets() { return tickets_; }
  // The socket's address (a connection's path) and whether it sends GSO runs (how a connection
  // batches its packets); the socket itself is the device's.
  const Endpoint& local() const { return sock_.local(); }
  bool gso() const { return sock_.gso(); }
  QuicPeer& peer(int rank) { return *peers_[static_cast<size_t>(rank)]; }
  // The known peer whose published endpoint is `ep`, or null.
  QuicPeer* peer_at(const Endpoint& ep);
  bool closing() const { return closing_.load(); }
  void route(const std::string& cid, QuicConnection* c);
  void unroute(const std::string& cid);
  // The connection wrote packets (or changed its expiry): sends its outbox on the socket and
  // arms its timers (the expiry; a write soon when it used its whole send quantum).
  void flush(QuicConnection& c);
  // The acceptor's part of a Hello arriving on `c` that passed the group's checks: the dialler's
  // certificate must be the one it published (then `c` is that peer's, and the Hello accepted).
  // *wait: the dialler's published address is not known yet (recheck_hello() later). Counts a
  // refused Hello, the group's refusals included.
  void judge_hello(protocol::HandshakeAcceptor& hs, QuicConnection& c, bool* wait);
  void established(QuicConnection& c);
  // Data frames of a peer, from its connection.
  void frame_header(QuicPeer& p, const protocol::FrameHeader& h, int* target);
  void frame_bytes(QuicPeer& p, const protocol::FrameHeader& h, int target, size_t at,
                   std::span<const uint8_t> bytes);
  void frame_complete(QuicPeer& p, const protocol::FrameHeader& h, int target);
  // QUIC acknowledged every byte of data frame `frame` to the peer.
  void frame_delivered(QuicPeer& p, uint64_t frame);
  // The connection to a known peer ended (`why`): a failure of the group unless it said goodbye.
  void connection_lost(QuicPeer& p, ErrorCode code, const std::string& why);
  // A connection is finished: the device drops it after the current event.
  void retire(QuicConnection* c);

 private:
  void on_readable(uint32_t events);
  // The socket is full: writable() runs when it drains.
  void want_writable();
  void writable();
  // Sends `c`'s outbox until the socket is full; false when it is (or the send failed).
  bool transmit(QuicConnection& c);
  void arm(QuicConnection& c);
  void disarm(QuicConnection* c);
  void on_group_failure(const Failure& f, bool tell_peers);
  // Every 250 ms: measures each peer's path and widens its connection's windows to it
  // (measure()); dials a replacement of each silent connection this rank dialled (re-dialling).
  void watch();
  void measure(QuicPeer& p, Clock::time_point now);
  // Dials a replacement of p's connection beside it; with a ticket its frames go as 0-RTT.
  void dial_again(QuicPeer& p);
  // Dialler: ends the reconnect time once every frame re-sent is acknowledged.
  void check_recovered(QuicPeer& p);
  // Hands a frame to a connection: twice when it is small (duplicate_bytes).
  void post(QuicPeer& p, QuicConnection& c, const std::shared_ptr<OutFrame>& f);
  void drop_retired();
  void deliver_staged(QuicPeer& p, uint64_t frame);
  QuicConnection* find(std::span<const uint8_t> pkt);

  Group& group_;
  const QuicOptions options_;
  Credentials cred_;
  TicketIssuer tickets_;
  UdpSocket sock_;
  std::string endpoint_;
  std::vector<std::unique_ptr<QuicPeer>> peers_;
  std::vector<std::unique_ptr<QuicConnection>> conns_;  // loop thread: every connection
  std::vector<QuicConnection*> retired_;
  // Each connection's timers: its expiry (and the time it is armed for), a write soon.
  struct Timers {
    runtime::EventLoop::TimerId expiry = 0, kick = 0;
    uint64_t at = 0;
  };
  std::map<QuicConnection*, Timers> timers_;
  std::map<std::string, QuicConnection*> routes_;  // connection ID -> connection
  bool want_out_ = false;
  bool dialing_ = false;  // connect() is reading its dialled connections' fate
  Group::ListenerId failure_listener_ = 0;
  runtime::EventLoop::TimerId watch_timer_ = 0;
  std::atomic<uint64_t> rejected_{0};
  std::atomic<bool> closing_{false};
  bool shut_down_ = false;
};

}  // namespace geoccl::transport::quic
