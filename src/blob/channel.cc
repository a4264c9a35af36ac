#include "blob/channel.h"

#include <algorithm>
#include <string>
#include <vector>

namespace geoccl::blob {
namespace {

OpOptions bulk(const BlobOptions& o) {
  OpOptions op;
  op.timeout = o.timeout;
  op.priority = o.priority;
  return op;
}

class GroupChannel final : public BlobChannel {
 public:
  GroupChannel(Communicator& c, const BlobOptions& o) : comm_(c), op_(bulk(o)) {}
  int participants() const override { return comm_.size(); }
  int me() const override { return comm_.rank(); }
  int rank_of(int index) const override { return index; }
  void agree(std::span<int64_t> v) override {
    if (!v.empty())
      comm_.allreduce(v.data(), v.size(), DataType::kInt64, ReduceOp::kMax, op_).wait();
  }
  void agree(std::span<uint8_t> v) override {
    if (!v.empty())
      comm_.allreduce(v.data(), v.size(), DataType::kUInt8, ReduceOp::kMax, op_).wait();
  }
  Work move(void* buf, size_t bytes, int root) override {
    return comm_.broadcast(buf, bytes, DataType::kUInt8, root, op_);
  }

 private:
  Communicator& comm_;
  OpOptions op_;
};

class PairChannel final : public BlobChannel {
 public:
  PairChannel(Communicator& c, int peer, const BlobOptions& o)
      : comm_(c), peer_(peer), tag_(o.tag), op_(bulk(o)) {}
  int participants() const override { return 2; }
  int me() const override { return comm_.rank() < peer_ ? 0 : 1; }
  int rank_of(int index) const override { return index == me() ? comm_.rank() : peer_; }
  void agree(std::span<int64_t> v) override { exchange(v, DataType::kInt64); }
  void agree(std::span<uint8_t> v) override { exchange(v, DataType::kUInt8); }
  Work move(void* buf, size_t bytes, int root) override {
    if (root == me()) return comm_.send(buf, bytes, DataType::kUInt8, peer_, tag_, op_);
    return comm_.recv(buf, bytes, DataType::kUInt8, peer_, tag_, op_);
  }

 private:
  template <class T>
  void exchange(std::span<T> v, DataType t) {
    if (v.empty()) return;
    std::vector<T> theirs(v.size());
    // Point-to-point sends do not wait for the matching receive, so both sides send first.
    Work s = comm_.send(v.data(), v.size(), t, peer_, tag_, op_);
    Work r = comm_.recv(theirs.data(), v.size(), t, peer_, tag_, op_);
    s.wait();
    r.wait();
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::max(v[i], theirs[i]);
  }

  Communicator& comm_;
  int peer_;
  uint32_t tag_;
  OpOptions op_;
};

}  // namespace

std::unique_ptr<BlobChannel> group_channel(Communicator& comm, const BlobOptions& o) {
  return std::make_unique<GroupChannel>(comm, o);
}

std::unique_ptr<BlobChannel> pair_channel(Communicator& comm, int peer, const BlobOptions& o) {
  if (peer < 0 || peer >= comm.size() || peer == comm.rank())
    throw Error(ErrorCode::kInvalidArgument, "blob: peer " + std::to_string(peer) +
                                                 " is not another rank of this group of " +
                                                 std::to_string(comm.size()));
  return std::make_unique<PairChannel>(comm, peer, o);
}

}  // namespace geoccl::blob
