// Progress: where a waiting thread sleeps until the I/O thread reports that something completed.
// notify() is cheap enough to call after every completed request.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace geoccl::runtime {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  void notify() {
    // Completions are published through atomics outside this mutex; passing through it orders
    // the notification after a waiter's predicate check, so no wake-up is lost.
    { std::lock_guard lk(mu_); }
    cv_.notify_all();
  }
  // Waits until pred() is true (returns true) or `deadline` passes (returns pred()).
  template <class Pred>
  bool wait_until(Pred pred, Clock::time_point deadline) {
    std::unique_lock lk(mu_);
    return cv_.wait_until(lk, deadline, pred);
  }
  // For code that shares the lock with its own state (the communicator's queue).
  std::mutex& mutex() { return mu_; }
  std::condition_variable& cv() { return cv_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace geoccl::runtime
