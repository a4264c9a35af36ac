// TcpDevice: TCP connections to the peers the router gives it, driven by the group's event
// loop: a full mesh at start-up, or past 32 ranks (TcpOptions::lazy) the pairs a power of two
// apart round the ring at start-up and every other pair when a frame first needs it.
//
// Each pair of ranks holds 1 + S connections: stream 0 carries control frames (abort, goodbye,
// ack) and is always read, so a failure report never waits behind data; streams 1..S carry
// data frames. Several data streams fill a long, lossy path that one TCP connection cannot
// (PCCL's approach; Gloo keeps one per pair). Data frame k to a peer carries k in its header and
// goes on the data stream with the least backlog (queued + not yet sent by the kernel), so a
// stream slowed by loss takes fewer frames; the receiver matches frame k, on whichever stream it
// arrives, to its k-th posted receive and reads it straight into that destination (the peer's
// protocol::PeerSession holds numbering, window, acks and kept copies).
// The higher rank connects to the lower one and introduces itself with a Hello; strangers and
// mismatched versions are answered with a reason and closed while the group goes on.
//
// WAN treatment (set_wan_peer, after topology discovery): a peer in another domain gets all S
// data streams, BBR (tcp_cc=auto), buffers sized for the path and TCP_NOTSENT_LOWAT
// (tcp_buf / notsent_lowat auto; GEOCCL_EXPERIMENT keys) and stream resume (resume
// auto); a peer in this rank's domain one data stream and no kept copies. With domain labels the
// socket options are set from the start (the receive buffer at the SYN decides the window scale).
//
// Resume: receivers acknowledge data frames on the control stream; senders keep a copy of each
// written frame until acknowledged. A data stream that breaks while the peer's control stream is
// open is dialled again by the higher rank and its unacknowledged frames are re-sent first on the
// new socket; frames already received are recognised by number and dropped, so each arrives
// exactly once.
//
// Zero copy: a send is one sendmsg() of [header iovec, payload iovec] straight from the user's
// memory; a receive reads the payload straight into its destination. A data frame that arrives
// before its receive is posted stays in the kernel's socket buffer (the connection stops reading)
// until the receive is posted.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/handshake_machine.h"
#include "protocol/peer_session.h"
#include "runtime/event_loop.h"
#include "runtime/worker_pool.h"
#include "transport/device.h"
#include "transport/scavenger.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/relay.h"
#include "transport/tcp/stream_width.h"

