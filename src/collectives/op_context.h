// OpContext: everything one collective needs while it runs on the communicator's worker thread.
// Collectives post sends and receives of byte ranges here and reduce what arrives; they never
// touch a socket. Every wait is bounded by the operation's deadline: on expiry the group is
// aborted (so every rank fails, not just this one) and Error(kTimeout) is thrown.
// One OpContext is used by one thread at a time. A collective that runs parts of itself on two
// threads (two_lanes.h) gives each thread its own sub() context, with its own scratch slots, and
// lets each thread talk to its own peers only: the transport matches frames of one peer in
// posting order, which must then be the same on both ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "geoccl/types.h"
#include "metrics/trace.h"
#include "protocol/frame.h"
#include "runtime/progress.h"
#include "transport/transport.h"

namespace geoccl::collectives {

using transport::RequestPtr;

// Scratch buffers kept across operations so that large staging memory is allocated (and
// faulted in) once per communicator, not per call. Contents are uninitialized. Threads of one
// operation may call get() at the same time for different slots (a slot's memory belongs to one
// thread at a time); the lock covers the slot table, which can grow under another slot's user.
class ScratchPool {
 public:
  std::span<uint8_t> get(size_t bytes, int slot) {
    std::lock_guard lk(mu_);
    if (bufs_.size() <= static_cast<size_t>(slot)) bufs_.resize(static_cast<size_t>(slot) + 1);
    auto& b = bufs_[static_cast<size_t>(slot)];
    if (b.size < bytes) {
      b.data.reset(new uint8_t[bytes]);
      b.size = bytes;
    }
    return {b.data.get(), bytes};
  }

 private:
  struct Buf {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };
  std::mutex mu_;
  std::vector<Buf> bufs_;
};

class OpContext {
 public:
  using Clock = std::chrono::steady_clock;

  OpContext(transport::Transport& t, runtime::Progress& progress, ScratchPool& scratch,
            protocol::FrameHeader header, Clock::time_point deadline, size_t chunk_bytes);
  // Waits for every request still pending (sends from user memory must finish before the
  // operation completes), without throwing.
  ~OpContext();
  OpContext(OpContext&&) = default;

  // Rank and size within this context's group (the whole communicator unless made by sub()).
  int rank() const { return my_index_; }
  int size() const { return static_cast<int>(members_.size()); }
  // The global rank of group member `i`.
  int global(int i) const { return members_[static_cast<size_t>(i)]; }

  // A context over a subgroup (global ranks, in the order that defines ring positions; must
  // contain this rank). It shares the operation's header, deadline and scratch memory. Its
  // scratch slot i is this context's slot scratch_base + i: subgroup algorithms that run at the
  // same time (on different threads, with disjoint peers) need disjoint slots; ones that run one
  // after another may share them.
  OpContext sub(std::vector<int> members, int scratch_base = 0);
  size_t chunk_bytes() const { return chunk_bytes_; }
  // The operation's sequence number on its channel: the same in every run of the same program.
  uint64_t seq() const { return header_.seq; }
  // GEOCCL_TRACE: the rank's trace (null: off). Sub-contexts share it; with it, every send and
  // receive becomes a span on its peer's track (from posting to completion), with its bytes.
  void set_trace(metrics::TraceWriter* w) { trace_ = w; }
  metrics::TraceWriter* trace() const { return trace_; }

