// The sparse piece decoder (compression/sparse_piece.h) on arbitrary bytes: never read out of
// bounds or crash, refuse with a typed error and leave the destination untouched, and when a
// piece decodes, it sets at most its pair count of elements, and densifying it twice doubles
// every element exactly. The first byte picks the dense length (often a wrong one, which must
// be kMismatch); the rest is the piece.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "compression/sparse_piece.h"
#include "geoccl/error.h"

using namespace geoccl::compression;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> in(data + 1, size - 1);
  uint64_t n = data[0];
  if (!(data[0] & 1) && in.size() >= kSparseHeaderSize) {
    std::memcpy(&n, in.data() + 4, 8);
    // A length the piece's bytes could not describe is malformed anyway: no allocation for it.
    if (n > 16 * in.size() + 1024) n = data[0];
  }
  std::vector<float> dst(n, 0.0f);
  uint64_t m = 0;
  try {
    m = sparse_info(in, n).m;
    sparse_add(in, dst);
  } catch (const geoccl::Error& e) {
    if (e.code() != geoccl::ErrorCode::kProtocol && e.code() != geoccl::ErrorCode::kMismatch)
      std::abort();
    for (float v : dst)
      if (std::memcmp(&v, "\0\0\0\0", 4) != 0) std::abort();  // untouched
    return 0;
  }
  uint64_t set = 0;
  for (float v : dst) set += v != 0.0f;
  if (set > m) std::abort();
  std::vector<float> twice(n);
  const std::span<const uint8_t> both[2] = {in, in};
  sparse_densify(both, twice);
  for (size_t i = 0; i < n; ++i) {
    const float want = dst[i] + dst[i];
    if (std::memcmp(&want, &twice[i], 4) != 0 && !(want != want && twice[i] != twice[i]))
      std::abort();
  }
  return 0;
}
