#include "blob/descriptor.h"

#include <algorithm>

#include "protocol/wire.h"

namespace geoccl::blob {
namespace {

constexpr uint32_t kHeaderMagic = 0x48424347;  // "GCBH" little-endian
constexpr uint32_t kWindowMagic = 0x57424347;  // "GCBW"
constexpr uint16_t kVersion = 1;

void pad_to(std::vector<uint8_t>* out, size_t n) { out->resize(std::max(out->size(), n), 0); }

bool zeros(std::span<const uint8_t> b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t v) { return v == 0; });
}

}  // namespace

void write_preamble(protocol::Writer& w, uint32_t magic) {
  w.u32(magic);
  w.u16(kVersion);
  w.u16(0);
}

bool read_preamble(protocol::Reader& r, uint32_t magic) {
  uint32_t m = 0;
  uint16_t version = 0, reserved = 0;
  return r.u32(&m) && r.u16(&version) && r.u16(&reserved) && m == magic && version == kVersion &&
         reserved == 0;
}

uint64_t chunk_count(uint64_t object_bytes, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) return UINT64_MAX;
  return object_bytes / chunk_bytes + (object_bytes % chunk_bytes != 0);
}

uint32_t chunk_raw_bytes(uint64_t object_bytes, uint32_t chunk_bytes, uint64_t index) {
  if (chunk_bytes == 0 || index >= chunk_count(object_bytes, chunk_bytes)) return 0;
  const uint64_t off = index * chunk_bytes;
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_bytes, object_bytes - off));
}

std::vector<uint8_t> encode_header(const ObjectHeader& h) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  write_preamble(w, kHeaderMagic);
  w.u64(h.object_bytes);
  w.u64(h.object_hash);
  w.u32(h.chunk_bytes);
  w.u32(h.window_chunks);
  w.u32(h.chunk_count);
  w.u32(0);
  pad_to(&out, kObjectHeaderBytes);
  return out;
}

bool decode_header(std::span<const uint8_t> in, ObjectHeader* h) {
  if (in.size() != kObjectHeaderBytes) return false;
  protocol::Reader r(in);
  uint32_t reserved32 = 0;
  ObjectHeader v;
  if (!read_preamble(r, kHeaderMagic) || !r.u64(&v.object_bytes) || !r.u64(&v.object_hash) ||
      !r.u32(&v.chunk_bytes) || !r.u32(&v.window_chunks) || !r.u32(&v.chunk_count) ||
      !r.u32(&reserved32))
    return false;
  if (reserved32 != 0) return false;
  if (!zeros(in.subspan(r.position()))) return false;
  if (v.chunk_bytes < kMinChunkBytes || v.chunk_bytes > kMaxChunkBytes) return false;
  if (v.window_chunks < 1 || v.window_chunks > kMaxWindowChunks) return false;
  const uint64_t n = chunk_count(v.object_bytes, v.chunk_bytes);
  if (n > kMaxChunks || n != v.chunk_count) return false;
  *h = v;
  return true;
}

size_t window_descriptor_bytes(uint32_t window_chunks) {
  return kWindowHeaderBytes + kChunkEntryBytes * window_chunks;
}

std::vector<uint8_t> encode_window(const WindowDescriptor& d, uint32_t window_chunks) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u32(kWindowMagic);
  w.u16(kVersion);
  w.u16(static_cast<uint16_t>(d.entries.size()));
  w.u32(d.round);
  w.u32(d.window);
  w.u64(0);
  for (const auto& e : d.entries) {
    w.u32(e.chunk);
    w.u8(static_cast<uint8_t>(e.codec.codec));
    w.u8(static_cast<uint8_t>(e.codec.level));
    w.u16(0);
    w.u32(e.raw_bytes);
    w.u32(e.wire_bytes);
    w.u64(e.raw_hash);
  }
  pad_to(&out, window_descriptor_bytes(window_chunks));
  return out;
}

bool decode_window(std::span<const uint8_t> in, const ObjectHeader& h, WindowDescriptor* d) {
  if (h.window_chunks < 1 || h.window_chunks > kMaxWindowChunks) return false;
  if (in.size() != window_descriptor_bytes(h.window_chunks)) return false;
  protocol::Reader r(in);
  uint32_t magic = 0;
  uint16_t version = 0, entries = 0;
  uint64_t reserved64 = 0;
  WindowDescriptor v;
  if (!r.u32(&magic) || !r.u16(&version) || !r.u16(&entries) || !r.u32(&v.round) ||
      !r.u32(&v.window) || !r.u64(&reserved64))
    return false;
  if (magic != kWindowMagic || version != kVersion || reserved64 != 0) return false;
  if (entries < 1 || entries > h.window_chunks) return false;
  for (uint16_t i = 0; i < entries; ++i) {
    ChunkEntry e;
    uint8_t codec = 0, level = 0;
    uint16_t reserved16 = 0;
    if (!r.u32(&e.chunk) || !r.u8(&codec) || !r.u8(&level) || !r.u16(&reserved16) ||
        !r.u32(&e.raw_bytes) || !r.u32(&e.wire_bytes) || !r.u64(&e.raw_hash))
      return false;
    e.codec = {static_cast<Codec>(codec), level};
    if (reserved16 != 0 || !is_valid(e.codec.codec)) return false;
    if (e.chunk >= h.chunk_count || (!v.entries.empty() && e.chunk <= v.entries.back().chunk))
      return false;
    if (e.raw_bytes != chunk_raw_bytes(h.object_bytes, h.chunk_bytes, e.chunk)) return false;
    if (e.wire_bytes == 0 || e.wire_bytes > compress_bound(e.codec.codec, e.raw_bytes))
      return false;
    if (e.codec.codec == Codec::kNone && (e.wire_bytes != e.raw_bytes || level != 0)) return false;
    v.entries.push_back(e);
  }
  if (!zeros(in.subspan(r.position()))) return false;
  *d = std::move(v);
  return true;
}

}  // namespace geoccl::blob
