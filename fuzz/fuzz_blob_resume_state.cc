// The resume state of a file destination (blob/resume_state.h): never crash; what decodes
// re-encodes to the same bytes and has one verified flag and hash per chunk of its object.
#include <algorithm>
#include <cstdlib>
#include <span>

#include "blob/descriptor.h"
#include "blob/resume_state.h"

using namespace geoccl::blob;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  ResumeState s;
  if (decode_resume_state(in, &s)) {
    const auto again = encode_resume_state(s);
    if (again.size() != size || !std::equal(again.begin(), again.end(), in.begin())) std::abort();
    if (s.verified.size() != chunk_count(s.object_bytes, s.chunk_bytes) ||
        s.chunk_hash.size() != s.verified.size())
      std::abort();
  }
  return 0;
}
