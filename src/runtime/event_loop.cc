#include "runtime/event_loop.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "core/logging.h"
#include "geoccl/error.h"

namespace geoccl::runtime {

EventLoop::EventLoop(const char* name) : name_(name) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakefd_;
  if (epfd_ < 0 || wakefd_ < 0 || epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev) != 0) {
    const int e = errno;
    if (epfd_ >= 0) close(epfd_);
    if (wakefd_ >= 0) close(wakefd_);
    throw Error(ErrorCode::kIo, std::string("event loop: ") + std::strerror(e));
  }
  std::promise<void> started;
  thread_ = std::thread([this, &started, name] {
    thread_id_ = std::this_thread::get_id();
    pthread_setname_np(pthread_self(), name);
    started.set_value();
    run();
  });
  started.get_future().wait();
}

EventLoop::~EventLoop() {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
  close(wakefd_);
  close(epfd_);
}

void EventLoop::add_fd(int fd, uint32_t events, FdHandler h) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw Error(ErrorCode::kIo, std::string("epoll add: ") + std::strerror(errno));
  handlers_[fd] = std::make_shared<FdHandler>(std::move(h));
}

void EventLoop::modify_fd(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev) != 0)
    report("epoll modify of fd " + std::to_string(fd) + ": " + std::strerror(errno));
}

void EventLoop::remove_fd(int fd) {
  if (epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr) != 0 && errno != ENOENT && errno != EBADF)
    report("epoll remove of fd " + std::to_string(fd) + ": " + std::strerror(errno));
  handlers_.erase(fd);
}

EventLoop::TimerId EventLoop::add_timer(Clock::time_point when, std::function<void()> f) {
  const TimerId id = next_timer_++;
  timer_order_.emplace(when, id);
  timers_.emplace(id, std::make_pair(when, std::move(f)));
  return id;
}

void EventLoop::cancel_timer(TimerId id) {
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  auto [lo, hi] = timer_order_.equal_range(it->second.first);
  for (auto o = lo; o != hi; ++o)
    if (o->second == id) {
      timer_order_.erase(o);
      break;
    }
  timers_.erase(it);
}

void EventLoop::set_error_handler(ErrorHandler h) {
  std::unique_lock lk(error_mu_);
  on_error_ = std::move(h);
  if (death_.empty() || !on_error_) return;
  const ErrorHandler call = on_error_;
  const std::string why = death_;
  lk.unlock();
  tell(call, why);
}

std::string EventLoop::death() const {
  std::lock_guard lk(error_mu_);
  return death_.empty() ? "stopped" : death_;
}

void EventLoop::tell(const ErrorHandler& call, const std::string& what) {
  if (!call) {
    GEOCCL_LOG(kError, "event loop " << name_ << ": " << what);
    return;
  }
  try {
    call(what);
  } catch (const std::exception& e) {
    GEOCCL_LOG(kError, "event loop " << name_ << ": the error handler threw (" << e.what() << ") on: " << what);
  } catch (...) {
    GEOCCL_LOG(kError, "event loop " << name_ << ": the error handler threw on: " << what);
  }
}

void EventLoop::report(const std::string& what) {
  ErrorHandler call;
  {
    std::lock_guard lk(error_mu_);
    call = on_error_;
  }
  tell(call, what);
}

template <class F>
void EventLoop::guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    report(std::string(what) + " threw: " + e.what());
  } catch (...) {
    report(std::string(what) + " threw a non-standard exception");
  }
}

void EventLoop::die(const std::string& why) {
  ErrorHandler call;
  {
    std::lock_guard lk(error_mu_);
    death_ = why;
    call = on_error_;
  }
  tell(call, why);
  close_queue();
}

void EventLoop::close_queue() {
  // After this, a run_sync caller wakes up and may clean up behind the loop.
  std::vector<std::function<void()>> dropped;  // destroyed outside the lock
  std::lock_guard lk(post_mu_);
  dead_.store(true);
  dropped.swap(posted_);
}

bool EventLoop::post(std::function<void()> f) {
  std::function<void()> dropped;  // destroyed outside the lock
  bool queued = false;
  {
    std::lock_guard lk(post_mu_);
    queued = !dead_.load();
    if (queued)
      posted_.push_back(std::move(f));
    else
      dropped = std::move(f);
  }
  if (queued) wake();
  return queued;
}

void EventLoop::run_sync(std::function<void()> f) {
  // The task owns the promise: a dead loop that drops the task breaks it, which wakes us.
  auto done = std::make_shared<std::promise<void>>();
  auto result = done->get_future();
  post([&f, done] {
    try {
      f();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  done.reset();
  try {
    result.get();
  } catch (const std::future_error&) {
    throw Error(ErrorCode::kIo, "event loop " + name_ + " is dead: " + death());
  }
}

void EventLoop::run_owned(const std::function<void()>& f) {
  if (in_loop_thread() || !alive()) return f();
  try {
    run_sync(f);
  } catch (const Error& e) {
    if (alive()) throw;  // f itself threw
    f();                 // the loop died before running it: its thread has stopped
  }
}

void EventLoop::wake() {
  const uint64_t one = 1;
  // A full eventfd counter still wakes the loop; the result does not matter.
  [[maybe_unused]] ssize_t n = write(wakefd_, &one, sizeof one);
}

void EventLoop::drain_posted() {
  // The batch's vector is kept and swapped back in: posting reuses its capacity, so a steady
  // stream of posts allocates no queue storage.
  {
    std::lock_guard lk(post_mu_);
    batch_.swap(posted_);
  }
  for (auto& f : batch_) guarded("a posted task", f);
  batch_.clear();
}

bool EventLoop::next_timeout(timespec* ts) {
  if (timer_order_.empty()) return false;
  const auto d = timer_order_.begin()->first - Clock::now();
  const int64_t ns = d <= Clock::duration::zero() ? 0 : std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  ts->tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts->tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return true;
}

int EventLoop::wait(epoll_event* events, int max) {
  timespec ts{};
  const bool timed = next_timeout(&ts);
  if (pwait2_) {
    const int n = epoll_pwait2(epfd_, events, max, timed ? &ts : nullptr, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    pwait2_ = false;  // an older kernel: millisecond timeouts from now on
  }
  int ms = -1;
  if (timed) ms = static_cast<int>(ts.tv_sec * 1000 + (ts.tv_nsec + 999'999) / 1'000'000);
  return epoll_wait(epfd_, events, max, ms);
}

void EventLoop::fire_timers() {
  const auto now = Clock::now();
  while (!timer_order_.empty() && timer_order_.begin()->first <= now) {
    const TimerId id = timer_order_.begin()->second;
    timer_order_.erase(timer_order_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    auto f = std::move(it->second.second);
    timers_.erase(it);
    guarded("a timer", f);
  }
}

void EventLoop::run() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  while (!stop_.load()) {
    const int n = wait(events, kMaxEvents);
    if (n < 0 && errno != EINTR) return die(std::string("epoll_wait: ") + std::strerror(errno));
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wakefd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = read(wakefd_, &v, sizeof v);
        continue;
      }
      auto it = handlers_.find(fd);
      if (it == handlers_.end()) continue;
      auto h = it->second;  // keep alive even if the handler removes itself
      guarded("an fd handler", [&] { (*h)(events[i].events); });
    }
    drain_posted();
    fire_timers();
  }
  close_queue();
}

}  // namespace geoccl::runtime
