#include "blob/file_destination.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "blob/codec.h"
#include "geoccl/error.h"

namespace geoccl::blob {

FileDestination::FileDestination(std::string path, bool resume)
    : path_(std::move(path)), resume_(resume) {}

std::vector<uint8_t> FileDestination::open(const ObjectHeader& h) {
  state_ =
      ResumeState{h.object_bytes, h.object_hash, h.chunk_bytes,
                  std::vector<uint8_t>(h.chunk_count, 0), std::vector<uint64_t>(h.chunk_count, 0)};
  std::optional<ResumeState> old;
  if (resume_) old = load_resume_state(state_path(path_));
  const bool same = old && old->object_bytes == h.object_bytes &&
                    old->object_hash == h.object_hash && old->chunk_bytes == h.chunk_bytes &&
                    ::access(part_path(path_).c_str(), F_OK) == 0;
  file_ = MappedFile::open_write(part_path(path_), h.object_bytes, same);
  if (same) {
    // Trust a chunk only if the part file still holds what the state says was verified.
    const auto data = file_.bytes();
    for (uint32_t i = 0; i < h.chunk_count; ++i) {
      if (!old->verified[i]) continue;
      const uint64_t off = uint64_t{i} * h.chunk_bytes;
      const auto raw = data.subspan(off, chunk_raw_bytes(h.object_bytes, h.chunk_bytes, i));
      if (xxh3(raw) == old->chunk_hash[i]) {
        state_.verified[i] = 1;
        state_.chunk_hash[i] = old->chunk_hash[i];
      }
    }
  } else {
    std::remove(state_path(path_).c_str());
  }
  return state_.verified;
}

void FileDestination::persist(const std::vector<uint8_t>& verified,
                              const std::vector<uint64_t>& hashes) {
  if (!resume_) return;
  state_.verified = verified;
  state_.chunk_hash = hashes;
  save_resume_state(state_path(path_), state_);
}

void FileDestination::commit() {
  file_.sync_and_close();
  if (::rename(part_path(path_).c_str(), path_.c_str()) != 0)
    throw Error(ErrorCode::kIo,
                "cannot rename " + part_path(path_) + " to " + path_ + ": " + std::strerror(errno));
  std::remove(state_path(path_).c_str());
}

}  // namespace geoccl::blob
