// GradientBucketer: allreduce many tensors (a model's gradients, as DDP's buckets or
// allreduce_coalesced) in buckets, each started as soon as it is full.
//
// Tensors are added in the order they become ready (backward order). They are packed into a
// bucket of up to bucket_bytes; a full bucket is allreduced at once while later tensors are still
// being produced, and its results are unpacked into the original tensors when it completes. The
// default bucket size follows the path: the bandwidth-delay product of the slowest link (so a
// bucket keeps the WAN busy for about one round trip), within [1 MiB, 64 MiB]; 25 MiB (DDP's
// default) on a single site.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "geoccl/communicator.h"

namespace geoccl {

class GradientBucketer {
 public:
  // bucket_bytes 0 = automatic (see above). All tensors must have dtype `dtype`. With
  // options.feedback_key set (compressed allreduces with error feedback), the i-th bucket uses
  // key "<feedback_key>/i": use one bucketer per step, adding the tensors in the same order.
  GradientBucketer(Communicator& comm, DataType dtype, ReduceOp op, size_t bucket_bytes = 0,
                   OpOptions options = {});
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Adds a tensor of `count` elements; `data` must stay valid until finish()'s Work completes
  // and is overwritten with the reduced values then. Starts the current bucket if it is full.
  void add(void* data, size_t count);
  // Starts the last, partial bucket. The returned Work completes when every tensor added so far
  // holds its result (buckets complete in order; a bucket's wait() returns once it and every
  // earlier bucket are unpacked).
  Work finish();

  size_t bucket_bytes() const { return bucket_bytes_; }
  size_t buckets_started() const { return started_; }

  // The automatic size for `comm`: RTT x rate of its slowest inter-domain path, clamped.
  static size_t auto_bucket_bytes(const Communicator& comm, double wan_rate_bps = 1e9);

 private:
  struct Bucket;
  struct Unpacker;
  void start_current();

  Communicator& comm_;
  DataType dtype_;
  ReduceOp op_;
  size_t bucket_bytes_;
  OpOptions options_;
  std::shared_ptr<Unpacker> unpacker_;  // owns the buckets in flight
  std::shared_ptr<Bucket> current_;
  Work last_;
  size_t started_ = 0;
};

}  // namespace geoccl
