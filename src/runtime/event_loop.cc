#include "runtime/event_loop.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>

#include "geoccl/error.h"

namespace geoccl::runtime {

EventLoop::EventLoop(const char* name) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wakefd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epfd_ < 0 || wakefd_ < 0) {
    const int e = errno;
    if (epfd_ >= 0) close(epfd_);
    if (wakefd_ >= 0) close(wakefd_);
    throw Error(ErrorCode::kIo, std::string("event loop: ") + std::strerror(e));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wakefd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
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
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void EventLoop::remove_fd(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
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

void EventLoop::post(std::function<void()> f) {
  {
    std::lock_guard lk(post_mu_);
    posted_.push_back(std::move(f));
  }
  wake();
}

void EventLoop::run_sync(std::function<void()> f) {
  std::promise<void> done;
  post([&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}

void EventLoop::wake() {
  const uint64_t one = 1;
  // A full eventfd counter still wakes the loop; the result does not matter.
  [[maybe_unused]] ssize_t n = write(wakefd_, &one, sizeof one);
}

void EventLoop::drain_posted() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard lk(post_mu_);
    batch.swap(posted_);
  }
  for (auto& f : batch) f();
}

int EventLoop::next_timeout_ms() {
  if (timer_order_.empty()) return -1;
  const auto d = timer_order_.begin()->first - Clock::now();
  if (d <= Clock::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(d).count());
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
    f();
  }
}

void EventLoop::run() {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  while (!stop_.load()) {
    const int n = epoll_wait(epfd_, events, kMaxEvents, next_timeout_ms());
    if (n < 0 && errno != EINTR) break;
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
      (*h)(events[i].events);
    }
    drain_posted();
    fire_timers();
  }
}

}  // namespace geoccl::runtime
