#include "blob/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "geoccl/error.h"

namespace geoccl::blob {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& what, const std::string& path) {
  throw Error(code, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorCode::kInvalidArgument, "cannot open", path);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::kInvalidArgument, path + " is not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

MappedFile MappedFile::open_read(const std::string& path) {
  MappedFile m;
  m.path_ = path;
  m.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (m.fd_ < 0) fail(ErrorCode::kInvalidArgument, "cannot open", path);
  struct stat st {};
  if (::fstat(m.fd_, &st) != 0) fail(ErrorCode::kInvalidArgument, "cannot examine", path);
  if (!S_ISREG(st.st_mode))
    throw Error(ErrorCode::kInvalidArgument, path + " is not a regular file");
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ > 0) {
    void* a = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, m.fd_, 0);
    if (a == MAP_FAILED) fail(ErrorCode::kInvalidArgument, "cannot map", path);
    m.addr_ = a;
    ::madvise(a, m.size_, MADV_SEQUENTIAL);
  }
  return m;
}

MappedFile MappedFile::open_write(const std::string& path, uint64_t bytes, bool keep) {
  MappedFile m;
  m.path_ = path;
  m.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | (keep ? 0 : O_TRUNC), 0644);
  if (m.fd_ < 0) fail(ErrorCode::kIo, "cannot create", path);
  if (::ftruncate(m.fd_, static_cast<off_t>(bytes)) != 0) fail(ErrorCode::kIo, "cannot size", path);
  // Reserve the blocks now where the file system can, so a full disk fails here and not as a
  // SIGBUS on a mapped page later.
  if (bytes > 0) {
    const int rc = ::posix_fallocate(m.fd_, 0, static_cast<off_t>(bytes));
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
      errno = rc;
      fail(ErrorCode::kIo, "cannot allocate", path);
    }
  }
  m.size_ = static_cast<size_t>(bytes);
  if (m.size_ > 0) {
    void* a = ::mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
    if (a == MAP_FAILED) fail(ErrorCode::kIo, "cannot map", path);
    m.addr_ = a;
  }
  return m;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      addr_(std::exchange(o.addr_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void MappedFile::sync_and_close() {
  if (addr_ && ::msync(addr_, size_, MS_SYNC) != 0)
    fail(ErrorCode::kIo, "cannot write back", path_);
  if (fd_ >= 0 && ::fsync(fd_) != 0) fail(ErrorCode::kIo, "cannot sync", path_);
  release();
}

void MappedFile::release() noexcept {
  if (addr_) ::munmap(addr_, size_);
  if (fd_ >= 0) ::close(fd_);
  addr_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

}  // namespace geoccl::blob
