// The transport boundary: what collectives may ask of the network. Non-blocking by contract:
// send() and recv() only queue work and return a Request that completes later (on the I/O
// thread); the caller waits through the Progress object it gave the transport. A transport knows
// frames and peers, never what a collective is.
//
// Collectives see one Transport for the whole group: the Router (router.h), which sends each
// peer's frames over the device (tcp/, shm/, ...) chosen for that peer (device.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/error.h"
#include "geoccl/types.h"
#include "protocol/frame.h"
#include "transport/link_stats.h"

namespace geoccl::transport {

struct Failure {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  // The peers the failure is about: the one lost, unresponsive or unreachable, whether this rank
  // found it or a peer's abort frame named it. Empty when the failure is not about a peer (a
  // mismatch, a local error, abort()).
  std::vector<int> ranks;
};

// Failure::ranks of a failure with `code` found on the link to `peer`: {peer} when the code says
// the peer is lost, unresponsive or unreachable, else none (a protocol error, a local error).
inline std::vector<int> failed_peers(ErrorCode code, int peer) {
  if (code == ErrorCode::kPeerLost || code == ErrorCode::kPeerUnresponsive ||
      code == ErrorCode::kPeerUnreachable)
    return {peer};
  return {};
}

// One queued send or receive. Completes in up to two steps, each published with release order
// after `failure` and `bytes` are written:
//  - `done`: a send's buffer is reusable (the transport no longer reads it); a receive's payload
//    is in its destination, `bytes` long. A failed request is `done` with `failure` set.
//  - `delivered`: sends only: the peer has received the frame (it acknowledged it). Set at or
//    after `done`; never set for a failed request. A transport that must keep data until the
//    peer acknowledges it keeps its own copy (or the peer has it already), so `done` never waits
//    a round trip.
struct Request {
  std::atomic<bool> done{false};
  std::atomic<bool> delivered{false};
  size_t bytes = 0;  // receives: the payload's actual size (at most the destination's)
  Failure failure;
  bool ok() const { return failure.code == ErrorCode::kOk; }
};
using RequestPtr = std::shared_ptr<Request>;

// Completes `req` (null: nothing) with `f` (kOk: success). Loop thread of the transport.
inline void complete(const RequestPtr& req, const Failure& f = {}) {
  if (!req) return;
  req->failure = f;
  req->done.store(true, std::memory_order_release);
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues header `h` (payload_len is set here) followed by `payload` for `peer`. The payload is
  // sent straight from the caller's memory, which must stay valid and unchanged until the request
  // is done. Frames to one peer leave in posting order.
  virtual RequestPtr send(int peer, const protocol::FrameHeader& h,
                          std::span<const uint8_t> payload) = 0;
  // Receives the next data frame from `peer` straight into `dst`, which bounds its size; the
  // request reports the actual size. Receives from one peer are matched in posting order. A
  // frame whose header differs from `expect` (see protocol::describe_mismatch) or whose payload
  // is larger than dst.size() fails the whole group with kMismatch.
  virtual RequestPtr recv(int peer, const protocol::FrameHeader& expect,
                          std::span<uint8_t> dst) = 0;
  // Receives the next data frame from `peer` and reduces it into `dst` (dst = dst op payload;
  // exactly dst.size() bytes) where the peer's device can do so from where the bytes arrive;
  // nullptr where it cannot (then recv() into scratch and reduce).
  virtual RequestPtr recv_reduce(int /*peer*/, const protocol::FrameHeader& /*expect*/,
                                 std::span<uint8_t> /*dst*/, DataType /*dtype*/, ReduceOp /*op*/) {
    return nullptr;
  }
  // Receives the next data frame from `from` (exactly dst.size() bytes) and sends it on to `to`
  // as its next data frame (header `h`), in one pass from where the bytes arrive to where the
  // bytes for `to` leave. With `reduce`, the frame sent is `operand op payload` (`payload op
  // operand` with payload_first), and each byte of dst is left as it was or holds that result
  // (where the next hop was not ready for it, it waited there; operand may be dst itself);
  // without, the frame goes on as it came and dst receives it too. Only where
  // forwards(from, to, channel) (the device serving both peers can: shm); {} elsewhere.
  struct Forwarded {
    RequestPtr recv, send;
  };
  struct Forwarding {
    bool reduce = false;
    bool payload_first = false;
    DataType dtype = DataType::kUInt8;
    ReduceOp op = ReduceOp::kSum;
    std::span<const uint8_t> operand;  // reduce: dst.size() bytes, read only; dst itself or apart
  };
  virtual Forwarded recv_forward(int /*from*/, const protocol::FrameHeader& /*expect*/, std::span<uint8_t> /*dst*/,
                                 int /*to*/, const protocol::FrameHeader& /*h*/, const Forwarding& /*how*/) {
    return {};
  }
  virtual bool forwards(int /*from*/, int /*to*/, uint8_t /*channel*/) const { return false; }
  // Announces the collective this rank runs next (header fields as its frames will carry them).
  // A data frame that arrives before its receive is posted is checked against it, so ranks that
  // called different collectives fail with kMismatch instead of waiting for each other.
  virtual void begin_operation(const protocol::FrameHeader& h) = 0;
  // Fails the group: every pending and future request completes with (code, message), and every
  // peer is told so that it fails too. Only the first failure is kept.
  virtual void abort(ErrorCode code, const std::string& message) = 0;
  // The first failure, if any.
  virtual std::optional<Failure> failure() const = 0;
  virtual std::vector<LinkStats> stats() const = 0;
};

}  // namespace geoccl::transport
