#include "blob/test_hooks.h"

#include <charconv>
#include <cstdlib>

namespace geoccl::blob {

std::optional<int64_t> parse_rank_value(std::string_view s, int rank) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  int r = -1;
  int64_t v = -1;
  const auto a = std::from_chars(s.data(), s.data() + colon, r);
  const auto b = std::from_chars(s.data() + colon + 1, s.data() + s.size(), v);
  if (a.ec != std::errc{} || a.ptr != s.data() + colon || b.ec != std::errc{} ||
      b.ptr != s.data() + s.size())
    return std::nullopt;
  if (r != rank || v < 0) return std::nullopt;
  return v;
}

TestHooks test_hooks_from_env(int rank) {
  TestHooks h;
  if (const char* v = std::getenv("GEOCCL_BLOB_TEST_CORRUPT"))
    h.corrupt_chunk = parse_rank_value(v, rank).value_or(-1);
  if (const char* v = std::getenv("GEOCCL_BLOB_TEST_EXIT_AFTER"))
    h.exit_after = parse_rank_value(v, rank).value_or(-1);
  return h;
}

}  // namespace geoccl::blob
