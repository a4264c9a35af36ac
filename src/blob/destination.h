// Where a receiver puts the object: memory (a vector the caller owns) or a file
// (file_destination.h). The transfer writes chunks into bytes(), but a chunk counts only once
// verified, and the object is handed over (commit) only once its whole hash verified.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "blob/descriptor.h"

namespace geoccl::blob {

class Destination {
 public:
  virtual ~Destination() = default;
  // Sizes the storage for the object of `h`. Returns one entry per chunk: 1 where a chunk from an
  // earlier run is already here and re-verified. Throws Error (kIo, ...).
  virtual std::vector<uint8_t> open(const ObjectHeader& h) = 0;
  virtual std::span<uint8_t> bytes() = 0;
  // After each window: what is verified so far (so that a later run can resume from it).
  virtual void persist(const std::vector<uint8_t>& verified,
                       const std::vector<uint64_t>& hashes) = 0;
  // The object's hash verified: deliver it. Throws Error(kIo).
  virtual void commit() = 0;
};

// Into `*out`, resized to the object; nothing to resume from.
class MemoryDestination final : public Destination {
 public:
  explicit MemoryDestination(std::vector<uint8_t>* out) : out_(out) {}
  std::vector<uint8_t> open(const ObjectHeader& h) override;
  std::span<uint8_t> bytes() override { return *out_; }
  void persist(const std::vector<uint8_t>&, const std::vector<uint64_t>&) override {}
  void commit() override {}

 private:
  std::vector<uint8_t>* out_;
};

}  // namespace geoccl::blob
