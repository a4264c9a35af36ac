// Group: the state every device (tcp/, shm/, ...) of one rank shares. It is what makes several
// transports one group: one identity for the handshakes, one first failure that reaches every
// device (and through them every peer) exactly once, one place where an early data frame is
// checked against the operation this rank runs, and one progress notification.
//
// Threads: everything but the constructor, failure() and failed() runs on the loop thread, which
// every device of the group shares (runtime/event_loop.h): devices call fail(), early_frame() and
// notify() from their handlers; other threads reach fail() through Router::abort().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "protocol/handshake_machine.h"
#include "protocol/liveness.h"
#include "runtime/event_loop.h"
#include "security/secret.h"
#include "transport/transport.h"

namespace geoccl::transport {

class Group {
 public:
  // `params_hash`: hash of the group parameters every rank must share (checked in handshakes).
  Group(runtime::EventLoop& loop, int rank, int size, uint64_t session_id, uint64_t params_hash,
        std::function<void()> on_progress)
      : loop_(loop), rank_(rank), size_(size), session_id_(session_id), params_hash_(params_hash),
        on_progress_(std::move(on_progress)) {}
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  runtime::EventLoop& loop() const { return loop_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t session_id() const { return session_id_; }
  uint64_t params_hash() const { return params_hash_; }
  // The job key when the group has a secret (docs/security.md): every connection is then
  // authenticated and sealed. Set before any device is built; null = plaintext.
  void set_security(std::optional<security::GroupKey> key) { security_ = std::move(key); }
  const security::GroupKey* security() const { return security_ ? &*security_ : nullptr; }
  // What this rank's handshakes say and expect on `transport`, with `streams` connections per
  // pair; the group secret authenticates inside the handshake unless the transport does it
  // itself (`authenticate` false: QUIC's TLS).
  protocol::HandshakeSetup handshake_setup(protocol::Transport transport, uint16_t streams = 1,
                                           bool authenticate = true) const {
    protocol::HandshakeSetup s;
    s.rank = static_cast<uint32_t>(rank_);
    s.world_size = static_cast<uint32_t>(size_);
    s.session_id = session_id_;
    s.params_hash = params_hash_;
    s.transport = transport;
    s.streams = streams;
    s.key = authenticate ? security() : nullptr;
    return s;
  }

  // Called on the loop thread with the group's first failure, once, by fail(). `tell_peers`: the
  // failure was found on this rank (not reported by a peer): tell every peer. A device subscribes
  // when it is built and unsubscribes (with the id) before it goes away. Any thread.
  using FailureListener = std::function<void(const Failure&, bool tell_peers)>;
  using ListenerId = uint64_t;
  ListenerId on_failure(FailureListener l);
  void remove_failure_listener(ListenerId id);

  // Loop thread: records the first failure and hands it to every listener; later calls do
  // nothing. `ranks`: the peers it is about (Failure::ranks).
  void fail(ErrorCode code, const std::string& message, bool tell_peers,
            std::vector<int> ranks = {});
  // Loop thread: `peer` sent an abort frame with `payload` (protocol::encode_abort): the group
  // fails with its code, message and ranks (a malformed one with kAborted), and this rank passes it
  // on to every peer: after a partition, the ranks that cannot hear the one that found the failure
  // hear it from the others (each rank forwards only its first failure, once).
  void peer_aborted(int peer, std::span<const uint8_t> payload);
  std::optional<Failure> failure() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Loop thread: completes `req` with the group's failure if the group has failed.
  bool complete_if_failed(const RequestPtr& req);

  // Loop thread. The operation this rank runs now on channel h.channel (Router::begin_operation).
  void set_current_operation(const protocol::FrameHeader& h);
  // Loop thread: a data frame from `peer` arrived before its receive was posted. It must belong
  // to the current collective of its channel or a later one; anything else means the ranks
  // called different operations, and the group fails with kMismatch. Devices call it when such
  // a frame arrives and again (recheck_early_frames) when a new operation begins.
  void early_frame(int peer, const protocol::FrameHeader& h);

  // Receives from any peer. Loop thread: while watching `channel`, early_frame records the first
  // frame of every point-to-point message that arrives before its receive (the caller rechecks
  // the frames already waiting once it turns watching on); turning it off forgets them, so
  // nothing accumulates while no such receive waits.
  void watch_early_messages(uint8_t channel, bool on);
  // Any thread: the lowest-ranked peer whose next message on `channel` (sequence number
  // next_seq[peer]) has been recorded with `tag`, or -1. Records below next_seq are dropped.
  int early_message(uint8_t channel, uint32_t tag, const std::vector<uint64_t>& next_seq);

  // Loop thread: a data frame `got` arrived for the posted receive `expect` that holds
  // `max_bytes` (`exact`: a reduce, which needs exactly that many). False, with the group failed
  // with kMismatch on every rank, when they disagree (protocol::describe_mismatch, or the size).
  bool check_frame(int peer, const protocol::FrameHeader& expect, const protocol::FrameHeader& got,
                   size_t max_bytes, bool exact = false);

  // Liveness (loop thread). The monitor (liveness_monitor.h) installs its detector; devices call
  // heard() for everything that arrives from a peer and heartbeat() for its heartbeat frames (a
  // malformed one fails the group with kProtocol).
  void set_liveness(protocol::Liveness* l) { liveness_ = l; }
  void heard(int peer) {
    if (liveness_) liveness_->heard(peer, std::chrono::steady_clock::now());
  }
  void heartbeat(int peer, std::span<const uint8_t> payload);

  // Any thread: wakes whoever waits for requests.
  void notify() const { on_progress_(); }

  // Paths (any thread): the rank whose relay reaches `peer` from here (-1: direct, or not known).
  // The first device that needs a relay to a peer records it; the others (one per priority
  // class) go to that relay at once instead of waiting out the direct attempt again.
  void set_relay(int peer, int relay) {
    std::lock_guard lk(mu_);
    relays_.resize(static_cast<size_t>(size_), -1);
    relays_[static_cast<size_t>(peer)] = relay;
  }
  int relay(int peer) const {
    std::lock_guard lk(mu_);
    return static_cast<size_t>(peer) < relays_.size() ? relays_[static_cast<size_t>(peer)] : -1;
  }

 private:
  // Fails the group with kMismatch: "ranks disagree on <op> #<seq> with rank <peer>: <why>".
  void mismatch(int peer, const protocol::FrameHeader& op, const std::string& why);

  runtime::EventLoop& loop_;
  const int rank_, size_;
  const uint64_t session_id_, params_hash_;
  std::optional<security::GroupKey> security_;
  std::function<void()> on_progress_;
  std::mutex listeners_mu_;
  std::vector<std::pair<ListenerId, FailureListener>> listeners_;
  ListenerId next_listener_ = 1;
  mutable std::mutex mu_;
  std::optional<Failure> failure_;
  std::vector<int> relays_;  // by peer (mu_)
  std::atomic<bool> failed_{false};
  // early_message(): by channel, then peer: sequence number -> tag of first frames seen early.
  std::mutex early_mu_;
  std::array<std::vector<std::map<uint64_t, uint32_t>>, kPriorityClasses> early_messages_;
  std::array<bool, kPriorityClasses> watching_{};  // loop thread
  // By channel (priority class): each has its own operation sequence.
  std::array<std::optional<protocol::FrameHeader>, kPriorityClasses> current_op_;
  protocol::Liveness* liveness_ = nullptr;  // loop thread
};

}  // namespace geoccl::transport
