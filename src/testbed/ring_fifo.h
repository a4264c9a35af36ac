// A FIFO on a power-of-two ring that only allocates when it outgrows its
// largest size so far. std::deque frees and reallocates blocks as it drains
// and fills, which would put the allocator on the forwarder's hot path.
#pragma once

#include <cassert>
#include <cstddef>
#include <utility>
#include <vector>

namespace geoccl::testbed {

template <typename T>
class RingFifo {
 public:
  explicit RingFifo(std::size_t initial_capacity = 1024) {
    std::size_t cap = 1;
    while (cap < initial_capacity) cap <<= 1;
    items_.resize(cap);
  }

  bool empty() const { return head_ == tail_; }
  std::size_t size() const { return tail_ - head_; }

  void push(const T& item) {
    if (size() == items_.size()) grow();
    items_[tail_++ & mask()] = item;
  }
  const T& front() const {
    assert(!empty());
    return items_[head_ & mask()];
  }
  T& front() {
    assert(!empty());
    return items_[head_ & mask()];
  }
  void pop() {
    assert(!empty());
    ++head_;
  }
  const T& back() const {
    assert(!empty());
    return items_[(tail_ - 1) & mask()];
  }

 private:
  std::size_t mask() const { return items_.size() - 1; }
  void grow() {
    std::vector<T> bigger(items_.size() * 2);
    const std::size_t n = size();
    for (std::size_t i = 0; i < n; ++i) bigger[i] = std::move(items_[(head_ + i) & mask()]);
    items_ = std::move(bigger);
    head_ = 0;
    tail_ = n;
  }

  std::vector<T> items_;
  std::size_t head_ = 0;  // monotonically increasing; wrapped with mask()
  std::size_t tail_ = 0;
};

}  // namespace geoccl::testbed
