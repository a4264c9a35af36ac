// ShmDevice: the shared-memory transport, for the peers of a rank that run on the same host
// (address.h says what that means). Frames go through a pair of rings in memory both processes
// map (connection.h); the receiver copies or reduces straight out of the shared memory.
//
// Setup: each rank listens on an abstract unix socket (SOCK_SEQPACKET, no file, gone with the
// process or its network namespace). For each pair the higher rank dials the lower one: it
// creates the pair's memfd segment and two eventfds, writes a random token into the segment and
// sends the group's Hello (protocol/handshake_machine.h) with the shared-memory extension (ring
// size, token; protocol/shm_hello.h) and the descriptors (SCM_RIGHTS). The acceptor checks the
// Hello, maps the segment, and accepts only when it reads the same token there; otherwise it
// answers with the reason and closes, and the group goes on. With a group secret both ends prove
// it inside the handshake (security/auth.h), so a process that can reach the abstract socket but
// lacks the secret neither joins nor gets a segment; frames then go through the segment unsealed.
// The socket stays open as the pair's control channel: aborts, goodbye, and liveness (its end
// without a goodbye fails the group with kPeerLost at once, even when the peer was SIGKILLed).
//
// Nothing is left behind on any exit path: the memfd has no name (its memory goes with the last
// mapping), the abstract socket has no file, and shutdown() unmaps and closes everything.
//
// Threads: as device.h. Every fd and every ring access is on the group's loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/device.h"
#include "transport/shm/address.h"
#include "transport/shm/connection.h"

namespace geoccl::transport::shm {

struct ShmOptions {
  // Capacity of each direction's ring, rounded up to a multiple of 64 bytes; 0: by the number of
  // peers connected over shared memory (auto_ring_bytes, ring.h). The dialler of a pair (the
  // higher rank) creates the segment, so its setting holds for the pair.
  size_t ring_bytes = 0;
  // An inbound connection must send its Hello within this time or it is dropped.
  std::chrono::milliseconds handshake_timeout{10000};
};

class ShmDevice final : public Device, public ReduceOnReceive, public ForwardOnReceive {
 public:
  // Listens on a fresh abstract socket and subscribes to the group's failure. Throws Error(kIo).
  // The group (and its loop) must outlive the device.
  explicit ShmDevice(Group& group, const ShmOptions& options = {});
  // shutdown().
  ~ShmDevice() override;

  const char* name() const override { return "shm"; }
  ReduceOnReceive* reduce_on_receive() override { return this; }
  ForwardOnReceive* forward_on_receive() override { return this; }
  std::vector<uint8_t> address() const override { return encode_address(address_); }
  // Same boot id and network namespace as this rank.
  bool reaches(std::span<const uint8_t> peer_address) const override;
  void connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
               Clock::time_point deadline) override;

  RequestPtr send(int peer, const protocol::FrameHeader& h,
                  std::span<const uint8_t> payload) override;
  RequestPtr recv(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst) override;
  RequestPtr recv_reduce(int peer, const protocol::FrameHeader& expect, std::span<uint8_t> dst,
                         DataType dtype, ReduceOp op) override;
  Transport::Forwarded recv_forward(int from, const protocol::FrameHeader& expect, std::span<uint8_t> dst, int to,
                                    const protocol::FrameHeader& h, const Transport::Forwarding& how) override;
  void recheck_early_frames() override;
  void send_heartbeat(int peer, std::span<const uint8_t> payload) override;
  // A peer on this host: its host is ours, so a silent peer is a stopped or hung process.
  bool host_answers(int /*peer*/, std::chrono::milliseconds /*recent*/) const override { return true; }
  void stats(LinkStats* ps) const override;
  // Bounded wait (2 s) for queued frames to be in the rings, goodbye to every peer, then closes
  // everything; requests still pending complete with kAborted. Idempotent.
  void shutdown() override;

  // Inbound connections refused by the handshake (strangers, other sessions, bad tokens, ...).
  uint64_t rejected_connections() const { return rejected_.load(); }

 private:
  struct Pending;
  struct Dialled;

  void on_loop(const std::function<void()>& f);
  void on_accept();
  void on_pending_readable(int fd);
  // Loop thread: stops watching inbound socket `fd` (in its handshake) and hands it over.
  std::unique_ptr<Pending> take_pending(int fd);
  // Loop thread: what only this transport judges of a Hello that passed the group's checks: its
  // extension and descriptors ("" = accepted: the segment is mapped into `p`).
  std::string judge(Pending& p, std::vector<UniqueFd>& fds);
  void adopt(int peer, bool dialler, UniqueFd sock, UniqueFd wake_self, UniqueFd wake_peer,
             Segment seg, size_t capacity);
  // Dials lower rank `peer`; an unset result with *why (and *rejected when the peer refused us).
  std::unique_ptr<Dialled> dial(int peer, const Address& a, Clock::time_point deadline,
                                std::string* why, bool* rejected);
  void post_recv(int peer, Connection::RecvOp op);
  void close_all();

  Group& group_;
  runtime::EventLoop& loop_;
  const ShmOptions options_;
  Address address_;
  UniqueFd listen_fd_;
  std::vector<std::shared_ptr<Connection>> conns_;   // per rank; loop thread
  std::vector<std::unique_ptr<Counters>> counters_;  // per rank; any thread
  std::vector<std::unique_ptr<Pending>> pending_;    // inbound, before their Hello; loop thread
  Group::ListenerId failure_listener_ = 0;
  std::shared_ptr<bool> alive_;                      // loop thread: read by the failure listener

  mutable std::mutex mu_;  // guards linked_, expected_
  std::condition_variable linked_cv_;
  std::vector<char> linked_;    // per rank: a connection is up
  std::vector<char> expected_;  // per rank: connect() serves it (all higher ranks until then)
  size_t local_peers_ = 0;      // connect()'s peers: the ring size when none is configured
  std::atomic<bool> shut_{false};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace geoccl::transport::shm
