// Membership records (candidates and decisions, read from the store): never crash, never
// allocate past the input; what decodes re-encodes to the same bytes, and a decoder that refuses
// says why.
#include <cstdlib>
#include <cstring>

#include "membership/quorum.h"

using namespace geoccl::membership;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string why;
  auto same = [&](const std::vector<uint8_t>& again) {
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  };
  if (auto c = decode_candidate({data, size}, &why))
    same(encode_candidate(*c));
  else if (why.empty())
    std::abort();
  why.clear();
  if (auto d = decode_decision({data, size}, &why)) {
    same(encode_decision(*d));
    for (size_t r = 0; r < d->members.size(); ++r)
      if (d->rank_of(d->members[r].uid) != static_cast<int>(r)) std::abort();
  } else if (why.empty()) {
    std::abort();
  }
  return 0;
}