  // One frame each. `offset` is informational (position in the operation's byte stream).
  RequestPtr send(int peer, std::span<const uint8_t> data, uint64_t offset = 0);
  // A frame of exactly dst.size() bytes (wait() fails the group with kMismatch otherwise).
  RequestPtr recv(int peer, std::span<uint8_t> dst, uint64_t offset = 0);
  // A frame of at most dst.size() bytes; Request::bytes tells its size.
  RequestPtr recv_upto(int peer, std::span<uint8_t> dst, uint64_t offset = 0);
  // A frame of exactly dst.size() bytes, reduced into dst (dst = dst op frame). Where the peer's
  // transport can, it reduces straight from where the bytes arrive (shared memory); otherwise
  // the frame lands in `staging` (dst.size() bytes) and wait() reduces it. dst is neither read
  // nor written by anyone else until wait() has returned.
  RequestPtr recv_reduce(int peer, std::span<uint8_t> dst, std::span<uint8_t> staging, DataType t,
                         ReduceOp op, uint64_t offset = 0);
  // A frame of exactly dst.size() bytes from `from`, sent on to `to` as it arrives, at `offset`
  // both ways (Transport::recv_forward: reduced with an operand, or copied to dst as well). Only
  // where forwards_around(); the sends to `to` posted before it leave first.
  transport::Transport::Forwarded recv_forward(int from, int to, std::span<uint8_t> dst,
                                               const transport::Transport::Forwarding& how, uint64_t offset = 0);
  // Whether every member of this context is served by one device that forwards (shared memory on
  // one host), with at least 3 members. Then every member finds the same, so a ring may order
  // its frames differently from the unfused form and both ends of each pair still agree: "served
  // by this rank's shared-memory device" is the same-host relation (Router::use moves only pairs
  // of different domains, both ends alike), so either all members share one host or every member
  // has a peer on another. The frame header's offset is not compared (protocol/frame.h), so a
  // disagreement would go unnoticed where the chunks are of equal size: what breaks the relation
  // for a while (the transport probe) forbids forwarding.
  bool forwards_around() const;
  // No forwarding in this context and the ones made from it: for an operation that runs while
  // ranks move pairs between devices one by one (the start-up's transport probe), when the
  // members' views of who is on which device may differ.
  void forbid_forwarding() { forwarding_ = false; }
  // A buffer split into chunk_bytes() frames.
  void send_chunked(int peer, std::span<const uint8_t> data, std::vector<RequestPtr>* out);
  // send_chunked to several peers at once, chunk j to every peer before chunk j + 1: each peer's
  // frames are the same as send_chunked's, and every peer has frames queued from the start (a
  // transport that narrows each peer's striping while several peers are busy sees them all).
  using PeerBytes = std::pair<int, std::span<const uint8_t>>;
  void send_chunked_to_each(std::span<const PeerBytes> parts, std::vector<RequestPtr>* out);
  void recv_chunked(int peer, std::span<uint8_t> dst, std::vector<RequestPtr>* out);

  // Throws the request's Error, or Error(kTimeout) (after aborting the group). Finishes what the
  // receive promised: checks an exact size, reduces a staged recv_reduce.
  void wait(const RequestPtr& r);
  void wait_all(std::vector<RequestPtr>& rs);

  // Fails the whole group (every pending request on this rank, and every peer) with `code`, for
  // an error found outside the transport. Only the group's first failure is kept.
  void abort(ErrorCode code, const std::string& message) { transport_.abort(code, message); }

  // Uninitialized scratch memory; `slot` selects one of several independent buffers.
  std::span<uint8_t> scratch(size_t bytes, int slot = 0) {
    return scratch_.get(bytes, scratch_base_ + slot);
  }

 private:
  transport::Transport& transport_;
  runtime::Progress& progress_;
  std::vector<int> members_;
  int my_index_ = 0;
  protocol::FrameHeader header_;
  Clock::time_point deadline_;
  size_t chunk_bytes_;
  ScratchPool& scratch_;
  int scratch_base_ = 0;
  bool forwarding_ = true;
  std::vector<RequestPtr> outstanding_;
  // What wait() still has to do for a receive, shared by this context and its sub() contexts (a
  // request may be waited for through another context than the one that posted it).
  struct Finish {
    size_t exact = 0;
    std::span<uint8_t> dst, staging;  // staging set: reduce it into dst
    DataType dtype{};
    ReduceOp op{};
  };
  struct Finishes {
    std::mutex mu;
    std::unordered_map<const transport::Request*, Finish> of;
  };
  std::shared_ptr<Finishes> finishes_ = std::make_shared<Finishes>();
  void finish(const RequestPtr& r);
  // Tracing: requests this context posted whose span is not written yet.
  struct Posted {
    const transport::Request* req;
    int peer;  // global rank
    size_t bytes;
    int64_t t0;
    bool send;
  };
  metrics::TraceWriter* trace_ = nullptr;
  std::vector<Posted> posted_;
  void trace_posted(const RequestPtr& r, int peer, size_t bytes, bool send);
  void trace_done(const transport::Request* r);  // null: every request left
};

// Byte helpers for typed buffers.
inline std::span<uint8_t> bytes_of(void* p, size_t count, DataType t) {
  return {static_cast<uint8_t*>(p), count * dtype_size(t)};
}
inline std::span<const uint8_t> bytes_of(const void* p, size_t count, DataType t) {
  return {static_cast<const uint8_t*>(p), count * dtype_size(t)};
}

}  // namespace geoccl::collectives
