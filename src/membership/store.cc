// Store's default batch read (include/geoccl/store.h): one key after another.
#include "geoccl/error.h"
#include "geoccl/store.h"

namespace geoccl {

std::vector<std::optional<std::vector<uint8_t>>> Store::get_present(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::vector<uint8_t>>> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(check(k) ? std::optional(get(k, std::chrono::milliseconds(1))) : std::nullopt);
  return out;
}

}  // namespace geoccl
