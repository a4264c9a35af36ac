#include "transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "geoccl/error.h"

namespace geoccl::transport::shm {

namespace {

size_t page_round(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Not populated: a ring's pages are faulted in as traffic first reaches them (once, a few ms per
// MiB), so the rings of peers that never exchange bulk data cost no memory, and connecting to
// many peers zeroes no memory up front.
uint8_t* map_shared(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Segment Segment::create(size_t bytes, const char* name) {
  Segment s;
  s.size_ = page_round(bytes);
  s.fd_ = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.fd_ < 0) throw Error(ErrorCode::kIo, std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(s.fd_, static_cast<off_t>(s.size_)) != 0 ||
      fcntl(s.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    throw Error(ErrorCode::kIo, std::string("shared memory segment: ") + std::strerror(errno));
  s.data_ = map_shared(s.fd_, s.size_);
  if (!s.data_) throw Error(ErrorCode::kIo, std::string("mmap: ") + std::strerror(errno));
  return s;
}

Segment Segment::map(int fd, size_t expect_bytes, std::string* why) {
  Segment s;
  s.fd_ = fd;
  const size_t want = page_round(expect_bytes);
  struct stat st{};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    *why = "the segment is not a memfd sealed against shrinking";
  } else if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != want) {
    *why = "the segment has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(want);
  } else if (!(s.data_ = map_shared(fd, want))) {
    *why = std::string("mmap: ") + std::strerror(errno);
  } else {
    s.size_ = want;
    return s;
  }
  s.reset();
  return s;
}

void Segment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Segment::reset() {
  if (data_) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  close_fd();
}

}  // namespace geoccl::transport::shm