namespace geoccl::transport::tcp {

// Socket tuning of the data streams (GEOCCL_TCP_*: docs/configuration.md; the api resolves the
// configuration into these).
// Zero values leave the kernel's defaults.
struct TcpOptions {
  int data_streams = 1;  // S >= 1, equal on every rank (rank 0's choice)
  // Measured stream counts (GEOCCL_TCP_STREAMS unset): the pair connects `initial_streams` data
  // streams, and each end spreads its frames to a WAN peer over as many of the S as pay
  // (stream_width.h); the dialling end opens more on demand. 0: all S, always.
  int initial_streams = 0;
  int initial() const { return initial_streams > 0 ? std::min(initial_streams, data_streams) : data_streams; }
  // Congestion control requested on every socket from the start ("" = the system's), and the
  // one a WAN peer's sockets get (set_wan_peer).
  std::string congestion_control;
  std::string wan_congestion_control;
  uint64_t buffer_bytes = 0, wan_buffer_bytes = 0;
  uint64_t notsent_lowat = 0, wan_notsent_lowat = 0;
  bool zerocopy = false;
  uint64_t zerocopy_min_bytes = 256 * 1024;
  bool round_robin = false;
  // Each WAN peer's frames use S / (WAN peers with frames queued or unsent) of its streams
  // (GEOCCL_EXPERIMENT stripe=backlog; "wide": all S always).
  bool narrow_fan_out = false;
  // Re-establish broken data streams and re-send unacknowledged frames: for every peer, or for
  // WAN peers (GEOCCL_EXPERIMENT resume=on / auto).
  bool resume = false, wan_resume = false;
  std::chrono::milliseconds resume_timeout{30000};
  // A resumable connection with data unacknowledged for this long, while no stream to its peer
  // was acknowledged for as long, is stalled (the path is down and TCP sits in retransmission
  // backoff): the rank that dials replaces it with a fresh one. One quiet while the peer's other
  // streams are acknowledged is busy, and replaced only after a much longer bound (stall.h).
  // GEOCCL_EXPERIMENT stall_ms; 0: never.
  std::chrono::milliseconds stall_timeout{1000};
  // Kernel-side liveness of every peer socket: TCP_USER_TIMEOUT (unacknowledged data for longer
  // ends the connection; the resume timeout) and keepalive probes of idle sockets (idle, interval).
  std::chrono::milliseconds user_timeout{30000};
  std::chrono::milliseconds keepalive_idle{10000}, keepalive_interval{1000};
  // A lower peer that a connection attempt does not reach within this time is dialled through a
  // relay (relay.h); 0: never.
  std::chrono::milliseconds relay_after{5000};
  uint8_t channel = 0;  // the priority class this device carries (logs)
  // Connections on demand (GEOCCL_EXPERIMENT lazy_connect): connect() sets up only the pairs 1,
  // 2, 4, ... apart round the ring (protocol::power_of_two_apart); any other pair is connected when either end first has a
  // frame for it (a send, a receive, a heartbeat): the higher rank dials, the lower one asks it to
  // (protocol::kHelloFlagDialBack). Frames posted meanwhile wait in the pair, in order.
  bool lazy = false;
  // Defaults of the "auto" settings: a WAN socket's buffers and unsent bytes, the data streams
  // a pair starts with when their count is measured, and the most a WAN peer gets.
  static constexpr uint64_t kWanBufferBytes = 32ull << 20;
  static constexpr uint64_t kWanNotsentLowat = 1ull << 20;
  static constexpr int kInitialStreams = 4, kMostStreams = 16;
};

// One peer pair of a TcpDevice: its connections, its protocol state, its relay and two-hop
// state and the threads that keep it connected. Its streams (TcpConnection) ask what they need
// through the pair's few methods below, which the device answers. Loop thread, except the byte
// counters.
struct TcpPeer {
  using Session = protocol::PeerSession<TcpConnection::RecvOp, RequestPtr>;
  explicit TcpPeer(TcpDevice& d) : device(d) {}

  // ---- What its streams ask of the pair (loop thread).
  Group& group() const;
  const TcpOptions& options() const;
  // Stream `stream` broke (or stalled): whether it is re-established instead of failing the
  // group. Resume is on for the peer, the group stands, the peer has not said goodbye, and for a
  // data stream the control stream is open or being re-established.
  bool can_resume(int stream) const;
  // The higher rank dials it again (own thread, fast attempts until resume_timeout; a refused
  // connection means the peer's process is gone: kPeerLost); the lower rank waits for that and
  // checks that the peer's process is still there.
  void stream_broken(int stream);
  // The control stream was re-established: the latest acknowledgement goes again, and after an
  // outage (control_stalled) the dialler replaces every data stream.
  void control_resumed();
  // Whether a data stream other than `except` is open or being re-established.
  bool data_stream_open(const TcpConnection* except = nullptr) const;
  // A data frame was received in full: acknowledges it when one is due.
  void received(uint64_t bytes);
  // The peer acknowledged every data frame below `upto`.
  void acked(uint64_t upto);
  // Applies the WAN socket options to a data socket.
  void tune_wan_socket(int fd) const;
  // A data stream's send queue became empty or non-empty.
  void queue_changed();
  // Whether the data streams hold their frames now (the device yields to a higher class that
  // has frames queued for a WAN peer).
  bool holding() const;
  // The threads that seal and open large data frames (a group with a secret), or null.
  runtime::WorkerPool* crypto_workers() const;

