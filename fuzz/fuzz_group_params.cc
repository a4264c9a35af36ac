// Group parameter decoder (rank 0's settings, read from the store): never crashes, never
// allocates past kMaxParamString per string; what decodes re-encodes to the same bytes, and
// describe_difference against the defaults names a setting exactly when they differ.
#include <cstdlib>
#include <cstring>

#include "membership/group_params.h"

using geoccl::membership::GroupParams;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string why;
  if (auto p = GroupParams::decode({data, size}, &why)) {
    const auto again = p->encode();
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
    if (describe_difference(GroupParams{}, *p).empty() != (*p == GroupParams{})) std::abort();
  } else if (why.empty()) {
    std::abort();
  }
  return 0;
}
