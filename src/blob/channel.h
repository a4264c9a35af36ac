// The participants of one blob transfer and the three things the transfer asks of them, on the
// bulk priority class of the public Communicator: agree (every participant gets the elementwise
// maximum of everyone's vector), and move bytes from the root to every other participant.
// Two shapes: the whole group (allreduce + hierarchical broadcast) and one pair (send/recv).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "geoccl/blob.h"
#include "geoccl/communicator.h"

namespace geoccl::blob {

class BlobChannel {
 public:
  virtual ~BlobChannel() = default;
  virtual int participants() const = 0;
  virtual int me() const = 0;                // index of this rank, 0 .. participants()-1
  virtual int rank_of(int index) const = 0;  // communicator rank of a participant
  // Blocking: elementwise maximum over all participants, in place. Throws the communicator's Error.
  virtual void agree(std::span<int64_t> v) = 0;
  virtual void agree(std::span<uint8_t> v) = 0;
  // Asynchronous: `bytes` from participant `root` into the same-sized buffer of every other one
  // (the root's buffer is only read). Completes when its bytes have moved; callers wait for the
  // moves in the order they issued them.
  virtual Work move(void* buf, size_t bytes, int root) = 0;
};

// Every rank of `comm`; participant index = rank.
std::unique_ptr<BlobChannel> group_channel(Communicator& comm, const BlobOptions& o);
// This rank and `peer` (index 0 = the lower rank); throws Error(kInvalidArgument) when `peer` is
// out of range or this rank.
std::unique_ptr<BlobChannel> pair_channel(Communicator& comm, int peer, const BlobOptions& o);

}  // namespace geoccl::blob
