#include "geoccl/bucketer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>

#include "core/logging.h"
#include "geoccl/error.h"

namespace geoccl {

struct GradientBucketer::Bucket {
  struct Slot {
    void* data;
    size_t bytes;
  };
  std::vector<Slot> slots;
  std::unique_ptr<uint8_t[]> packed;
  size_t bytes = 0;
  size_t seq = 0;  // the bucketer's count of buckets started before this one
  Work work;       // its allreduce

  void unpack() const {
    size_t o = 0;
    for (const auto& s : slots) {
      std::memcpy(s.data, packed.get() + o, s.bytes);
      o += s.bytes;
    }
  }
};

// Buckets started and not unpacked yet, oldest first. Callbacks of successive buckets may run
// concurrently (one that takes long lets the next start), so each one unpacks every bucket up to
// its own, in order: when a bucket's callback returns, it and every earlier bucket are unpacked.
// A callback names its bucket by sequence number, never by address: a later callback may have
// unpacked and freed the bucket already, and a bucket started since may live at the same address
// with its allreduce still writing into it.
struct GradientBucketer::Unpacker {
  std::mutex mu;
  std::deque<std::shared_ptr<Bucket>> pending;

  void unpack_through(size_t last) {
    std::lock_guard lk(mu);
    while (!pending.empty() && pending.front()->seq <= last) {
      auto b = std::move(pending.front());
      pending.pop_front();
      if (b->work.ok()) b->unpack();  // done: Works complete in issue order
    }
  }
};

size_t GradientBucketer::auto_bucket_bytes(const Communicator& comm, double wan_rate_bps) {
  constexpr size_t kMin = size_t{1} << 20, kMax = size_t{64} << 20, kSingleSite = size_t{25} << 20;
  const auto t = comm.topology();
  if (t.names.size() <= 1) return kSingleSite;
  // Slowest measured inter-domain RTT; 50 ms when domains come from labels without a probe.
  double rtt_ms = 0;
  const size_t n = t.domain_of.size();
  if (t.rtt_ms.size() == n * n)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j)
        if (t.domain_of[i] != t.domain_of[j]) rtt_ms = std::max(rtt_ms, t.rtt_ms[i * n + j]);
  if (rtt_ms <= 0) rtt_ms = 50;
  const double bdp = wan_rate_bps / 8 * rtt_ms / 1e3;
  return std::clamp(static_cast<size_t>(bdp), kMin, kMax);
}

GradientBucketer::GradientBucketer(Communicator& comm, DataType dtype, ReduceOp op,
                                   size_t bucket_bytes, OpOptions options)
    : comm_(comm),
      dtype_(dtype),
      op_(op),
      bucket_bytes_(bucket_bytes ? bucket_bytes : auto_bucket_bytes(comm)),
      options_(std::move(options)),
      unpacker_(std::make_shared<Unpacker>()) {
  if (!is_valid(dtype)) throw Error(ErrorCode::kInvalidArgument, "bucketer: unknown dtype");
  if (!is_valid(op)) throw Error(ErrorCode::kInvalidArgument, "bucketer: unknown reduce op");
  GEOCCL_LOG(kDebug, "gradient buckets of " << bucket_bytes_ << " B");
}

GradientBucketer::~GradientBucketer() {
  // Buckets still in flight unpack into the caller's tensors: finish before they go away.
  if (last_.valid()) {
    try {
      last_.wait();
    } catch (...) {
    }
  }
}

void GradientBucketer::add(void* data, size_t count) {
  const size_t bytes = count * dtype_size(dtype_);
  if (!data && bytes) throw Error(ErrorCode::kInvalidArgument, "bucketer: null tensor");
  if (!current_) current_ = std::make_shared<Bucket>();
  current_->slots.push_back({data, bytes});
  current_->bytes += bytes;
  if (current_->bytes >= bucket_bytes_) start_current();
}

void GradientBucketer::start_current() {
  if (!current_ || current_->slots.empty()) return;
  auto b = std::move(current_);
  current_.reset();
  // Pack: one contiguous buffer per bucket so the allreduce is a single pipelined operation.
  b->packed.reset(new uint8_t[std::max<size_t>(b->bytes, 1)]);
  size_t off = 0;
  for (const auto& s : b->slots) {
    std::memcpy(b->packed.get() + off, s.data, s.bytes);
    off += s.bytes;
  }
  // Error feedback: each bucket keeps its own residual (buckets fill in the same order every
  // step, so the n-th bucket is the same tensors each time).
  OpOptions o = options_;
  if (!o.feedback_key.empty()) o.feedback_key += "/" + std::to_string(started_);
  b->seq = started_;
  b->work = comm_.allreduce(b->packed.get(), b->bytes / dtype_size(dtype_), dtype_, op_, o);
  last_ = b->work;
  {
    std::lock_guard lk(unpacker_->mu);
    unpacker_->pending.push_back(b);
  }
  // Unpack on completion (a completion thread); the queue owns the bucket until then.
  last_.on_complete([u = unpacker_, seq = b->seq](std::exception_ptr) { u->unpack_through(seq); });
  ++started_;
}

Work GradientBucketer::finish() {
  start_current();
  if (!last_.valid()) {
    // Nothing was added: an empty barrier-free completion.
    last_ = comm_.allreduce(nullptr, 0, dtype_, op_, options_);
  }
  return last_;
}

}  // namespace geoccl
