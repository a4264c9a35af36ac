// dial_all (transport/dial_all.h): every peer dialled once, on several threads; the first failure,
// a dial's or poll's, stops the rest and reaches the caller once every thread has ended.
#include "transport/dial_all.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "geoccl/error.h"

using geoccl::Error;
using geoccl::ErrorCode;
using geoccl::transport::dial_all;
using geoccl::transport::kDialsAtOnce;
using namespace std::chrono_literals;

namespace {

std::vector<int> ranks(int n) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r) v.push_back(r);
  return v;
}

// Runs f on a thread of its own and fails the test (instead of hanging) when it has not ended in
// 20 s; a hung f is left behind (the test has failed).
template <typename F>
void ends_in_time(F f) {
  auto done = std::make_shared<std::promise<void>>();
  auto ended = done->get_future();
  std::thread([f, done]() mutable {
    try {
      f();
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  ASSERT_EQ(ended.wait_for(20s), std::future_status::ready) << "dial_all did not return";
  ended.get();
}

}  // namespace

TEST(DialAll, EveryPeerOnceEvenWhenDialsEndAtOnce) {
  // Dials that return at once end while the threads are still being started: every peer is
  // still dialled exactly once and the call returns.
  for (int trial = 0; trial < 200; ++trial) {
    std::mutex mu;
    std::multiset<int> seen;
    ends_in_time([&] {
      dial_all(ranks(40), nullptr, [&](int p, const std::atomic<bool>&) {
        std::lock_guard lk(mu);
        seen.insert(p);
      });
    });
    ASSERT_EQ(seen.size(), 40u);
    for (int r = 0; r < 40; ++r) ASSERT_EQ(seen.count(r), 1u) << r;
  }
}

TEST(DialAll, DialsRunAtOnceUpToTheWidth) {
  // Each dial waits until kDialsAtOnce of them are in progress together: only dials that run at
  // once get there.
  std::mutex mu;
  std::condition_variable cv;
  size_t inside = 0, most = 0;
  ends_in_time([&] {
    dial_all(ranks(static_cast<int>(kDialsAtOnce) * 2), nullptr, [&](int, const std::atomic<bool>&) {
      std::unique_lock lk(mu);
      most = std::max(most, ++inside);
      cv.notify_all();
      cv.wait_for(lk, 5s, [&] { return most >= kDialsAtOnce; });
      --inside;
    });
  });
  EXPECT_EQ(most, kDialsAtOnce);
}

TEST(DialAll, TheFirstFailureStopsTheRestAndReachesTheCaller) {
  std::atomic<int> dialled{0}, polled{0};
  ends_in_time([&] {
    try {
      dial_all(ranks(100), [&] { ++polled; }, [&](int p, const std::atomic<bool>& stop) {
        ++dialled;
        if (p == 3) throw Error(ErrorCode::kProtocol, "rank 3 rejected us");
        // The others wait for the stop (bounded), as a dial retrying a slow peer does.
        for (int i = 0; i < 500 && !stop.load(); ++i) std::this_thread::sleep_for(1ms);
        EXPECT_TRUE(stop.load());
      });
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kProtocol);
      EXPECT_STREQ(e.what(), "protocol error: rank 3 rejected us");
    }
  });
  EXPECT_LT(dialled.load(), 100);  // the rest were never started
  EXPECT_GE(polled.load(), 1);     // one last poll for the peer's own reason
}

TEST(DialAll, APollThatThrowsEndsTheSetUp) {
  ends_in_time([&] {
    EXPECT_THROW(dial_all(ranks(4), [] { throw Error(ErrorCode::kInvalidArgument, "rank 9 could not join"); },
                          [&](int, const std::atomic<bool>& stop) {
                            while (!stop.load()) std::this_thread::sleep_for(1ms);
                          }),
                 Error);
  });
}
