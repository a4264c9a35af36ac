// Wire format of a blob transfer: the object header (once per transfer) and the window
// descriptor (once per window of chunks). Fixed-width little-endian fields; a window descriptor
// always has the encoded size of a full window so that every rank broadcasts the same count.
// Decoders are I/O-free, check every length and field, and never read past their input.
//
// Object header, 64 bytes:
//   u32 magic "GCBH"  u16 version (1)  u16 reserved (0)
//   u64 object_bytes  u64 object_hash (xxh3-64 of the whole object)
//   u32 chunk_bytes   u32 window_chunks  u32 chunk_count (= ceil(object_bytes / chunk_bytes))
//   u32 reserved (0)  then zeros up to 64 bytes
//
// Window descriptor, 24 + 24 * window_chunks bytes:
//   u32 magic "GCBW"  u16 version (1)  u16 entries (1..window_chunks)
//   u32 round  u32 window (sequence number within the round)  u64 reserved (0)
//   entries x { u32 chunk  u8 codec  u8 level  u16 reserved (0)  u32 raw_bytes  u32 wire_bytes
//               u64 raw_hash (xxh3-64 of the chunk's raw bytes) }
//   then zeros up to the full size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "blob/codec.h"
#include "protocol/wire.h"

namespace geoccl::blob {

inline constexpr size_t kObjectHeaderBytes = 64;
inline constexpr size_t kWindowHeaderBytes = 24;
inline constexpr size_t kChunkEntryBytes = 24;
inline constexpr size_t kMinChunkBytes = 64u << 10;
inline constexpr size_t kMaxChunkBytes = 64u << 20;
inline constexpr size_t kMaxWindowChunks = 64;
// 2^24 chunks: a 64 TiB object at 4 MiB chunks; bounds every per-chunk table.
inline constexpr uint64_t kMaxChunks = 1u << 24;

struct ObjectHeader {
  uint64_t object_bytes = 0;
  uint64_t object_hash = 0;
  uint32_t chunk_bytes = 0;
  uint32_t window_chunks = 0;
  uint32_t chunk_count = 0;
  bool operator==(const ObjectHeader&) const = default;
};

struct ChunkEntry {
  uint32_t chunk = 0;
  CodecChoice codec;
  uint32_t raw_bytes = 0;
  uint32_t wire_bytes = 0;
  uint64_t raw_hash = 0;
  bool operator==(const ChunkEntry&) const = default;
};

struct WindowDescriptor {
  uint32_t round = 0;
  uint32_t window = 0;
  std::vector<ChunkEntry> entries;
  bool operator==(const WindowDescriptor&) const = default;
};

// "u32 magic, u16 version (1), u16 reserved (0)": how the header and the resume state begin.
void write_preamble(protocol::Writer& w, uint32_t magic);
// False unless the reader holds that preamble with this magic.
bool read_preamble(protocol::Reader& r, uint32_t magic);

// Chunks of an object; 0 for an empty object. Returns UINT64_MAX when chunk_bytes is 0.
uint64_t chunk_count(uint64_t object_bytes, uint64_t chunk_bytes);
// Raw size of chunk `index` (the last one may be short); 0 past the end.
uint32_t chunk_raw_bytes(uint64_t object_bytes, uint32_t chunk_bytes, uint64_t index);

std::vector<uint8_t> encode_header(const ObjectHeader& h);
// False (and *h untouched) unless `in` is exactly one header of this version whose fields are
// consistent: chunk_bytes and window_chunks in range, chunk_count = ceil(object/chunk) <=
// kMaxChunks.
bool decode_header(std::span<const uint8_t> in, ObjectHeader* h);

size_t window_descriptor_bytes(uint32_t window_chunks);
// Encodes into exactly window_descriptor_bytes(window_chunks) bytes (entries <= window_chunks).
std::vector<uint8_t> encode_window(const WindowDescriptor& d, uint32_t window_chunks);
// False unless `in` is a full-size descriptor for `h`: entries in 1..window_chunks, chunks strictly
// increasing and < chunk_count, raw_bytes equal to that chunk's size, a known codec, wire_bytes
// in 1..compress_bound (equal to raw_bytes for kNone), reserved fields and padding zero.
bool decode_window(std::span<const uint8_t> in, const ObjectHeader& h, WindowDescriptor* d);

}  // namespace geoccl::blob
