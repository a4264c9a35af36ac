// The shared state behind a Work handle.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace geoccl::detail {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;     // the operation finished (test() is true from here on)
  bool settled = false;  // ... and its callbacks have run: wait() returns from here on
  std::exception_ptr error;
  int source = -1;  // recv_any: the sender (set before complete())
  std::vector<std::function<void(std::exception_ptr)>> callbacks;

  // Called once, by the worker thread; runs the callbacks on this thread, then releases wait().
  // A callback must not wait() on its own Work.
  void complete(std::exception_ptr e);
};

}  // namespace geoccl::detail
