#include "blob/destination.h"

#include "geoccl/error.h"

namespace geoccl::blob {

std::vector<uint8_t> MemoryDestination::open(const ObjectHeader& h) {
  if (h.object_bytes > out_->max_size())
    throw Error(ErrorCode::kIo,
                "blob of " + std::to_string(h.object_bytes) + " bytes does not fit in memory");
  try {
    out_->resize(static_cast<size_t>(h.object_bytes));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kIo,
                "cannot allocate " + std::to_string(h.object_bytes) + " bytes for the blob");
  }
  return std::vector<uint8_t>(h.chunk_count, 0);
}

}  // namespace geoccl::blob
