// Fixed-size packet buffers for the forwarder. One mmap'ed region with
// MAP_NORESERVE: the pool can be sized for the worst case (every link full)
// while memory is only committed for the slots actually touched, and the LIFO
// free list keeps reusing the same, cache-warm slots.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace geoccl::testbed {

class BufferPool {
 public:
  static constexpr std::uint32_t kNone = UINT32_MAX;

  BufferPool(std::uint32_t slot_size, std::uint32_t slots) : slot_size_(slot_size) {
    bytes_ = static_cast<std::size_t>(slot_size) * slots;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw std::runtime_error("cannot reserve " + std::to_string(bytes_ >> 20) +
                               " MiB for packet buffers");
    }
    base_ = static_cast<std::uint8_t*>(p);
    free_.reserve(slots);
    for (std::uint32_t i = slots; i > 0; --i) free_.push_back(i - 1);
  }
  ~BufferPool() { munmap(base_, bytes_); }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // kNone when exhausted; the caller drops the packet and counts it.
  std::uint32_t acquire() {
    if (free_.empty()) return kNone;
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void release(std::uint32_t slot) { free_.push_back(slot); }

  std::uint8_t* data(std::uint32_t slot) { return base_ + static_cast<std::size_t>(slot) * slot_size_; }
  std::uint32_t slot_size() const { return slot_size_; }
  std::size_t available() const { return free_.size(); }

 private:
  std::uint32_t slot_size_;
  std::size_t bytes_ = 0;
  std::uint8_t* base_ = nullptr;
  std::vector<std::uint32_t> free_;
};

}  // namespace geoccl::testbed
