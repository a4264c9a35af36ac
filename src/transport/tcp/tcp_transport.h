// TcpTransport: a full mesh of TCP connections, driven by the runtime's event loop.
//
// Each pair of ranks holds 1 + S connections: stream 0 carries control frames (abort,
// goodbye) and is always read, so a failure report never waits behind data; streams 1..S carry
// data frames. Several data streams fill a long, lossy path that one TCP connection cannot
// (PCCL's approach; Gloo keeps one per pair). Data frame k to a peer carries k in its header and
// goes on the data stream with the least backlog (queued + not yet sent by the kernel), so a
// stream slowed by loss takes fewer frames; the receiver matches frame k, on whichever stream it
// arrives, to its k-th posted receive and reads it straight into that destination (stripe.h).
// The higher rank connects to the lower one and introduces itself with a Hello; strangers and
// mismatched versions are answered with a reason and closed while the group goes on.
//
// Socket tuning (docs/transport.md): data sockets get send/receive buffers sized for the path
// (forced past the system maximum when we may), TCP_NOTSENT_LOWAT so the kernel's unsent queue
// stays short, optionally MSG_ZEROCOPY for large writes; TCP_INFO is exposed through stats().
//
// Resume (TcpOptions::resume, docs/transport.md): receivers acknowledge data frames on the
// control stream; senders keep a copy of each written frame until acknowledged. A data stream
// that breaks while the peer's control stream is open is dialled again by the higher rank and
// its unacknowledged frames are re-sent first on the new socket; frames already received are
// recognised by number and dropped, so each arrives exactly once.
//
// Zero copy: a send is one sendmsg() of [header iovec, payload iovec] straight from the user's
// memory; a receive reads the payload straight into its destination. A data frame that arrives
// before its receive is posted stays in the kernel's socket buffer (the connection stops reading)
// until the receive is posted.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "geoccl/config.h"
#include "runtime/event_loop.h"
#include "transport/tcp/stripe.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/transport.h"

namespace geoccl::transport::tcp {

// Socket tuning of the data streams, resolved from Config (GEOCCL_TCP_BUF_BYTES,
// GEOCCL_TCP_NOTSENT_LOWAT, GEOCCL_TCP_ZEROCOPY[_MIN], GEOCCL_TCP_STRIPE: docs/configuration.md).
// Zero values leave the kernel's defaults.
struct TcpOptions {
  uint64_t buffer_bytes = 0;
  uint64_t notsent_lowat = 0;
  bool zerocopy = false;
  uint64_t zerocopy_min_bytes = 256 * 1024;
  bool round_robin = false;
  // Re-establish broken data streams and re-send unacknowledged frames (GEOCCL_TCP_RESUME).
  bool resume = false;
  std::chrono::milliseconds resume_timeout{30000};
  // Resolves the configuration's "auto" values: WAN jobs (cfg.domain set) get 32 MiB buffers and
  // a 1 MiB TCP_NOTSENT_LOWAT, single-site jobs the kernel's autotuning.
  static TcpOptions from_config(const Config& cfg);
};

class TcpTransport final : public Transport {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kControlStream = 0;

  // Listens on bind_addr (any port). `on_progress` runs on the loop thread after requests
  // complete. Throws Error(kIo).
  // `congestion_control`: "" leaves the system default; otherwise requested on the listening
  // socket (accepted sockets inherit it) and on every outgoing connection.
  // `data_streams`: S >= 1, equal on every rank.
  TcpTransport(runtime::EventLoop& loop, int rank, int size, const std::string& bind_addr,
               uint64_t session_id, std::function<void()> on_progress,
               const std::string& congestion_control = "", int data_streams = 1,
               const TcpOptions& options = {});
  // Says goodbye to every peer (bounded wait for the send queues to drain), then closes.
  ~TcpTransport() override;

  // "ip:port" peers should connect to.
  std::string address() const { return address_; }
  // Connects to every lower rank (address from addr_of(r)) and waits until every higher rank has
  // connected. Throws Error(kTimeout) naming the missing ranks, Error(kProtocol) when a peer
  // rejects us (with its reason), Error(kIo).
  void connect_all(const std::function<std::string(int)>& addr_of,
                   std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr send(int peer, const protocol::FrameHeader& h,
                  std::span<const uint8_t> payload) override;
  RequestPtr recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) override;
  void begin_operation(const protocol::FrameHeader& h) override;
  void abort(ErrorCode code, const std::string& message) override;
  std::optional<Failure> failure() const override;
  std::vector<PeerStats> stats() const override;

