// A file mapped into memory: the source of a file transfer (read-only, so the transport sends
// straight from the page cache) or a destination (shared read-write mapping of a file sized with
// ftruncate first, so uncompressed chunks are received straight into it).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace geoccl::blob {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps an existing regular file read-only. Throws Error(kInvalidArgument) when it is missing,
  // not a regular file or unreadable.
  static MappedFile open_read(const std::string& path);
  // Opens (creating it, mode 0644) and sizes `path` to `bytes`, mapped read-write and shared.
  // `keep` keeps the existing contents (a resumed part file); otherwise it is truncated first.
  // Throws Error(kIo).
  static MappedFile open_write(const std::string& path, uint64_t bytes, bool keep);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<uint8_t> bytes() const { return {static_cast<uint8_t*>(addr_), size_}; }
  uint64_t size() const { return size_; }
  // Writes the mapping back to the file and the file to disk, unmaps and closes it. Throws
  // Error(kIo).
  void sync_and_close();

 private:
  void release() noexcept;
  int fd_ = -1;
  void* addr_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Size of a regular file; throws Error(kInvalidArgument) when it cannot be examined.
uint64_t file_size(const std::string& path);

}  // namespace geoccl::blob
