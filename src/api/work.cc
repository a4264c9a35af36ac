#include "api/completion_pool.h"
#include "api/work_state.h"
#include "core/logging.h"
#include "geoccl/work.h"

namespace geoccl {

void detail::WorkState::complete(std::exception_ptr e, CompletionPool* pool) {
  std::vector<std::function<void(std::exception_ptr)>> cbs;
  {
    std::lock_guard lk(mu);
    done = true;
    error = e;
    cbs.swap(callbacks);
    settled = cbs.empty();
  }
  if (cbs.empty()) {
    cv.notify_all();
  } else if (pool) {
    pool->post([self = shared_from_this(), cbs = std::move(cbs)]() mutable { self->run_callbacks(cbs); });
  } else {
    run_callbacks(cbs);
  }
}

void detail::WorkState::run_callbacks(std::vector<std::function<void(std::exception_ptr)>>& cbs) {
  for (auto& cb : cbs) run_logging_errors([&] { cb(error); });
  cbs.clear();  // their captures go before wait() returns
  // Callbacks registered while the ones above ran saw done == true and ran on their own thread.
  {
    std::lock_guard lk(mu);
    settled = true;
  }
  cv.notify_all();
}

void Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) throw Error(ErrorCode::kInvalidArgument, "wait() on an empty Work");
  // On a completion thread (a callback waiting on another Work), the next callbacks must not
  // wait for this one: they may be what completes it.
  detail::CompletionPool::Blocking blocked;
  std::unique_lock lk(state_->mu);
  auto is_done = [&] { return state_->settled; };
  if (timeout == std::chrono::milliseconds::max()) {
    state_->cv.wait(lk, is_done);
  } else if (!state_->cv.wait_for(lk, timeout, is_done)) {
    throw Error(ErrorCode::kTimeout, "Work::wait: not complete after " +
                                         std::to_string(timeout.count()) + " ms");
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::test() const {
  if (!state_) return false;
  std::lock_guard lk(state_->mu);
  return state_->done;
}

int Work::source() const {
  if (!state_) return -1;
  std::lock_guard lk(state_->mu);
  return state_->done && !state_->error ? state_->source : -1;
}

bool Work::ok() const {
  if (!state_) return false;
  std::lock_guard lk(state_->mu);
  return state_->done && !state_->error;
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  std::lock_guard lk(state_->mu);
  return state_->error;
}

void Work::on_complete(std::function<void(std::exception_ptr)> cb) const {
  if (!state_) throw Error(ErrorCode::kInvalidArgument, "on_complete() on an empty Work");
  std::exception_ptr e;
  {
    std::lock_guard lk(state_->mu);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(cb));
      return;
    }
    e = state_->error;
  }
  cb(e);
}

}  // namespace geoccl