  TcpDevice& device;
  int rank = -1;
  std::string endpoint;  // lower ranks: where to dial
  std::vector<std::unique_ptr<TcpConnection>> streams;  // [0] control, [1..S] data
  Session session;
  int width = 1;        // data streams frames may use
  std::atomic<bool> wan{false};  // in another domain (set_wan_peer; read by dialling threads)
  bool resume = false;  // streams to it are re-established when they break (see the constructor)
  // The rank whose relay carries every stream to this peer (-1: direct). The dialler sets it
  // before the pair's first stream is adopted (no direct path at start-up), or when a WAN path
  // gave no answer for relay_after while the job ran (`failed_over`, until the direct path
  // answers again); the acceptor follows the control stream's Hello.
  std::atomic<int> relay{-1};
  std::atomic<bool> failed_over{false};
  // The dialler, while failed over: tries the direct path every second (one at a time).
  std::thread direct_watch;
  std::atomic<bool> watching{false};
  // A two-hop path for bulk data (TcpDevice::set_two_hop): the dialler connects the data streams
  // from kFirstTwoHopStream on through rank `two_hop`'s relay (-1: none, or given up after the
  // relay failed); frames from `two_hop_min_bytes` on (0: no two-hop) go on the streams whose
  // socket is relayed, smaller ones on the direct ones (loop thread).
  std::atomic<int> two_hop{-1};
  size_t two_hop_min_bytes = 0;
  size_t rotate = 0;    // tie-break for the stream choice
  // Per stream, the segments it had delivered at the last path_reading (loop thread).
  std::vector<uint32_t> read_delivered;
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::vector<std::thread> dialers;  // re-dialler of each stream (at most one at a time)
  // The lower rank of a pair whose stream broke: checks that the peer's process is still there
  // (its listening address refuses connections once it is gone). One at a time.
  std::thread prober;
  std::atomic<bool> probing{false};
  // The direct path to this rank is down (TcpDevice::tick): from the tick its direct streams show
  // the outage until one is acknowledged again, or none has anything unacknowledged. Streams and
  // tunnels through this rank as a relay ride on that path (loop thread).
  bool path_down = false;
  // The dialler replaced the control stream because it stalled (an outage): once it is back,
  // every data stream is replaced too (the peer's side of them may sit in TCP's backoff).
  bool control_stalled = false;
  // Bulk class (TcpDevice::yield_to), WAN peers: the scavenger's rate on the path to this peer.
  std::unique_ptr<ScavengerRate> bulk_rate;
  // Measured stream counts (TcpOptions::initial_streams), WAN peers: the controller, what it saw
  // at the last sample, and the thread that opens the streams it asks for (the dialling end).
  std::unique_ptr<StreamWidth> width_control;
  bool width_busy = false;
  uint64_t width_mark = 0;  // frames numbered from here on were spread at the current width
  std::thread opener;
  std::atomic<bool> opening{false};
  // Connections on demand (TcpOptions::lazy). `met`: the pair has had its control and first data
  // stream (frames go to the streams from then on); before that, sends wait in `waiting`, in the
  // order they were numbered. `connector`: the thread that dials the pair (higher rank) or asks
  // the peer to (lower rank), one at a time; `control_up`: the control stream was adopted.
  bool met = false;
  std::vector<TcpConnection::SendOp> waiting;
  std::atomic<bool> control_up{false};
  std::thread connector;
  std::atomic<bool> connecting{false};
};

class TcpDevice final : public Device, public WanTuning, public PathReader, public TwoHopPaths {
 public:
  static constexpr int kControlStream = 0;
  // A two-hop path takes the data streams from this one on; stream 1 stays direct.
  static constexpr int kFirstTwoHopStream = 2;

  // Listens on bind_addr (any port). Throws Error(kIo).
  TcpDevice(Group& group, const std::string& bind_addr, const TcpOptions& options);
  ~TcpDevice() override;

