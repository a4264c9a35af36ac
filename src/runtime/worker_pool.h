// WorkerPool: a few threads that run CPU-heavy jobs (sealing and opening large frames) off an
// event loop's thread, so that the loop keeps reading and writing sockets meanwhile. Jobs run in
// submission order, each on whichever thread is free; a job must not block or throw (what one
// throws is logged and dropped). Destruction runs what is still queued, then joins: owners cancel
// their jobs first (a cancelled job returns at once).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace geoccl::runtime {

class WorkerPool {
 public:
  // `threads` >= 1.
  WorkerPool(int threads, const char* name);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Any thread.
  void submit(std::function<void()> job);
  int threads() const { return static_cast<int>(threads_.size()); }
  // On one of a pool's threads: its index there, 0 .. threads() - 1 (so a job can use state
  // kept per worker); -1 elsewhere.
  static int index();

  // Workers for a loop on this host: half its cores, 1 to 4 (two ranks on a 2-core host share
  // them with their loops and collectives; a big host gives each loop a few).
  static int default_threads();
  // The process's pool of default_threads() workers, made when first asked for and gone with
  // its last holder: every device of a process (a rank's priority classes, the ranks a test
  // runs in one process) shares it.
  static std::shared_ptr<WorkerPool> shared();

 private:
  void run(int index);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace geoccl::runtime
