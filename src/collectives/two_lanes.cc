#include "collectives/two_lanes.h"

#include <algorithm>
#include <string>
#include <thread>

#include "geoccl/error.h"

namespace geoccl::collectives {

TwoLanes::TwoLanes(OpContext& c, int counters) : c_(c), counters_(static_cast<size_t>(counters), 0) {}

void TwoLanes::run(const std::function<void()>& first, const std::function<void()>& second) {
  std::thread other;
  try {
    other = std::thread([&] { guarded(second); });
  } catch (...) {
    // No second lane: the first must not start (it would wait for the second forever), and the
    // peers, which run theirs, must learn that this rank gave up.
    fail(std::current_exception());
    throw;
  }
  guarded(first);
  other.join();
  if (error_) std::rethrow_exception(error_);
}

void TwoLanes::advance_to(int k, int value) {
  {
    std::lock_guard lk(mu_);
    int& v = counters_[static_cast<size_t>(k)];
    v = std::max(v, value);
  }
  cv_.notify_all();
}

void TwoLanes::wait(int k, int value) {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return counters_[static_cast<size_t>(k)] >= value || failed_ || running_ < 2; });
  if (counters_[static_cast<size_t>(k)] >= value) return;
  if (failed_) throw Error(ErrorCode::kAborted, "the other lane of this operation failed");
  throw Error(ErrorCode::kInternal, "the other lane of this operation ended without its hand-off");
}

void TwoLanes::guarded(const std::function<void()>& lane) {
  try {
    lane();
  } catch (...) {
    fail(std::current_exception());
  }
  finished();
}

void TwoLanes::fail(std::exception_ptr e) {
  {
    std::lock_guard lk(mu_);
    if (!error_) error_ = e;
  }
  // Errors from the network have failed the group already (the transport keeps its first
  // failure, so this changes nothing); a local error must fail it too, or the other lane and
  // the peers would wait for this lane until the deadline.
  ErrorCode code = ErrorCode::kInternal;
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    code = x.code();
    what = x.what();
  } catch (const std::exception& x) {
    what = x.what();
  } catch (...) {
  }
  c_.abort(code, what);
  {
    std::lock_guard lk(mu_);
    failed_ = true;
  }
  cv_.notify_all();
}

void TwoLanes::finished() {
  {
    std::lock_guard lk(mu_);
    --running_;
  }
  cv_.notify_all();
}

}  // namespace geoccl::collectives
