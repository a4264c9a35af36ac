// EventLoop: one thread, one epoll set. The only owner of sockets once they are set up: handlers
// run on the loop thread; other threads hand it work with post().
#pragma once

#include <sys/epoll.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace geoccl::runtime {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using FdHandler = std::function<void(uint32_t events)>;
  using TimerId = uint64_t;

  // Starts the loop thread. Throws Error(kIo) if epoll/eventfd cannot be created.
  explicit EventLoop(const char* name = "geoccl-io");
  // Stops the thread; handlers still registered are dropped without being called.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Loop thread only. `events` is an EPOLL* mask (level-triggered).
  void add_fd(int fd, uint32_t events, FdHandler h);
  void modify_fd(int fd, uint32_t events);
  void remove_fd(int fd);
  // Loop thread only. Runs `f` once at `when` (or soon after).
  TimerId add_timer(Clock::time_point when, std::function<void()> f);
  void cancel_timer(TimerId id);

  // Any thread: runs `f` on the loop thread, in posting order.
  void post(std::function<void()> f);
  // Any thread but the loop's: posts `f` and waits until it has run.
  void run_sync(std::function<void()> f);
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  void run();
  void wake();
  void drain_posted();
  int next_timeout_ms();
  void fire_timers();

  int epfd_ = -1;
  int wakefd_ = -1;
  std::atomic<bool> stop_{false};
  std::unordered_map<int, std::shared_ptr<FdHandler>> handlers_;
  std::multimap<Clock::time_point, TimerId> timer_order_;
  std::unordered_map<TimerId, std::pair<Clock::time_point, std::function<void()>>> timers_;
  TimerId next_timer_ = 1;
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;
  std::thread::id thread_id_;
  std::thread thread_;
};

}  // namespace geoccl::runtime
