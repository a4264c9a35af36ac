// Every codec decoder (fp16, bf16, int8, int4, int2, int2-sr, top-k with fp16, int8, 4- and
// 2-bit values) on arbitrary bytes: never read out of
// bounds or crash, refuse with a typed error, and when a buffer decodes, decode_add into zeros
// gives the same values. The first byte picks the destination size (the decoders must refuse a
// wrong one as kMismatch, not overrun it); the rest is the encoded buffer.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compression/codec.h"
#include "geoccl/error.h"

using namespace geoccl::compression;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  size_t count = 0;
  try {
    count = peek_header(in).count;
  } catch (const geoccl::Error& e) {
    if (e.code() != geoccl::ErrorCode::kProtocol) std::abort();
    return 0;
  }
  // A buffer that claims more elements than its bytes could hold is malformed whatever the
  // destination; do not allocate for it.
  if (count > 8 * in.size() + 1024) count = data[0];
  if (data[0] & 1) count = data[0] >> 1;  // often a destination of the wrong size
  std::vector<float> dst(count), acc(count, 0.0f);
  bool decoded = true;
  try {
    decode(in, dst);
  } catch (const geoccl::Error& e) {
    if (e.code() != geoccl::ErrorCode::kProtocol && e.code() != geoccl::ErrorCode::kMismatch)
      std::abort();
    decoded = false;
  }
  bool added = true;
  try {
    decode_add(in, acc);
  } catch (const geoccl::Error&) {
    added = false;
  }
  if (decoded != added) std::abort();
  // 0 + v == v for every v but -0 (0 + -0 = +0) and NaN payloads; compare accordingly.
  for (size_t i = 0; decoded && i < count; ++i)
    if (!(acc[i] == dst[i] || (std::isnan(acc[i]) && std::isnan(dst[i])))) std::abort();
  return 0;
}
