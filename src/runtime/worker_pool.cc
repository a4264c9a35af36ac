#include "runtime/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <exception>

#include "core/logging.h"

namespace geoccl::runtime {

namespace {
thread_local int worker_index = -1;
}  // namespace

WorkerPool::WorkerPool(int threads, const char* name) {
  threads_.reserve(static_cast<size_t>(std::max(threads, 1)));
  for (int i = 0; i < std::max(threads, 1); ++i)
    threads_.emplace_back([this, name, i] {
      pthread_setname_np(pthread_self(), name);
      run(i);
    });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

int WorkerPool::default_threads() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores / 2, 1, 4);
}

std::shared_ptr<WorkerPool> WorkerPool::shared() {
  static std::mutex mu;
  static std::weak_ptr<WorkerPool> pool;
  std::lock_guard<std::mutex> lock(mu);
  auto p = pool.lock();
  if (!p) {
    p = std::make_shared<WorkerPool>(default_threads(), "geoccl-work");
    pool = p;
  }
  return p;
}

int WorkerPool::index() { return worker_index; }

void WorkerPool::run(int index) {
  worker_index = index;
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing is left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      GEOCCL_LOG(kError, "a worker's job threw: " << e.what());
    } catch (...) {
      GEOCCL_LOG(kError, "a worker's job threw");
    }
  }
}

}  // namespace geoccl::runtime
