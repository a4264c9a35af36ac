// Work and its completion: done at once on the completing thread, callbacks on the pool, wait()
// after the callbacks, errors to both.
#include "geoccl/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "api/completion_pool.h"
#include "api/work_state.h"

namespace geoccl {
namespace {

using namespace std::chrono_literals;
using detail::CompletionPool;
using detail::WorkState;

TEST(Work, CallbacksRunOffTheCompletingThreadAndWaitReturnsAfterThem) {
  CompletionPool pool;
  auto s = std::make_shared<WorkState>();
  Work w(s);
  std::thread::id ran_on;
  std::atomic<bool> finished{false};
  w.on_complete([&](std::exception_ptr e) {
    EXPECT_EQ(e, nullptr);
    ran_on = std::this_thread::get_id();
    std::this_thread::sleep_for(50ms);
    finished = true;
  });
  s->complete(nullptr, &pool);
  EXPECT_TRUE(w.test());  // done at once, whatever the callbacks do
  w.wait();
  EXPECT_TRUE(finished.load());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(w.ok());
}

TEST(Work, TestIsTrueWhileCallbacksStillRun) {
  CompletionPool pool;
  auto s = std::make_shared<WorkState>();
  Work w(s);
  std::promise<void> release;
  auto released = release.get_future().share();
  w.on_complete([released](std::exception_ptr) { released.wait_for(20s); });
  s->complete(nullptr, &pool);
  EXPECT_TRUE(w.test());
  try {
    w.wait(10ms);
    ADD_FAILURE() << "wait() returned while the callback ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  release.set_value();
  w.wait();
}

TEST(Work, CallbackAddedAfterCompletionRunsOnTheCaller) {
  CompletionPool pool;
  auto s = std::make_shared<WorkState>();
  Work w(s);
  s->complete(nullptr, &pool);
  std::thread::id ran_on;
  w.on_complete([&](std::exception_ptr) { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(Work, ErrorReachesCallbacksAndWait) {
  CompletionPool pool;
  auto s = std::make_shared<WorkState>();
  Work w(s);
  std::atomic<bool> saw_error{false};
  w.on_complete([&](std::exception_ptr e) { saw_error = e != nullptr; });
  w.on_complete([](std::exception_ptr) { throw std::runtime_error("a throwing callback is dropped"); });
  s->complete(std::make_exception_ptr(Error(ErrorCode::kPeerLost, "gone")), &pool);
  try {
    w.wait();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
  }
  EXPECT_TRUE(saw_error.load());
  EXPECT_FALSE(w.ok());
}

// A callback that waits on a later Work, whose own callback is queued behind it: wait() on a pool
// thread lets that callback start at once (the grace period here is longer than the test).
TEST(Work, CallbackWaitingOnALaterWorkWithCallbacks) {
  CompletionPool pool(std::chrono::minutes(10));
  auto a = std::make_shared<WorkState>(), b = std::make_shared<WorkState>();
  Work wa(a), wb(b);
  std::atomic<bool> b_callback{false}, a_saw_b{false};
  wb.on_complete([&](std::exception_ptr) { b_callback = true; });
  wa.on_complete([&](std::exception_ptr) {
    wb.wait(20s);
    a_saw_b = b_callback.load();
  });
  a->complete(nullptr, &pool);
  b->complete(nullptr, &pool);
  wa.wait(30s);
  EXPECT_TRUE(a_saw_b.load());
}

}  // namespace
}  // namespace geoccl
