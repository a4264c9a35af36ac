// CompletionPool: FIFO start, one job at a time while jobs are quick, another thread when one
// blocks or takes long, nested waits, bounded threads, clean destruction (also from a job).
#include "api/completion_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace geoccl::detail {
namespace {

using namespace std::chrono_literals;

// A one-shot flag to wait on with a bound.
class Latch {
 public:
  void set() {
    {
      std::lock_guard lk(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool wait_for(std::chrono::milliseconds d) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, d, [&] { return set_; });
  }
  bool is_set() {
    std::lock_guard lk(mu_);
    return set_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

TEST(CompletionPool, QuickJobsRunOneAfterAnotherInOrder) {
  std::vector<int> order;  // no lock: the jobs must not overlap
  std::atomic<int> overlapping{0}, max_overlap{0};
  {
    CompletionPool pool(std::chrono::seconds(30));  // nothing blocks: strictly serial
    for (int i = 0; i < 200; ++i)
      pool.post([&, i] {
        const int now = ++overlapping;
        int m = max_overlap.load();
        while (now > m && !max_overlap.compare_exchange_weak(m, now)) {
        }
        order.push_back(i);
        --overlapping;
      });
  }
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_EQ(max_overlap.load(), 1);
}

// A job blocked on something only a later job provides (a torch future, a plain promise): the
// later job starts after the grace period on another thread.
TEST(CompletionPool, JobBlockedOnALaterJobDoesNotDeadlock) {
  CompletionPool pool;
  std::promise<int> p;
  Latch done;
  std::atomic<int> value{0};
  pool.post([&] {
    auto f = p.get_future();
    if (f.wait_for(20s) == std::future_status::ready) value = f.get();
    done.set();
  });
  pool.post([&] { p.set_value(42); });
  ASSERT_TRUE(done.wait_for(20s));
  EXPECT_EQ(value.load(), 42);
}

// Depth 3: each job posts the next and waits for it.
TEST(CompletionPool, NestedWaitsThreeDeep) {
  CompletionPool pool;
  std::function<int(int)> nest = [&](int depth) -> int {
    if (depth == 0) return 1;
    auto p = std::make_shared<std::promise<int>>();
    auto f = p->get_future();
    pool.post([&, p, depth] { p->set_value(nest(depth - 1) + 1); });
    return f.wait_for(20s) == std::future_status::ready ? f.get() : -1000;
  };
  std::promise<int> top;
  auto f = top.get_future();
  pool.post([&] { top.set_value(nest(3)); });
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(f.get(), 4);
  EXPECT_GE(pool.threads(), 4u);  // three blocked at once, plus the one that ran the innermost
}

// A job that declares itself blocked (Work::wait does) lets the next job start at once, even with
// a grace period far longer than the test.
TEST(CompletionPool, DeclaredBlockingStartsTheNextJobAtOnce) {
  CompletionPool pool(std::chrono::minutes(10));
  Latch second_ran, first_done;
  pool.post([&] {
    CompletionPool::Blocking b;
    second_ran.wait_for(20s);
    first_done.set();
  });
  pool.post([&] { second_ran.set(); });
  ASSERT_TRUE(first_done.wait_for(30s));
  EXPECT_TRUE(second_ran.is_set());
}

TEST(CompletionPool, SlowJobDoesNotHoldBackLaterOnes) {
  CompletionPool pool;
  Latch later_done, slow_done;
  std::atomic<bool> later_finished_first{false};
  pool.post([&] {
    // "Slow": until the later jobs are done (bounded), then record whether they were.
    later_done.wait_for(20s);
    later_finished_first = later_done.is_set();
    slow_done.set();
  });
  std::atomic<int> left{5};
  for (int i = 0; i < 5; ++i)
    pool.post([&] {
      if (--left == 0) later_done.set();
    });
  ASSERT_TRUE(slow_done.wait_for(30s));
  EXPECT_TRUE(later_finished_first.load());
}

TEST(CompletionPool, ThreadsAreBounded) {
  Latch release;
  std::atomic<int> ran{0};
  {
    CompletionPool pool(1ms, 3);
    for (int i = 0; i < 10; ++i)
      pool.post([&] {
        release.wait_for(20s);
        ++ran;
      });
    std::this_thread::sleep_for(50ms);  // let the pool grow as far as it will
    EXPECT_LE(pool.threads(), 3u);
    release.set();
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST(CompletionPool, DestructionRunsEveryQueuedJob) {
  std::atomic<int> ran{0};
  {
    CompletionPool pool;
    for (int i = 0; i < 20; ++i)
      pool.post([&] {
        std::this_thread::sleep_for(2ms);
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(CompletionPool, ThrowingJobIsDroppedAndTheNextRuns) {
  std::atomic<int> ran{0};
  {
    CompletionPool pool;
    pool.post([] { throw std::runtime_error("callback failed"); });
    pool.post([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 1);
}

// The last owner of the pool lets go inside one of its jobs (a callback that drops the last
// reference to its communicator): the jobs behind it still run, nothing crashes or leaks.
TEST(CompletionPool, DestroyedFromItsOwnJob) {
  auto pool = std::make_shared<CompletionPool>();
  CompletionPool* raw = pool.get();
  Latch all_posted, destroyed;
  std::atomic<int> after{0};
  raw->post([&, p = std::move(pool)]() mutable {
    all_posted.wait_for(20s);
    p.reset();  // the destructor runs here, on the pool's own thread
    destroyed.set();
  });
  raw->post([&] { ++after; });  // queued behind: the destructor still runs it
  all_posted.set();
  ASSERT_TRUE(destroyed.wait_for(20s));
  EXPECT_EQ(after.load(), 1);
}

}  // namespace
}  // namespace geoccl::detail
