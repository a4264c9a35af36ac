// Error feedback: what a codec dropped, kept per stable key and added to the next input with the
// same key, so that nothing a lossy codec drops is lost for good, only delayed (the residual's
// sum over steps stays bounded instead of the error growing with the step count).
//
// One store per communicator. A residual belongs to the rank that encodes: it covers exactly the
// elements this rank encodes in a compressed allreduce (its pieces of the WAN step), in a layout
// the collective defines and names with `shape`. A call with another element count or shape
// starts the key afresh (zeros). Thread-safe: ops of different priority classes may run at once
// (each must use its own keys).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace geoccl::compression {

class FeedbackStore {
 public:
  // The residual of `key` for `count` elements laid out as `shape` (zeros when new, or when the
  // key last had another count or shape). Stays valid until forget(key) or forget_all(); one
  // operation uses it at a time.
  std::span<float> get(const std::string& key, size_t count, uint64_t shape);
  void forget(const std::string& key);
  void forget_all();

  size_t keys() const;
  size_t bytes() const;

 private:
  struct Entry {
    uint64_t shape = 0;
    std::unique_ptr<float[]> data;
    size_t count = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

// x += residual, element-wise (the next input with feedback added). Vectorized.
void add_residual(std::span<float> x, std::span<const float> residual);
// residual = x - decoded: what the codec dropped from x. `decoded` may alias `residual`.
void store_residual(std::span<const float> x, std::span<const float> decoded,
                    std::span<float> residual);

}  // namespace geoccl::compression
