// Lossless chunk codecs (lz4, zstd) and the xxh3-64 hashes of the blob layer: pure functions over
// byte spans, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace geoccl::blob {

// Wire values are part of the chunk descriptor: never renumber.
enum class Codec : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };
inline constexpr int kCodecs = 3;

struct CodecChoice {
  Codec codec = Codec::kNone;
  int level = 0;  // zstd's level; 0 for the others
  bool operator==(const CodecChoice&) const = default;
};

const char* codec_name(Codec c);
// "none", "lz4", "zstd" (level `zstd_level`, 1..19); nullopt for anything else or a bad level.
std::optional<CodecChoice> parse_codec(std::string_view name, int zstd_level);
bool is_valid(Codec c);

// The largest output compress() may produce for `raw_bytes` of input.
size_t compress_bound(Codec c, size_t raw_bytes);
// Compresses `raw` into `out` (at least compress_bound bytes). Returns the compressed size, or 0
// when the codec failed (the caller then sends the chunk raw). kNone copies.
size_t compress(CodecChoice c, std::span<const uint8_t> raw, std::span<uint8_t> out);
// True when `wire` decodes to exactly out.size() bytes; false on any malformed input (never reads
// or writes outside the spans).
bool decompress(Codec c, std::span<const uint8_t> wire, std::span<uint8_t> out);

// xxh3-64 of `data` (seed 0).
uint64_t xxh3(std::span<const uint8_t> data);

}  // namespace geoccl::blob
