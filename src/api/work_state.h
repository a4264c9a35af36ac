// The shared state behind a Work handle.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace geoccl::detail {

class CompletionPool;

struct WorkState : std::enable_shared_from_this<WorkState> {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;     // the operation finished (test() is true from here on)
  bool settled = false;  // ... and its callbacks have run: wait() returns from here on
  std::exception_ptr error;
  int source = -1;  // recv_any: the sender (set before complete())
  std::vector<std::function<void(std::exception_ptr)>> callbacks;

  // Called once, by the thread that ran the operation: marks it done at once, then runs the
  // callbacks registered so far as one job of `pool` and releases wait() after them (at once when
  // there are none). `pool` null: runs them on this thread (a thread that may run user code).
  void complete(std::exception_ptr e, CompletionPool* pool);

 private:
  void run_callbacks(std::vector<std::function<void(std::exception_ptr)>>& cbs);
};

}  // namespace geoccl::detail
