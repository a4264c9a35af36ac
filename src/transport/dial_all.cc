#include "transport/dial_all.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace geoccl::transport {

void dial_all(const std::vector<int>& peers, const Device::Poll& poll,
              const std::function<void(int peer, const std::atomic<bool>& stop)>& dial) {
  if (peers.empty()) return;
  std::atomic<bool> stop{false};
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable done_cv;
  const size_t width = std::min(kDialsAtOnce, peers.size());
  size_t running = width;  // threads not yet ended; guarded by mu
  std::exception_ptr failure;
  auto work = [&] {
    for (size_t i; !stop.load() && (i = next.fetch_add(1)) < peers.size();) {
      try {
        dial(peers[i], stop);
      } catch (...) {
        std::lock_guard lk(mu);
        if (!failure) failure = std::current_exception();
        stop.store(true);
      }
    }
    std::lock_guard lk(mu);
    if (--running == 0) done_cv.notify_all();
  };
  std::vector<std::thread> threads;
  threads.reserve(width);
  for (size_t t = 0; t < width; ++t) threads.emplace_back(work);
  std::exception_ptr poll_failure;
  {
    std::unique_lock lk(mu);
    while (running > 0) {
      done_cv.wait_for(lk, std::chrono::milliseconds(100));
      if (running == 0 || !poll || poll_failure || stop.load()) continue;
      lk.unlock();
      try {
        poll();
      } catch (...) {
        poll_failure = std::current_exception();
        stop.store(true);
      }
      lk.lock();
    }
  }
  for (auto& t : threads) t.join();
  if (poll_failure) std::rethrow_exception(poll_failure);
  if (failure) {
    if (poll) poll();  // a peer that refused us: its own reason, in the store, says more
    std::rethrow_exception(failure);
  }
}

}  // namespace geoccl::transport
