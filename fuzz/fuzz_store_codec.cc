// Store message (plain and authenticated) and owner record decoders: never crash, never allocate past the limits; decoded
// messages re-encode to the same bytes.
#include <cstdlib>
#include <cstring>

#include "protocol/store_codec.h"

using namespace geoccl::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> body(data, size);
  if (auto q = decode_store_request(body)) {
    const auto again = encode_store_request(*q);
    if (again.size() != size + 4 || std::memcmp(again.data() + 4, data, size) != 0) std::abort();
  }
  if (auto r = decode_store_response(body)) {
    const auto again = encode_store_response(*r);
    if (again.size() != size + 4 || std::memcmp(again.data() + 4, data, size) != 0) std::abort();
  }
  if (auto a = decode_authenticated_store_request(body)) {  // a store with a group secret
    if (!is_authenticated_store_request(body)) std::abort();
    const auto again = encode_authenticated_store_request(*a);
    if (again.size() != size + 4 || std::memcmp(again.data() + 4, data, size) != 0) std::abort();
  }
  if (auto o = decode_store_owner(body)) {  // the owner record a store's rank 0 leaves
    const auto again = encode_store_owner(*o);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
