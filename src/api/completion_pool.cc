#include "api/completion_pool.h"

#include <cxxabi.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "core/logging.h"

namespace geoccl::detail {

using Clock = std::chrono::steady_clock;

// Shared by the pool and its threads: a thread outlives the pool when the pool is destroyed from
// one of its own jobs.
struct CompletionPool::State {
  struct Job {
    std::function<void()> fn;
    Clock::time_point queued;
  };

  std::chrono::microseconds grace;
  size_t max_threads;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::vector<std::thread> threads;
  size_t started = 0;  // threads ever started
  size_t idle = 0;     // threads waiting for a job
  size_t running = 0;  // jobs running and not blocked
  bool stop = false;

  // Starts a thread if the bound allows; false when none could be started.
  bool spawn_locked(const std::shared_ptr<State>& self);
  static void main(std::shared_ptr<State> self);
};

void run_logging_errors(const std::function<void()>& fn) {
  try {
    fn();
  } catch (abi::__forced_unwind&) {
    throw;  // the thread is being ended (pthread_exit, e.g. by Python at exit): let it
  } catch (const std::exception& e) {
    GEOCCL_LOG(kError, "a completion callback threw: " << e.what());
  } catch (...) {
    GEOCCL_LOG(kError, "a completion callback threw");
  }
}

thread_local CompletionPool::State* CompletionPool::current_ = nullptr;

bool CompletionPool::State::spawn_locked(const std::shared_ptr<State>& self) {
  if (threads.size() >= max_threads) return false;
  try {
    threads.emplace_back([self] { main(self); });
  } catch (const std::system_error& e) {
    GEOCCL_LOG(kWarn, "completion pool: cannot start a thread: " << e.what());
    return false;
  }
  ++started;
  ++idle;  // counted idle until it looks at the queue, so one post does not start two
  return true;
}

void CompletionPool::State::main(std::shared_ptr<State> self) {
  State& s = *self;
  current_ = &s;
  std::unique_lock lk(s.mu);
  --s.idle;
  for (;;) {
    if (!s.jobs.empty()) {
      const auto due = s.jobs.front().queued + s.grace;
      // Draining at destruction keeps the order too: a job still starts only when the one
      // before it returned or blocked, or after the grace.
      if (s.running == 0 || Clock::now() >= due) {
        Job job = std::move(s.jobs.front());
        s.jobs.pop_front();
        ++s.running;
        if (s.idle == 0) s.spawn_locked(self);  // the next job must not wait for this one
        lk.unlock();
        run_logging_errors(job.fn);
        job.fn = nullptr;  // the callback's captures go before the lock is taken again
        lk.lock();
        --s.running;
        s.cv.notify_all();
        continue;
      }
      ++s.idle;
      s.cv.wait_until(lk, due);
      --s.idle;
      continue;
    }
    if (s.stop) break;
    ++s.idle;
    s.cv.wait(lk);
    --s.idle;
  }
  current_ = nullptr;
}

CompletionPool::CompletionPool(std::chrono::microseconds grace, size_t max_threads)
    : state_(std::make_shared<State>()) {
  state_->grace = grace;
  state_->max_threads = std::max<size_t>(max_threads, 2);
}

CompletionPool::~CompletionPool() {
  std::unique_lock lk(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  // Threads drain the queue before they exit; a job run while draining may start another thread.
  while (!state_->threads.empty()) {
    std::vector<std::thread> ts;
    ts.swap(state_->threads);
    lk.unlock();
    for (auto& t : ts) {
      if (t.get_id() == std::this_thread::get_id())
        t.detach();  // destroyed from its own job: it exits when that job returns
      else
        t.join();
    }
    lk.lock();
  }
  // Only possible when no thread could ever be started: run what is left here.
  while (!state_->jobs.empty()) {
    auto job = std::move(state_->jobs.front());
    state_->jobs.pop_front();
    lk.unlock();
    run_logging_errors(job.fn);
    lk.lock();
  }
}

void CompletionPool::post(std::function<void()> job) {
  {
    std::lock_guard lk(state_->mu);
    State& s = *state_;
    const bool drained = s.stop && s.threads.empty();  // the pool is going: nobody would run it
    if (!drained && (s.idle > 0 || s.spawn_locked(state_) || !s.threads.empty())) {
      s.jobs.push_back({std::move(job), Clock::now()});
      job = nullptr;
    }
  }
  state_->cv.notify_all();
  if (job) run_logging_errors(job);
}

size_t CompletionPool::threads() const {
  std::lock_guard lk(state_->mu);
  return state_->started;
}

CompletionPool::Blocking::Blocking() : state_(current_) {
  if (!state_) return;
  std::lock_guard lk(state_->mu);
  --state_->running;  // the idle thread kept ready (see main) may take the next job now
  state_->cv.notify_all();
}

CompletionPool::Blocking::~Blocking() {
  if (!state_) return;
  std::lock_guard lk(state_->mu);
  ++state_->running;
}

}  // namespace geoccl::detail