  // Number of inbound connections rejected by the handshake (strangers, wrong session, ...).
  uint64_t rejected_connections() const { return rejected_.load(); }
  // `peer` is in this rank's own domain (a LAN path): frames to it use one data stream (no
  // striping needed; one warm stream keeps latency low) and no copies are kept for stream
  // recovery (a broken LAN stream fails the group). Both ends of a pair must agree, which they do
  // as every rank knows the same domains. Any thread.
  void set_local_peer(int peer);
  // Fault injection for tests: resets data stream `stream` (1..S) to `peer` with an RST, as a
  // middlebox would; `silent`: drops it here without telling the peer, as a NAT that forgets
  // the flow would (the peer's socket stays open until it learns otherwise).
  void reset_stream_for_test(int peer, int stream, bool silent = false);

 private:
  friend class TcpConnection;
  struct PendingAccept;

  void on_accept();
  void on_pending_readable(int fd);
  void drop_pending(int fd);
  void adopt(int fd, int peer, int stream);
  // Opens stream `stream` to lower rank `peer` and introduces us (Hello/Reply). Returns the
  // connected blocking socket, or -1 with *why set (*rejected when the peer refused us).
  int dial(int peer, int stream, Clock::time_point deadline, std::string* why, bool* rejected);
  // Stream recovery: a data stream to `peer` broke while the peer is alive. The higher rank
  // dials it again (own thread, backoff, until resume_timeout); the lower rank waits for that.
  bool can_resume(int peer) const;
  void stream_broken(int peer, int stream);
  void redial(int peer, int stream);
  // Receiver side: data frames of `peer` below its window's base are in; tell it now and then.
  void maybe_ack(int peer, uint64_t bytes);
  void on_ack(int peer, uint64_t upto);
  // Loop thread: records the first failure, fails every pending request, tells peers if asked.
  void fail(ErrorCode code, const std::string& message, bool tell_peers);
  void notify() { on_progress_(); }
  // Loop thread: completes `req` with the group's failure, if the group has failed.
  bool complete_if_failed(const RequestPtr& req);
  // Loop thread: whether a data stream of `peer` other than `except` is open.
  bool data_stream_open(int peer, const TcpConnection* except = nullptr) const;
  // Loop thread: the data stream with the least backlog to `peer`.
  // Frames below this size go on the first data stream unless it is backed up.
  static constexpr size_t kSmallFrame = 64 << 10;
  TcpConnection& next_send_conn(int peer, size_t bytes);
  TcpConnection* conn(int peer, int stream) const {
    return conns_[static_cast<size_t>(peer * streams_ + stream)].get();
  }

  runtime::EventLoop& loop_;
  const int rank_;
  const int size_;
  const uint64_t session_id_;
  std::function<void()> on_progress_;
  int listen_fd_ = -1;
  std::string address_;
  std::string cc_;
  const int streams_;  // per peer: control + data streams
  const TcpOptions options_;
  std::vector<uint64_t> frames_sent_;  // per peer, loop thread: next data frame number
  std::vector<size_t> rotate_;         // per peer, loop thread: tie-break for the stream choice
  std::vector<int> width_;             // per peer, loop thread: data streams frames may use
  std::vector<char> resume_peer_;      // per peer, loop thread: streams to it are resumed
  std::vector<RecvWindow<TcpConnection::RecvOp>> recv_windows_;  // per peer, loop thread
  std::vector<uint64_t> acked_;       // per peer, loop thread: the peer has every frame below
  std::vector<uint64_t> ack_sent_;    // per peer, loop thread: last ack we sent
  std::vector<uint64_t> ack_bytes_;   // per peer, loop thread: bytes received since then
  std::vector<std::string> peer_addrs_;  // lower ranks' addresses (set up by connect_all)

  // conns_[peer * streams_ + stream]; touched only on the loop thread after setup.
  std::vector<std::unique_ptr<TcpConnection>> conns_;
  std::vector<std::unique_ptr<PendingAccept>> pending_;
  int connected_ = 0;  // loop thread
  std::optional<protocol::FrameHeader> current_op_;  // loop thread

  mutable std::mutex failure_mu_;
  std::optional<Failure> failure_;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<bool> closing_{false};
  // Re-dialler of each (peer, stream), indexed like conns_: at most one per stream, the previous
  // one has ended (it handed over its socket or failed the group) before the stream can break
  // again. Started and joined on the loop thread; the destructor joins what is left.
  std::vector<std::thread> dialers_;
  std::vector<int> forgotten_fds_;  // loop thread: sockets abandoned by silent test resets
  std::vector<std::unique_ptr<std::atomic<uint64_t>>> bytes_sent_, bytes_received_;
};

}  // namespace geoccl::transport::tcp
