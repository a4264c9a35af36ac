// EventLoop: one thread, one epoll set. The only owner of sockets once they are set up: handlers
// run on the loop thread; other threads hand it work with post().
//
// Failures reach the owner through its error handler (set_error_handler), never by ending the
// process or by a silent stop:
//  - epoll_wait fails: the loop is dead (alive() false). It reports that once, then drops what
//    was posted and not run; run_sync throws Error(kIo) and post runs nothing from then on.
//  - an fd handler, timer or posted task throws: reported, and the loop keeps running.
//  - modify_fd / remove_fd fail: reported (add_fd throws instead).
// Timers have microsecond resolution (epoll_pwait2).
#pragma once

#include <sys/epoll.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace geoccl::runtime {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using FdHandler = std::function<void(uint32_t events)>;
  using TimerId = uint64_t;
  using ErrorHandler = std::function<void(const std::string& what)>;

  // Starts the loop thread. Throws Error(kIo) if epoll/eventfd cannot be created.
  explicit EventLoop(const char* name = "geoccl-io");
  // Stops the thread; handlers still registered are dropped without being called.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Any thread. Called on the loop thread with what went wrong (see above): once when the loop
  // dies, and for every exception a handler throws or failed modify_fd / remove_fd. An owner
  // fails its group from here. Without one, errors are logged. A handler set on a loop that
  // has already died is told of the death at once, on the calling thread.
  void set_error_handler(ErrorHandler h);
  // False once the loop has died (or is being destroyed).
  bool alive() const { return !dead_.load(); }

  // Loop thread only (or any thread once the loop is dead). `events` is an EPOLL* mask
  // (level-triggered). add_fd throws Error(kIo) when epoll refuses the fd; modify_fd reports a
  // failure through the error handler; remove_fd reports one, except for an fd that is not
  // registered or already closed (ENOENT, EBADF).
  void add_fd(int fd, uint32_t events, FdHandler h);
  void modify_fd(int fd, uint32_t events);
  void remove_fd(int fd);
  // Loop thread only. Runs `f` once at `when` (or soon after).
  TimerId add_timer(Clock::time_point when, std::function<void()> f);
  void cancel_timer(TimerId id);

  // Any thread: runs `f` on the loop thread, in posting order. Returns false, and drops `f`
  // without running it, when the loop is dead.
  bool post(std::function<void()> f);
  // Any thread but the loop's: posts `f` and waits until it has run; what `f` throws is thrown
  // here. Throws Error(kIo) without running `f` when the loop is dead or dies first. Once it has
  // thrown that, the loop thread touches nothing again: the owner may clean up (remove_fd,
  // close) on its own thread.
  void run_sync(std::function<void()> f);
  // Runs `f` where the loop's state may be touched and returns when it has run: inline on the
  // loop thread, through run_sync from another thread, inline once the loop is dead (its thread
  // touches nothing any more). For owners' setup and teardown, which must not throw.
  void run_owned(const std::function<void()>& f);
  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  void run();
  void wake();
  void drain_posted();
  // The time until the first timer (false: none).
  bool next_timeout(timespec* ts);
  // epoll_pwait2 (nanosecond timeouts: timers keep microsecond resolution, which QUIC's pacing
  // needs), or epoll_wait with the timeout rounded up to milliseconds on kernels before 5.11.
  int wait(epoll_event* events, int max);
  void fire_timers();
  // Runs `f`, reporting what it throws as coming from `what`.
  template <class F>
  void guarded(const char* what, F&& f);
  void report(const std::string& what);
  void tell(const ErrorHandler& call, const std::string& what);
  // Loop thread: reports `why` once, then close_queue().
  void die(const std::string& why);
  // Marks the loop dead and drops what was posted and not run.
  void close_queue();
  std::string death() const;

  std::string name_;
  bool pwait2_ = true;
  int epfd_ = -1;
  int wakefd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> dead_{false};  // written under post_mu_
  mutable std::mutex error_mu_;
  ErrorHandler on_error_;
  std::string death_;  // why the loop died; "" while it runs
  std::unordered_map<int, std::shared_ptr<FdHandler>> handlers_;
  std::multimap<Clock::time_point, TimerId> timer_order_;
  std::unordered_map<TimerId, std::pair<Clock::time_point, std::function<void()>>> timers_;
  TimerId next_timer_ = 1;
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;
  std::vector<std::function<void()>> batch_;  // loop thread: the tasks drain_posted runs
  std::thread::id thread_id_;
  std::thread thread_;
};

}  // namespace geoccl::runtime
