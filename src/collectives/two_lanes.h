// TwoLanes: one collective run as two lanes on two threads at once, so that work on one set of
// links (inside a domain) overlaps work on another (across domains).
//
// The lanes hand blocks to each other through counters: one lane advances a counter when a block
// is ready, the other wait()s until the counter reaches the block it needs. Each lane must talk to
// its own peers only (see OpContext) so that frame order per peer stays the same on every rank.
//
// Failure: when a lane throws (timeout, peer lost, mismatch, a local error), the group is aborted
// with that error, here and on every peer, so the other lane's network waits end at once; its
// waits on the counters end too. run() returns only after both threads have ended and rethrows
// the first error. Nothing waits without bound: network waits have the operation's deadline, and
// a counter wait ends when the other lane advances it, fails, or returns.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "collectives/op_context.h"

namespace geoccl::collectives {

class TwoLanes {
 public:
  // `counters`: how many hand-off counters the lanes share (all start at 0).
  TwoLanes(OpContext& c, int counters);

  // Runs `first` on the calling thread and `second` on a new thread; returns when both have
  // returned. Rethrows the first error of either (after aborting the group with it).
  void run(const std::function<void()>& first, const std::function<void()>& second);

  // Counter `k` becomes at least `value` (counters never go down); waiting lanes wake.
  void advance_to(int k, int value);
  // Until counter `k` is at least `value`. Throws Error(kAborted) when the other lane failed or
  // returned without getting there (then its own error, if any, is the one run() rethrows).
  void wait(int k, int value);

 private:
  // Runs `lane`; on any exception records it (first one wins), aborts the group, wakes waiters.
  void guarded(const std::function<void()>& lane);
  void fail(std::exception_ptr e);
  // The lane has returned: a counter it did not reach will never be reached.
  void finished();

  OpContext& c_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> counters_;
  int running_ = 2;      // lanes that have not returned
  bool failed_ = false;  // a lane threw
  std::exception_ptr error_;
};

}  // namespace geoccl::collectives
