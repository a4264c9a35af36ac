// The shared-memory extension of the Hello (protocol/shm_hello.h): never crashes; what decodes
// re-encodes to the same bytes, and the acceptor's check never throws.
#include <cstdlib>
#include <span>

#include "protocol/shm_hello.h"

using namespace geoccl::protocol::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  Extension e;
  if (decode_extension(in, &e)) {
    const auto again = encode_extension(e);
    if (again.size() != size || !std::equal(again.begin(), again.end(), in.begin())) std::abort();
    (void)check_extension(e);
  }
  return 0;
}
