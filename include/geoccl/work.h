// Work: the handle of one asynchronous operation.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

#include "geoccl/error.h"

namespace geoccl {

namespace detail {
struct WorkState;
}

// A Work completes exactly once, with success or an Error. The collectives of one priority class
// complete in the order they were issued; a send or receive completes when its own message has
// gone or arrived (a receive still waiting for its sender holds back no later Work). The user's
// buffers belong to the library from the call that issued the operation until the Work
// completes; after that they are never touched again.
//
// Callbacks (on_complete) never run on the thread that runs collectives: they run on the
// communicator's completion threads, so a callback may issue operations and wait on them (nested
// too), and a slow callback delays no other operation. Callbacks of successive Works start in
// completion order, one after another; when one takes longer than about a millisecond or blocks
// in wait(), the next ones start on another thread meanwhile (so only their start is ordered).
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> s) : state_(std::move(s)) {}

  // Blocks until completion and until the callbacks registered before completion have returned
  // (their effects are visible after wait(), as with torch's futures and Gloo's Works). Throws the
  // operation's Error on failure, Error(kTimeout) if `timeout` passes first (the operation itself
  // keeps running until its own deadline). A callback must not wait() on its own Work.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  // True once completed (successfully or not), possibly before the callbacks have run; never
  // blocks.
  bool test() const;
  // True when completed successfully.
  bool ok() const;
  // The failure, or nullptr while pending or on success.
  std::exception_ptr error() const;
  // Runs `cb` once on completion: on a completion thread, or immediately on this thread if the
  // Work has completed already. `cb` receives nullptr on success. An exception it throws is
  // logged and dropped.
  void on_complete(std::function<void(std::exception_ptr)> cb) const;
  bool valid() const { return state_ != nullptr; }
  // Communicator::recv_any: the rank the message came from, once completed successfully; -1
  // before, on failure, and for every other operation.
  int source() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace geoccl
