// The transport boundary: what collectives may ask of the network. Non-blocking by contract:
// send() and recv() only queue work and return a Request that completes later (on the I/O
// thread); the caller waits through the Progress object it gave the transport. A transport knows
// frames and peers, never what a collective is.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/communicator.h"
#include "geoccl/error.h"
#include "protocol/frame.h"

namespace geoccl::transport {

struct Failure {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
};

// One queued send or receive. `failure` is written before `done` is released.
struct Request {
  std::atomic<bool> done{false};
  Failure failure;
  bool ok() const { return failure.code == ErrorCode::kOk; }
};
using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues header `h` (payload_len is set here) followed by `payload` for `peer`. The payload is
  // sent straight from the caller's memory, which must stay valid and unchanged until the request
  // completes. Frames to one peer leave in posting order.
  virtual RequestPtr send(int peer, const protocol::FrameHeader& h,
                          std::span<const uint8_t> payload) = 0;
  // Receives the next data frame from `peer` straight into `dst`. Receives from one peer are
  // matched in posting order. A frame whose header differs from `expect` (see
  // protocol::describe_mismatch) or whose payload is not exactly dst.size() bytes fails the whole
  // group with kMismatch.
  virtual RequestPtr recv(int peer, const protocol::FrameHeader& expect,
                          std::span<uint8_t> dst) = 0;
  // Announces the collective this rank runs next (header fields as its frames will carry them).
  // A data frame that arrives before its receive is posted is checked against it, so ranks that
  // called different collectives fail with kMismatch instead of waiting for each other.
  virtual void begin_operation(const protocol::FrameHeader& h) = 0;
  // Fails the group: every pending and future request completes with (code, message), and every
  // peer is told so that it fails too. Only the first failure is kept.
  virtual void abort(ErrorCode code, const std::string& message) = 0;
  // The first failure, if any.
  virtual std::optional<Failure> failure() const = 0;
  virtual std::vector<PeerStats> stats() const = 0;
};

}  // namespace geoccl::transport
