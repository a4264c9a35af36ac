// CompletionPool: the threads on which a communicator's Work callbacks (and the torch futures
// they complete) run, so that no user code ever runs on the thread that drives collectives.
//
// Jobs start in FIFO order. Normally one job runs at a time, so callbacks of successive Works run
// one after another in completion order. A job may block (wait on another Work, a torch future,
// a lock) or just take long: when the job at the head of the queue has waited `grace` while
// another job is running, or at once when the running job blocks in Work::wait, the next job
// starts on another thread. A thread is started whenever a job starts and no other thread is
// idle, so one is always ready to take over; threads are kept until the pool is destroyed, at most
// `max_threads` (then jobs wait for a thread to come free: more than max_threads - 1 callbacks
// blocked on each other at once deadlock).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

namespace geoccl::detail {

class CompletionPool {
  struct State;

 public:
  static constexpr std::chrono::microseconds kDefaultGrace{1000};
  static constexpr size_t kDefaultMaxThreads = 64;

  explicit CompletionPool(std::chrono::microseconds grace = kDefaultGrace,
                          size_t max_threads = kDefaultMaxThreads);
  // Runs every job still queued, then joins the threads. May run on one of the pool's own
  // threads (a callback that drops the last reference to its communicator): that thread finishes
  // its job and exits on its own.
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  // Queues `job`. Exceptions it throws are logged and dropped. Runs it on the calling thread only
  // when no thread can be started at all.
  void post(std::function<void()> job);

  // Threads started so far (tests).
  size_t threads() const;

  // While one lives on a pool thread, that thread counts as blocked: the next job starts at once
  // on another thread instead of after the grace period. Nothing on other threads.
  class Blocking {
   public:
    Blocking();
    ~Blocking();
    Blocking(const Blocking&) = delete;
    Blocking& operator=(const Blocking&) = delete;

   private:
    State* state_;
  };

 private:
  std::shared_ptr<State> state_;
  static thread_local State* current_;  // the pool whose job this thread runs, if any
};

// Runs `fn`; logs and drops what it throws (user callbacks must not end a completion thread).
void run_logging_errors(const std::function<void()>& fn);

}  // namespace geoccl::detail
