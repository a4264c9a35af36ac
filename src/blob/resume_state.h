// The resume state of a file destination (`<path>.geoccl-state`): which chunks of which object
// this receiver has verified in `<path>.geoccl-part`, with each verified chunk's hash so that a
// later run re-checks the part file before trusting it. Encoding and decoding are I/O-free;
// load/save are the only file access.
//
// Format (little-endian):
//   u32 magic "GCBS"  u16 version (1)  u16 reserved (0)
//   u64 object_bytes  u64 object_hash  u32 chunk_bytes  u32 chunk_count
//   ceil(chunk_count / 8) bytes: verified bitmap, chunk i at bit (i % 8) of byte i / 8; unused
//   high bits zero
//   chunk_count x u64: xxh3-64 of each verified chunk's raw bytes (0 where not verified)
//   u64 xxh3-64 of everything before it
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace geoccl::blob {

struct ResumeState {
  uint64_t object_bytes = 0;
  uint64_t object_hash = 0;
  uint32_t chunk_bytes = 0;
  std::vector<uint8_t> verified;     // one entry (0/1) per chunk
  std::vector<uint64_t> chunk_hash;  // one per chunk
  bool operator==(const ResumeState&) const = default;
};

std::vector<uint8_t> encode_resume_state(const ResumeState& s);
// False (and *s untouched) unless `in` is exactly one state of this version with a matching
// checksum, chunk_count = ceil(object_bytes / chunk_bytes) within the descriptor limits, and zero
// unused bitmap bits and hashes of unverified chunks.
bool decode_resume_state(std::span<const uint8_t> in, ResumeState* s);

// Reads and decodes `path`; nullopt when it is missing, unreadable or does not decode.
std::optional<ResumeState> load_resume_state(const std::string& path);
// Writes `path` atomically (a temporary file renamed over it). Throws Error(kIo).
void save_resume_state(const std::string& path, const ResumeState& s);

}  // namespace geoccl::blob
