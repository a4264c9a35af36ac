// Segment: one shared-memory mapping backed by a memfd. A memfd has no name in /dev/shm or in
// any file system: its memory lives as long as a descriptor or a mapping of it does, so a
// process killed by SIGKILL leaves nothing behind. The creator seals its size (it can neither
// shrink nor grow), so a peer can never truncate it under our mapping (which would SIGBUS us).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace geoccl::transport::shm {

class Segment {
 public:
  Segment() = default;
  // Creates a zero-filled, size-sealed segment of `bytes` (rounded up to whole pages) and maps
  // it. `name` shows in /proc/<pid>/fd only. Throws Error(kIo).
  static Segment create(size_t bytes, const char* name);
  // Maps the segment behind `fd` (received from a peer) and takes ownership of `fd` whatever the
  // outcome. Fails (an unmapped segment, *why set) unless `fd` is a memfd sealed against
  // shrinking whose size is exactly `expect_bytes` (rounded up to whole pages).
  static Segment map(int fd, size_t expect_bytes, std::string* why);

  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment() { reset(); }

  bool mapped() const { return data_ != nullptr; }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The memfd (-1 once closed): passed to the peer, then closed; the mapping stays.
  int fd() const { return fd_; }
  void close_fd();
  // Unmaps and closes.
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace geoccl::transport::shm
