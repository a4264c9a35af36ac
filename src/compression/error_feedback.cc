#include "compression/error_feedback.h"

#include <algorithm>

#include "geoccl/error.h"

namespace geoccl::compression {

std::span<float> FeedbackStore::get(const std::string& key, size_t count, uint64_t shape) {
  std::lock_guard lk(mu_);
  Entry& e = entries_[key];
  if (!e.data || e.count != count || e.shape != shape) {
    e.data.reset(new float[std::max<size_t>(count, 1)]());
    e.count = count;
    e.shape = shape;
  }
  return {e.data.get(), count};
}

void FeedbackStore::forget(const std::string& key) {
  std::lock_guard lk(mu_);
  entries_.erase(key);
}

void FeedbackStore::forget_all() {
  std::lock_guard lk(mu_);
  entries_.clear();
}

size_t FeedbackStore::keys() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

size_t FeedbackStore::bytes() const {
  std::lock_guard lk(mu_);
  size_t b = 0;
  for (const auto& [k, e] : entries_) b += e.count * sizeof(float);
  return b;
}

void add_residual(std::span<float> x, std::span<const float> residual) {
  if (x.size() != residual.size())
    throw Error(ErrorCode::kInvalidArgument, "error feedback: residual size differs from input");
  float* __restrict a = x.data();
  const float* __restrict r = residual.data();
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) a[i] += r[i];  // must vectorize
}

void store_residual(std::span<const float> x, std::span<const float> decoded,
                    std::span<float> residual) {
  if (x.size() != residual.size() || decoded.size() != residual.size())
    throw Error(ErrorCode::kInvalidArgument, "error feedback: residual size differs from input");
  const float* a = x.data();
  const float* d = decoded.data();
  float* r = residual.data();
  const size_t n = x.size();
  for (size_t i = 0; i < n; ++i) r[i] = a[i] - d[i];  // must vectorize
}

}  // namespace geoccl::compression
