#include "blob/codec.h"

#include <lz4.h>
#include <xxhash.h>
#include <zstd.h>

#include <climits>
#include <cstring>

namespace geoccl::blob {

const char* codec_name(Codec c) {
  switch (c) {
    case Codec::kNone:
      return "none";
    case Codec::kLz4:
      return "lz4";
    case Codec::kZstd:
      return "zstd";
  }
  return "?";
}

bool is_valid(Codec c) { return static_cast<uint8_t>(c) < kCodecs; }

std::optional<CodecChoice> parse_codec(std::string_view name, int zstd_level) {
  if (name == "none") return CodecChoice{Codec::kNone, 0};
  if (name == "lz4") return CodecChoice{Codec::kLz4, 0};
  if (name == "zstd" && zstd_level >= 1 && zstd_level <= 19)
    return CodecChoice{Codec::kZstd, zstd_level};
  return std::nullopt;
}

size_t compress_bound(Codec c, size_t raw_bytes) {
  switch (c) {
    case Codec::kNone:
      return raw_bytes;
    case Codec::kLz4:
      return raw_bytes > LZ4_MAX_INPUT_SIZE
                 ? 0
                 : static_cast<size_t>(LZ4_compressBound(static_cast<int>(raw_bytes)));
    case Codec::kZstd:
      return ZSTD_compressBound(raw_bytes);
  }
  return 0;
}

size_t compress(CodecChoice c, std::span<const uint8_t> raw, std::span<uint8_t> out) {
  switch (c.codec) {
    case Codec::kNone:
      if (out.size() < raw.size()) return 0;
      if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
      return raw.size();
    case Codec::kLz4: {
      if (raw.size() > LZ4_MAX_INPUT_SIZE) return 0;
      const int cap = static_cast<int>(std::min<size_t>(out.size(), INT_MAX));
      const int n = LZ4_compress_default(reinterpret_cast<const char*>(raw.data()),
                                         reinterpret_cast<char*>(out.data()),
                                         static_cast<int>(raw.size()), cap);
      return n > 0 ? static_cast<size_t>(n) : 0;
    }
    case Codec::kZstd: {
      const size_t n = ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), c.level);
      return ZSTD_isError(n) ? 0 : n;
    }
  }
  return 0;
}

bool decompress(Codec c, std::span<const uint8_t> wire, std::span<uint8_t> out) {
  switch (c) {
    case Codec::kNone:
      if (wire.size() != out.size()) return false;
      if (!wire.empty()) std::memmove(out.data(), wire.data(), wire.size());
      return true;
    case Codec::kLz4: {
      if (wire.size() > INT_MAX || out.size() > INT_MAX) return false;
      const int n = LZ4_decompress_safe(
          reinterpret_cast<const char*>(wire.data()), reinterpret_cast<char*>(out.data()),
          static_cast<int>(wire.size()), static_cast<int>(out.size()));
      return n >= 0 && static_cast<size_t>(n) == out.size();
    }
    case Codec::kZstd: {
      const size_t n = ZSTD_decompress(out.data(), out.size(), wire.data(), wire.size());
      return !ZSTD_isError(n) && n == out.size();
    }
  }
  return false;
}

uint64_t xxh3(std::span<const uint8_t> data) { return XXH3_64bits(data.data(), data.size()); }

}  // namespace geoccl::blob