  const char* name() const override { return "tcp"; }
  WanTuning* wan_tuning() override { return this; }
  const PathReader* path_reader() const override { return this; }
  TwoHopPaths* two_hop_paths() override { return this; }
  std::vector<uint8_t> address() const override;
  bool reaches(std::span<const uint8_t> peer_address) const override;
  void connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
               Clock::time_point deadline) override;
  RequestPtr send(int peer, const protocol::FrameHeader& h, std::span<const uint8_t> payload) override;
  RequestPtr recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) override;
  void recheck_early_frames() override;
  void send_heartbeat(int peer, std::span<const uint8_t> payload) override;
  bool host_answers(int peer, std::chrono::milliseconds recent) const override;
  void tick(Clock::time_point now) override;
  // A WAN peer's data streams beyond the first (connect() opens one for every peer): the dialling
  // end opens them (up to the initial count) and frames spread over them as they come.
  void set_wan_peer(int peer, bool wan) override;
  void set_wan_peers(std::span<const int> peers, std::span<const char> wan) override;
  // Until every WAN peer has its initial data streams, the dialling end's opening has ended, or
  // `deadline`.
  void await_wan_streams(Clock::time_point deadline) override;
  void stats(LinkStats* ps) const override;
  // Every connection's smoothed RTT (the least), the data streams' non-app-limited delivery rates
  // (their sum), read on the loop thread.
  PathReading path_reading(int peer) const override;
  // The dialling end (the higher rank) replaces data streams kFirstTwoHopStream..S by streams
  // through `via`'s relay (resumed: nothing is lost or doubled); both ends then send frames of
  // `min_bytes` and more on the relayed streams. A relay that cannot be reached later gives the
  // stream back to the direct path. False (nothing done) for a LAN peer, one without stream
  // resume, a pair that a relay carries already, or a single data stream.
  bool set_two_hop(int peer, int via, size_t min_bytes) override;
  void shutdown() override;

  // "ip:port" peers connect to.
  const std::string& endpoint() const { return endpoint_; }
  // Number of inbound connections rejected by the handshake (strangers, wrong session, ...).
  uint64_t rejected_connections() const { return rejected_.load(); }
  // The connections this rank relays for other pairs (relay.h); `rank` >= 0: with it at one end.
  Relay::Counters relay_counters(int rank = -1) const { return relay_.counters(rank); }
  std::vector<uint16_t> relay_ports_for_test(int to) const { return relay_.onward_ports(to); }
  // Fault injection for tests: resets data stream `stream` (1..S) to `peer` with an RST, as a
  // middlebox would; `silent`: drops it here without telling the peer, as a NAT that forgets
  // the flow would (the peer's socket stays open until it learns otherwise).
  void reset_stream_for_test(int peer, int stream, bool silent = false);
  // For tests that cut one stream's packets: the local port of stream `stream` to `peer` (0 when
  // closed), and the figures the stall detector reads for it now.
  uint16_t stream_port_for_test(int peer, int stream);
  StallSample stall_sample_for_test(int peer, int stream);

  // Priority between classes (the Router sets it up on the bulk class's device): this device
  // yields to `higher`. While `higher` has data frames queued for a WAN peer (and kYieldHold
  // after), nothing more is written to this device's WAN data sockets; otherwise they send at
  // the rate their delay controller (ScavengerRate, one per WAN path) allows, as the kernel's
  // pacing rate (SO_MAX_PACING_RATE). Yielding happens in user space, not by lowering the
  // pacing rate: the kernel schedules each packet at the departure time the rate gave the one
  // before it, so a rate dropped to a trickle delays the next packet long after it is raised
  // again. What the kernel already holds is bounded by the bulk class's small
  // TCP_NOTSENT_LOWAT. Call before connect(); `higher` must outlive this device.
  void yield_to(TcpDevice& higher, const ScavengerOptions& o);
  // Loop thread: `busy` is called with true when this device's WAN data queues go from empty to
  // non-empty and false when they empty again (what a lower class's device yields to); null: no
  // one watches.
  void watch_wan_busy(std::function<void(bool busy)> busy) { on_wan_busy_ = std::move(busy); }
  // Bulk class: the rate the controller gives the path to `peer` (0 before set_wan_peer), for
  // stats and tests.
  uint64_t bulk_rate_bps(int peer) const;

 private:
  friend struct TcpPeer;  // answers what its streams ask (the functions below)

  TcpPeer& peer(int rank) { return *peers_[static_cast<size_t>(rank)]; }
  bool can_resume(const TcpPeer& p, int stream) const;
  void stream_broken(TcpPeer& p, int stream);
  void control_resumed(TcpPeer& p);
  bool data_stream_open(const TcpPeer& p, const TcpConnection* except = nullptr) const;
  void received(TcpPeer& p, uint64_t bytes);
  void acked(TcpPeer& p, uint64_t upto);
  void tune_wan_socket(int fd) const;
  void data_queue_changed(const TcpPeer& p);
  bool holding(const TcpPeer& p) const;

  // An inbound connection in its handshake (protocol/handshake_machine.h). Nothing but the
  // handshake is read from it until the dialler has proven the secret; the machine asks for no
  // more than its messages, so the first frames stay in the socket for the connection.
  struct PendingAccept {
    int fd = -1;
    runtime::EventLoop::TimerId timer = 0;
    std::unique_ptr<protocol::HandshakeAcceptor> hs;
  };

  void on_accept();
  void on_pending_readable(int fd);
  void drop_pending(int fd);
  void reject_pending(int fd, const std::string& why);
  // set_wan_peer on the loop thread.
  void apply_wan_peer(TcpPeer& p, bool wan);
  // What this rank's TCP handshakes say and expect (relay requests taken).
  protocol::HandshakeSetup tcp_handshake() const {
    auto s = group_.handshake_setup(protocol::Transport::kTcp, static_cast<uint16_t>(streams_));
    s.relays = true;
    return s;
  }
  // Whether a stream from the Hello's rank is welcome now (kBadRank if not, *why says why);
  // *existing: the stream it replaces (resume).
  protocol::HandshakeStatus admit(const protocol::Hello& hello, TcpConnection** existing, std::string* why);
  // Why stream `stream` to the peer cannot be re-established now (nullptr: it can; can_resume).
  const char* resume_refusal(const TcpPeer& p, int stream) const;
  // `via`: the rank whose relay carries the socket (-1: direct).
  void adopt(int fd, int peer, int stream, const security::ConnectionKeys& keys, int via);
  // Opens stream `stream` to lower rank `peer` and introduces us (Hello/Reply). Returns the
  // connected blocking socket, or -1 with *why set (*rejected when the peer refused us).
  // `wan`: the WAN socket options from the start (read on the loop thread by the caller).
  // *refused: nobody listens at the peer's address (its process is gone).
  // With a group secret the connection is mutually authenticated and *keys filled.
  // Through p.relay when the pair is relayed: *refused then stays false (the relay refusing is
  // not the peer gone).
  // *via: the relay dialled (via_for), -1 direct.
  int dial(const TcpPeer& p, bool wan, int stream, Clock::time_point deadline, std::string* why,
           bool* rejected, security::ConnectionKeys* keys, bool* refused = nullptr, int* via = nullptr);
  // dial() through relay `via` (-1: direct), with `flags` added to the Hello (a dial-back request:
  // the peer answers, with a secret once we proved it, and closes; the keys go unused).
  int dial_via(const TcpPeer& p, int via, bool wan, int stream, uint32_t flags, Clock::time_point deadline,
               std::string* why, bool* rejected, security::ConnectionKeys* keys, bool* refused);
  // The end of one dial attempt: `deadline` at start-up; a connection made on demand bounds each
  // attempt (relayed_attempt), so that its connector sees a stop (the device closing, the group
  // failing) within one.
  Clock::time_point attempt_until(Clock::time_point deadline) const;
  // Throws the group's failure, or Error(kAborted) while the device closes.
  void throw_if_stopping() const;
  // How long one dial through a relay may take: the relay answers within its own relay_after
  // (it tries to reach the peer that long), and the handshake follows.
  std::chrono::milliseconds relayed_attempt() const { return 2 * options_.relay_after + std::chrono::seconds(2); }
  // The relay a new socket of `stream` to the peer goes through: the pair's relay, else the
  // two-hop path's for its bulk streams; -1: direct.
  int via_for(const TcpPeer& p, int stream) const;
  // connect(), for lower peer `p` that did not answer directly: tries the other ranks as relays
  // (those this rank reaches directly first) and connects every stream through the first that
  // reaches `p`. Throws Error(kTimeout) when none does before `deadline`.
  void connect_through_relay(TcpPeer& p, const std::vector<int>& peers, const Poll& poll,
                             Clock::time_point deadline);
  void adopt_dialled(int fd, int peer, int stream, const security::ConnectionKeys& keys, int via);
  // connect() and connect_on_demand(), for lower peer `p`: dials its set-up streams in order
  // (the first directly within relay_after). kRelay: the peer gave no direct answer (or another
  // class found none): connect_through_relay next. Throws Error(kProtocol) when the peer refuses
  // us, Error(kTimeout) at `deadline`.
  // `gone_on_refusal`: a refused connection means the peer's process is gone (Error(kPeerLost));
  // at start-up it may not be listening yet, and the dial is tried again.
  enum class SetupDial { kDone, kRelay, kStopped };
  SetupDial dial_setup_streams(TcpPeer& p, Clock::time_point deadline, const std::atomic<bool>& stop,
                               bool gone_on_refusal = false);
  // The dialling end opens a WAN peer's other initial data streams in the background, once the
  // pair is connected (loop thread).
  void open_initial_wan_streams(TcpPeer& p);
  // Connections on demand (TcpOptions::lazy), loop thread: `p` has a frame to carry (`sending`: a
  // send or a heartbeat; else a receive) and is not connected yet: the connector thread starts.
  void want_connection(TcpPeer& p, bool sending);
  // Connector thread: the higher rank dials the pair; the lower rank asks the peer to dial it
  // (ask_dial_back) until it has. A failure fails the group.
  void connect_on_demand(TcpPeer& p);
  // The lower end: asks the peer directly, and through another rank's relay (relay.h) when the
  // direct path gives no answer within relay_after, until the peer's control stream is adopted.
  void ask_dial_back(TcpPeer& p, Clock::time_point deadline);
  // One dial-back request to `p`, directly (via < 0) or through `via`'s relay: whether the
  // request was delivered. *refused: nobody listens at the peer's address (direct only); throws
  // Error(kProtocol) when the peer refuses the request.
  bool request_dial_back(const TcpPeer& p, int via, Clock::time_point deadline, std::string* why, bool* refused);
  // A dial-back request (a Hello with kHelloFlagDialBack) from a pending connection, loop thread:
  // at kJudge (with a secret: accepted, to wait for the proof) and at kDone (proved: served).
  void serve_dial_back(int fd, protocol::HandshakeAcceptor& hs);
  // A relay request (a Hello with kHelloFlagRelayRequest) from a pending connection: the relay
  // takes the socket (loop thread).
  void serve_relay(int fd, const protocol::HandshakeAcceptor& hs);
  // An admitted Hello: whether it came through a relay (kHelloFlagRelayed) and whose; a relayed
  // control stream makes the pair relayed (a data stream alone: a two-hop path).
  int note_relay(const protocol::Hello& hello);
  std::string endpoint_of(int rank) const;  // every rank's, once connect() has them ("" before)
  void redial(TcpPeer& p, bool wan, int stream, std::chrono::milliseconds attempt);
  // redial(), for a WAN path that has given no answer for relay_after: dials the stream through
  // a rank in another domain that still answers (as connect_through_relay does at start-up) and
  // makes the pair relayed until the direct path answers again (watch_direct). Returns the
  // connected socket, or -1 when no rank relayed in time (*why says why).
  int fail_over(TcpPeer& p, int stream, Clock::time_point deadline, std::string* why,
                security::ConnectionKeys* keys, int* via);
  // Watcher thread of a failed-over pair: once a plain connect to the peer's address succeeds,
  // the pair is direct again and its streams are replaced (they re-dial direct).
  void watch_direct(TcpPeer& p);
  // Lower rank: connects to the peer's listening address without a handshake (prober thread).
  void probe(TcpPeer& p);
  // Any thread: the peer's address refuses connections (`why`): the group fails with peer-lost.
  void peer_gone(TcpPeer& p, const std::string& why);
  // The group failed: every pending request completes with `f`; peers are told if asked.
  void on_group_failure(const Failure& f, bool tell_peers);
  // The data stream with the least backlog to the peer. Frames below kSmallFrame go on the
  // first data stream unless it is backed up.
  static constexpr size_t kSmallFrame = 64 << 10;
  TcpConnection& next_send_conn(TcpPeer& p, size_t bytes);
  // 1 + the other WAN peers with data queued or unsent by the kernel (loop thread).
  int busy_wan_peers(const TcpPeer& p) const;
  TcpConnection* conn(int peer, int stream) const;

  Group& group_;
  Group::ListenerId failure_listener_ = 0;
  const TcpOptions options_;
  const int streams_;  // per peer: control + data streams (the most)
  // Per peer: control + data streams connect() opens (one data stream: a LAN peer uses no
  // more), and what a WAN peer opens at first (set_wan_peer).
  static constexpr int kSetupStreams = 2;
  const int initial_streams_;
  int listen_fd_ = -1;
  std::string endpoint_;
  // With a group secret: the process's workers (WorkerPool::shared), which seal and open the
  // large data frames of every connection (declared before the peers: their connections wait for
  // their jobs before it goes).
  std::shared_ptr<runtime::WorkerPool> crypto_pool_;
  // By global rank, every rank (a higher rank dials us only if it chose TCP for the pair too).
  std::vector<std::unique_ptr<TcpPeer>> peers_;
  std::vector<std::unique_ptr<PendingAccept>> pending_;
  int connected_ = 0;  // loop thread: connections adopted
  std::atomic<uint64_t> rejected_{0};
  std::string last_auth_failure_;  // loop thread: why the latest inbound authentication failed
  std::atomic<bool> closing_{false};
  bool shut_down_ = false;
  std::vector<int> forgotten_fds_;  // loop thread: sockets abandoned by silent test resets
  // Where every rank listens (from connect()'s address_of): what relay requests connect to.
  mutable std::mutex endpoints_mu_;
  std::vector<std::string> endpoints_;
  // connect()'s peers (sorted), and whether it has returned (connections on demand start after it).
  std::vector<int> served_;
  std::atomic<bool> set_up_{false};
  Relay relay_;  // declared after the peers: its tunnels end before the device goes

  // Priority (loop thread). On the higher class's device: told when its WAN data queues go busy
  // or idle. On the bulk class's device: the scavenger.
  bool wan_backlogged() const;
  std::function<void(bool busy)> on_wan_busy_;
  bool wan_busy_ = false;
  struct Scavenge {
    TcpDevice* higher = nullptr;
    ScavengerOptions options;
    bool higher_busy = false;  // the higher class has WAN frames queued, or had them just now
    runtime::EventLoop::TimerId tick = 0, release = 0;
    uint64_t ticks = 0, busy_ticks = 0;
    uint64_t sent_at_tick = 0;  // bytes sent to WAN peers when the last tick ran
    Clock::time_point resume_sampling{};  // no RTT samples before (just after a yield)
  };
  std::unique_ptr<Scavenge> scavenge_;
  void scavenge_tick();
  void higher_class_busy(bool busy);
  // Sets every WAN data socket's pacing rate: the path's controller rate split over its streams.
  void apply_bulk_rates();

  // Measured stream counts (loop thread): every kWidthInterval, each WAN peer's controller gets
  // what was written to it, and its streams are opened (dialling end) and used as it says.
  runtime::EventLoop::TimerId width_tick_ = 0;
  Clock::time_point width_at_{};  // the last sample
  void width_tick();
  // Data streams open from the first on, without a gap: the most frames may use.
  int open_prefix(const TcpPeer& p) const;
  // The streams a WAN peer's frames use from now on; a change moves its width_mark.
  void set_width(TcpPeer& p, int width);
  // Dialling end, own thread: opens data streams `from` .. `upto` to the peer.
  void open_streams(TcpPeer& p, int from, int upto);
};

}  // namespace geoccl::transport::tcp
