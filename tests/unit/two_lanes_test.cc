// TwoLanes (src/collectives/two_lanes.h): hand-offs between the lanes, and failures: whichever
// lane fails, the group is aborted with its error, the other lane stops waiting (on the other
// lane or on the network), and run() rethrows the first error.
#include "error_code.h"
#include "collectives/two_lanes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace geoccl;
using namespace geoccl::collectives;
using Clock = std::chrono::steady_clock;

namespace {

// A group of one whose receives complete only when the group is aborted.
class FakeTransport final : public transport::Transport {
 public:
  explicit FakeTransport(runtime::Progress& p) : progress_(p) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  transport::RequestPtr send(int, const protocol::FrameHeader&, std::span<const uint8_t>) override {
    return pending();
  }
  transport::RequestPtr recv(int, const protocol::FrameHeader&, std::span<uint8_t>) override {
    return pending();
  }
  void begin_operation(const protocol::FrameHeader&) override {}
  void abort(ErrorCode code, const std::string& message) override {
    {
      std::lock_guard lk(mu_);
      ++aborts_;
      if (failure_) return;
      failure_ = transport::Failure{code, message};
      for (auto& r : pending_) {
        r->failure = *failure_;
        r->done.store(true, std::memory_order_release);
      }
    }
    progress_.notify();
  }
  std::optional<transport::Failure> failure() const override {
    std::lock_guard lk(mu_);
    return failure_;
  }
  std::vector<transport::LinkStats> stats() const override { return {}; }
  int aborts() const {
    std::lock_guard lk(mu_);
    return aborts_;
  }

 private:
  transport::RequestPtr pending() {
    auto r = std::make_shared<transport::Request>();
    std::lock_guard lk(mu_);
    if (failure_) {
      r->failure = *failure_;
      r->done.store(true);
    }
    pending_.push_back(r);
    return r;
  }
  runtime::Progress& progress_;
  mutable std::mutex mu_;
  std::optional<transport::Failure> failure_;
  std::vector<transport::RequestPtr> pending_;
  int aborts_ = 0;
};

struct Fixture {
  runtime::Progress progress;
  FakeTransport transport{progress};
  ScratchPool scratch;
  OpContext ctx{transport, progress, scratch, protocol::FrameHeader{},
                Clock::now() + std::chrono::seconds(60), 1 << 20};
};

using geoccl::test::code_of;

}  // namespace

TEST(TwoLanes, BlocksAreHandedOverInOrder) {
  Fixture f;
  TwoLanes lanes(f.ctx, 1);
  constexpr int kBlocks = 50;
  std::atomic<int> produced{0};
  std::vector<int> seen;
  lanes.run(
      [&] {
        for (int i = 0; i < kBlocks; ++i) {
          produced.store(i + 1);
          lanes.advance_to(0, i + 1);
        }
      },
      [&] {
        for (int i = 0; i < kBlocks; ++i) {
          lanes.wait(0, i + 1);
          EXPECT_GE(produced.load(), i + 1);
          seen.push_back(i);
        }
      });
  EXPECT_EQ(seen.size(), static_cast<size_t>(kBlocks));
  EXPECT_EQ(f.transport.aborts(), 0);
}

TEST(TwoLanes, ErrorInOneLaneAbortsTheGroupAndEndsTheOthersWait) {
  for (int failing = 0; failing < 2; ++failing) {
    Fixture f;
    TwoLanes lanes(f.ctx, 2);
    auto fails = [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      throw Error(ErrorCode::kMismatch, "lane failed");
    };
    auto waits = [&] { lanes.wait(1, 1); };  // never advanced
    const auto t0 = Clock::now();
    EXPECT_EQ(code_of([&] { failing == 0 ? lanes.run(fails, waits) : lanes.run(waits, fails); }),
              ErrorCode::kMismatch);
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
    ASSERT_TRUE(f.transport.failure());
    EXPECT_EQ(f.transport.failure()->code, ErrorCode::kMismatch);
  }
}

TEST(TwoLanes, LocalErrorEndsTheOtherLanesNetworkWait) {
  Fixture f;
  TwoLanes lanes(f.ctx, 1);
  const auto t0 = Clock::now();
  // The first error is rethrown as it was; the group fails with kInternal.
  EXPECT_THROW(lanes.run(
                   [&] {
                     std::this_thread::sleep_for(std::chrono::milliseconds(20));
                     throw std::runtime_error("out of something");
                   },
                   [&] {
                     OpContext own = f.ctx.sub({0}, 2);
                     uint8_t byte = 0;
                     own.wait(own.recv(0, {&byte, 1}));  // completes only through the abort
                   }),
               std::runtime_error);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(f.transport.failure());
  EXPECT_EQ(f.transport.failure()->code, ErrorCode::kInternal);
}

TEST(TwoLanes, LaneThatEndsWithoutItsHandOffReleasesTheWaiter) {
  Fixture f;
  TwoLanes lanes(f.ctx, 1);
  EXPECT_EQ(code_of([&] { lanes.run([] {}, [&] { lanes.wait(0, 1); }); }), ErrorCode::kInternal);
}
