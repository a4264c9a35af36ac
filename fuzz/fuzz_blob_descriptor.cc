// Blob wire format (blob/descriptor.h): the object header and window descriptors never crash the
// decoder; what decodes re-encodes to the same bytes, and a decoded window is consistent with
// its header (chunks in range and increasing, sizes those of the chunks).
#include <algorithm>
#include <cstdlib>
#include <span>

#include "blob/descriptor.h"

using namespace geoccl::blob;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  ObjectHeader h;
  if (decode_header(in, &h)) {
    const auto again = encode_header(h);
    if (again.size() != size || !std::equal(again.begin(), again.end(), in.begin())) std::abort();
  }
  // A window against a header taken from the input's first bytes (when they form one), else a
  // fixed one, so both the header's limits and the entries are explored.
  ObjectHeader ref{uint64_t{5} << 20, 1, 1u << 20, 4, 5};
  std::span<const uint8_t> rest = in;
  if (size >= kObjectHeaderBytes && decode_header(in.first(kObjectHeaderBytes), &h)) {
    ref = h;
    rest = in.subspan(kObjectHeaderBytes);
  }
  WindowDescriptor d;
  if (decode_window(rest, ref, &d)) {
    const auto again = encode_window(d, ref.window_chunks);
    if (again.size() != rest.size() || !std::equal(again.begin(), again.end(), rest.begin()))
      std::abort();
    for (size_t i = 0; i < d.entries.size(); ++i) {
      const auto& e = d.entries[i];
      if (e.chunk >= ref.chunk_count ||
          e.raw_bytes != chunk_raw_bytes(ref.object_bytes, ref.chunk_bytes, e.chunk) ||
          (i > 0 && e.chunk <= d.entries[i - 1].chunk))
        std::abort();
    }
  }
  return 0;
}
