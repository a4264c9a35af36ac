#include "blob/resume_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "blob/codec.h"
#include "blob/descriptor.h"
#include "geoccl/error.h"
#include "protocol/wire.h"

namespace geoccl::blob {
namespace {

constexpr uint32_t kMagic = 0x53424347;  // "GCBS"
constexpr size_t kFixedBytes = 32;

size_t bitmap_bytes(uint64_t chunks) { return static_cast<size_t>((chunks + 7) / 8); }

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw Error(ErrorCode::kIo, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

std::vector<uint8_t> encode_resume_state(const ResumeState& s) {
  const size_t n = s.verified.size();
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  write_preamble(w, kMagic);
  w.u64(s.object_bytes);
  w.u64(s.object_hash);
  w.u32(s.chunk_bytes);
  w.u32(static_cast<uint32_t>(n));
  std::vector<uint8_t> bitmap(bitmap_bytes(n), 0);
  for (size_t i = 0; i < n; ++i)
    if (s.verified[i]) bitmap[i / 8] = static_cast<uint8_t>(bitmap[i / 8] | (1u << (i % 8)));
  w.bytes(bitmap);
  for (size_t i = 0; i < n; ++i)
    w.u64(s.verified[i] && i < s.chunk_hash.size() ? s.chunk_hash[i] : 0);
  w.u64(xxh3(out));
  return out;
}

bool decode_resume_state(std::span<const uint8_t> in, ResumeState* s) {
  protocol::Reader r(in);
  uint32_t chunks = 0;
  ResumeState v;
  if (!read_preamble(r, kMagic) || !r.u64(&v.object_bytes) || !r.u64(&v.object_hash) ||
      !r.u32(&v.chunk_bytes) || !r.u32(&chunks))
    return false;
  if (v.chunk_bytes < kMinChunkBytes || v.chunk_bytes > kMaxChunkBytes) return false;
  if (chunks > kMaxChunks || chunk_count(v.object_bytes, v.chunk_bytes) != chunks) return false;
  const size_t bm = bitmap_bytes(chunks);
  if (in.size() != kFixedBytes + bm + 8 * size_t{chunks} + 8) return false;
  uint64_t sum = 0;
  protocol::Reader tail(in.subspan(in.size() - 8));
  if (!tail.u64(&sum) || sum != xxh3(in.first(in.size() - 8))) return false;
  const auto bitmap = in.subspan(kFixedBytes, bm);
  if (chunks % 8 != 0 && (bitmap[bm - 1] >> (chunks % 8)) != 0) return false;
  protocol::Reader hashes(in.subspan(kFixedBytes + bm, 8 * size_t{chunks}));
  v.verified.resize(chunks);
  v.chunk_hash.resize(chunks);
  for (size_t i = 0; i < chunks; ++i) {
    v.verified[i] = (bitmap[i / 8] >> (i % 8)) & 1;
    if (!hashes.u64(&v.chunk_hash[i])) return false;
    if (!v.verified[i] && v.chunk_hash[i] != 0) return false;
  }
  *s = std::move(v);
  return true;
}

std::optional<ResumeState> load_resume_state(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<uint8_t> buf;
  struct stat st {};
  // The largest valid state: kMaxChunks chunks; anything bigger is not ours.
  const off_t limit =
      static_cast<off_t>(kFixedBytes + bitmap_bytes(kMaxChunks) + 8 * kMaxChunks + 8);
  if (::fstat(fd, &st) == 0 && st.st_size <= limit) {
    buf.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    buf.resize(got);
  }
  ::close(fd);
  ResumeState s;
  if (!decode_resume_state(buf, &s)) return std::nullopt;
  return s;
}

void save_resume_state(const std::string& path, const ResumeState& s) {
  const auto bytes = encode_resume_state(s);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_error("cannot create", tmp);
  size_t put = 0;
  while (put < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      io_error("cannot write", tmp);
    }
    put += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) io_error("cannot write", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) io_error("cannot rename onto", path);
}

}  // namespace geoccl::blob
