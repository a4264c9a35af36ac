// The link rate a transfer sees, measured from its own chunks: each chunk's busy time runs from
// when the link could start on it (its issue, or the previous chunk's completion if later) to its
// completion, so time the root spent compressing with the link idle does not count against the
// link. Pure: times in, a rate out.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace geoccl::blob {

class LinkMeter {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // Chunks must be recorded in the order they complete (the transfer waits for them in issue order).
  void record(Time issued, Time completed, uint64_t wire_bytes) {
    const Time start = has_last_ ? std::max(issued, last_completed_) : issued;
    if (completed > start) busy_ += completed - start;
    last_completed_ = std::max(last_completed_, completed);
    has_last_ = true;
    bytes_ += wire_bytes;
  }
  // Wire bytes per second over the busy time so far; 0 until a chunk took measurable time.
  double bytes_per_s() const {
    const double s = std::chrono::duration<double>(busy_).count();
    return s > 0 ? static_cast<double>(bytes_) / s : 0;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  std::chrono::steady_clock::duration busy_{};
  Time last_completed_{};
  bool has_last_ = false;
  uint64_t bytes_ = 0;
};

}  // namespace geoccl::blob
