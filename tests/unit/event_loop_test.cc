// EventLoop failures: a handler that throws, a loop whose epoll set breaks, and epoll_ctl /
// setsockopt errors. Every wait here is bounded: a regression fails the test instead of hanging.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "geoccl/error.h"
#include "runtime/event_loop.h"
#include "runtime/socket.h"

using namespace geoccl;
using namespace std::chrono_literals;
using runtime::EventLoop;

namespace {

// The epoll fds this process holds now.
std::set<int> epoll_fds() {
  std::set<int> out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0 && std::string(target, static_cast<size_t>(n)) == "anon_inode:[eventpoll]")
      out.insert(std::atoi(e->d_name));
  }
  closedir(d);
  return out;
}

// What run_sync(f) did within `limit`: "ran", "threw io|timeout|other: ...", or "hung". A hung call keeps
// its thread and the loop (leaked on purpose, so that nothing it touches is freed).
std::string bounded_run_sync(EventLoop* loop, std::function<void()> f, std::chrono::seconds limit) {
  auto result = std::make_shared<std::promise<std::string>>();
  auto fut = result->get_future();
  std::thread t([loop, f = std::move(f), result] {
    try {
      loop->run_sync(f);
      result->set_value("ran");
    } catch (const Error& e) {
      const char* code = e.code() == ErrorCode::kIo ? "io" : e.code() == ErrorCode::kTimeout ? "timeout" : "other";
      result->set_value(std::string("threw ") + code + ": " + e.what());
    } catch (const std::exception& e) {
      result->set_value(std::string("threw other: ") + e.what());
    }
  });
  if (fut.wait_for(limit) != std::future_status::ready) {
    t.detach();
    return "hung";
  }
  t.join();
  return fut.get();
}

}  // namespace

// What the loop reported to its error handler, in order.
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> what;
  std::vector<bool> on_loop_thread;

  void install(EventLoop& loop) {
    loop.set_error_handler([this, &loop](const std::string& w) {
      std::lock_guard lk(mu);
      what.push_back(w);
      on_loop_thread.push_back(loop.in_loop_thread());
      cv.notify_all();
    });
  }
  // The reports once there are `n`, or what there is after 5 s.
  std::vector<std::string> wait_for(size_t n) {
    std::unique_lock lk(mu);
    cv.wait_for(lk, 5s, [&] { return what.size() >= n; });
    return what;
  }
};

TEST(EventLoop, HandlersThatThrowAreReportedAndTheLoopKeepsRunning) {
  Reports reports;  // outlives the loop
  EventLoop loop("t-throw");
  reports.install(loop);
  loop.post([] { throw std::runtime_error("boom from a posted task"); });
  EXPECT_EQ(bounded_run_sync(&loop, [&] {
    loop.add_timer(EventLoop::Clock::now(), [] { throw std::runtime_error("boom from a timer"); });
  }, 5s), "ran");
  const int efd = eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC);  // readable at once
  ASSERT_GE(efd, 0);
  EXPECT_EQ(bounded_run_sync(&loop, [&] {
    loop.add_fd(efd, EPOLLIN, [&](uint32_t) {
      loop.remove_fd(efd);
      throw std::logic_error("boom from an fd handler");
    });
  }, 5s), "ran");
  const auto got = reports.wait_for(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NE(got[0].find("boom from a posted task"), std::string::npos) << got[0];
  EXPECT_NE(got[1].find("boom from a timer"), std::string::npos) << got[1];
  EXPECT_NE(got[2].find("boom from an fd handler"), std::string::npos) << got[2];
  for (bool b : reports.on_loop_thread) EXPECT_TRUE(b);
  // Still running; what run_sync's own function throws reaches its caller.
  EXPECT_TRUE(loop.alive());
  EXPECT_EQ(bounded_run_sync(&loop, [] { throw Error(ErrorCode::kTimeout, "mine"); }, 5s).rfind("threw timeout", 0), 0u);
  EXPECT_EQ(bounded_run_sync(&loop, [] {}, 5s), "ran");
  close(efd);
}

TEST(EventLoop, RunSyncOnALoopWhoseEpollSetBrokeThrowsInsteadOfHanging) {
  const auto before = epoll_fds();
  Reports reports;
  auto* loop = new EventLoop("t-dead");
  reports.install(*loop);
  int epfd = -1;
  for (int fd : epoll_fds())
    if (!before.count(fd)) epfd = fd;
  ASSERT_GE(epfd, 0) << "cannot find the loop's epoll fd";
  // Replace the epoll fd with /dev/null: the loop's next epoll_wait fails with EINVAL.
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  ASSERT_EQ(dup2(null_fd, epfd), epfd);
  close(null_fd);
  // The first call may still run (the loop was already inside epoll_wait); a later one cannot.
  std::string last;
  for (int i = 0; i < 3; ++i) {
    last = bounded_run_sync(loop, [] {}, 5s);
    if (last != "ran") break;
  }
  ASSERT_NE(last, "hung") << "run_sync hangs on a dead loop";
  EXPECT_EQ(last.rfind("threw io", 0), 0u) << last;
  EXPECT_FALSE(loop->alive());
  EXPECT_FALSE(loop->post([] {}));
  EXPECT_EQ(bounded_run_sync(loop, [] {}, 5s).rfind("threw io", 0), 0u);
  // Reported once, on the loop thread, with the reason.
  const auto got = reports.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("epoll_wait"), std::string::npos) << got[0];
  EXPECT_TRUE(reports.on_loop_thread[0]);
  // A handler installed after the death still hears of it.
  Reports late;
  late.install(*loop);
  EXPECT_EQ(late.wait_for(1).size(), 1u);
  EXPECT_EQ(reports.what.size(), 1u);
  loop->set_error_handler(nullptr);
  delete loop;
}

TEST(EventLoop, EpollCtlFailuresAreNotIgnored) {
  Reports reports;
  EventLoop loop("t-ctl");
  reports.install(loop);
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  const int file = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);  // epoll refuses files
  ASSERT_GE(file, 0);
  EXPECT_EQ(bounded_run_sync(&loop, [&] { loop.add_fd(file, EPOLLIN, [](uint32_t) {}); }, 5s).rfind("threw io", 0), 0u);
  // Modifying an fd the loop does not watch is reported; removing one is not (ENOENT).
  EXPECT_EQ(bounded_run_sync(&loop, [&] {
    loop.modify_fd(p[0], EPOLLIN);
    loop.remove_fd(p[0]);
  }, 5s), "ran");
  const auto got = reports.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("fd " + std::to_string(p[0])), std::string::npos) << got[0];
  close(file);
  close(p[0]);
  close(p[1]);
}

TEST(SocketUtil, RequiredSocketOptionsThatFailThrow) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  // TCP_NODELAY on a pipe: ENOTSOCK.
  EXPECT_THROW(runtime::set_nodelay(p[0]), Error);
  close(p[0]);
  close(p[1]);
  // O_NONBLOCK on a closed fd: EBADF.
  EXPECT_THROW(runtime::set_nonblocking(p[0], true), Error);
  // Tuning is best effort: false, no exception.
  EXPECT_FALSE(runtime::tune_socket(p[0], SOL_SOCKET, SO_RCVBUF, 1 << 20, "SO_RCVBUF"));
}
