// The c10d ProcessGroup "geoccl" (torch 1.13 API) and its Work.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "geoccl/geoccl.h"

namespace pybind11 {
class object;
}  // namespace pybind11

namespace geoccl::python {

// One torch operation; it may be carried by several geoccl operations (alltoall with uneven
// splits). Completes on a completion thread of the communicator (never the one that runs
// collectives, so the future's callbacks may issue operations and wait on them): copies results
// back into non-contiguous / staged user tensors, then completes the future (running its then()
// callbacks), then wakes wait().
class GeocclWork : public c10d::Work {
 public:
  GeocclWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Runs exactly once.
  void complete(std::exception_ptr error);
  // recvAnysource: the sender, set before completion.
  int sourceRank() const override;
  int source_rank = -1;

  // Tensors the library reads or writes until completion (staging buffers, contiguous copies).
  std::vector<at::Tensor> keep;
  // Runs on success before the future completes: copy-back into the user's tensors.
  std::function<void()> finalize;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupGeoccl : public c10d::ProcessGroup {
 public:
  // Connects to the group (blocks until every rank has joined). `server` is the rendezvous store
  // this rank hosts (group rank 0), kept alive as long as the group. Every operation of the group
  // runs on priority class `priority` (a group for checkpoints and other bulk traffic: kBulk).
  ProcessGroupGeoccl(int rank, int size, Config cfg, std::shared_ptr<StoreServer> server,
                     Priority priority = Priority::kGradient);
  // A group on a communicator that exists already (an elastic epoch's: geoccl/elastic.h), shared
  // with its owner; its rank and size are the communicator's.
  explicit ProcessGroupGeoccl(std::shared_ptr<Communicator> comm, Priority priority = Priority::kGradient);
  ~ProcessGroupGeoccl() override;

  const std::string getBackendName() const override { return "geoccl"; }
  Communicator& communicator() { return *comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Priority priority() const { return priority_; }
  // Communicator::abort: every pending and later operation of the group fails (here and on every
  // reachable member) with kAborted; destroying the group afterwards does not wait for peers.
  // torch 1.13's c10d has no abort hook: geoccl.abort(pg) calls this.
  void abort(const std::string& reason) { comm_->abort(reason); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // allreduce of one tensor whose hops across domains use `compression` (geoccl/compression.h;
  // nullopt: the config's GEOCCL_WAN_COMPRESSION), with error feedback under `feedback_key` ("" =
  // none): what geoccl.hooks' DDP comm hook issues per bucket. Throws std::invalid_argument for an
  // explicit codec on anything but a float32 sum/avg, before anything is sent.
  c10::intrusive_ptr<c10d::Work> allreduce_compressed(const at::Tensor& tensor, ReduceOp op,
                                                      std::optional<Compression> compression,
                                                      std::string feedback_key,
                                                      std::chrono::milliseconds timeout);
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

 private:
  OpOptions op_options(std::chrono::milliseconds timeout) const;
  // recv and recvAnysource: the checked tensor, its Work and where the bytes land (the tensor, or
  // a contiguous copy written back on completion).
  struct Receive {
    c10::intrusive_ptr<GeocclWork> work;
    at::Tensor dst;
    struct {
      size_t count;
      DataType dtype;
    } elems;
  };
  Receive prepare_recv(std::vector<at::Tensor>& tensors, int tag, c10d::OpType type);

  std::shared_ptr<StoreServer> server_;  // destroyed after comm_
  std::shared_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  Priority priority_;
};

// The communicator behind a geoccl.Communicator or a ProcessGroupGeoccl (what torch.distributed
// hands out for backend "geoccl"). Throws TypeError for anything else.
Communicator& communicator_of(const pybind11::object& target);

}  // namespace geoccl::python
