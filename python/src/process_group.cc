// The c10d ProcessGroup "geoccl": torch.distributed collectives on geoccl's Communicator.
#include "process_group.h"

#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "common.h"

namespace py = pybind11;

namespace geoccl::python {
namespace {

// Tags of user send/recv are torch ints >= 0; the library's own point-to-point traffic (alltoall
// with uneven splits) uses tags >= 2^31 so the two never match each other.
constexpr uint32_t kAlltoallTag = 0x80000001u;

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument("geoccl: " + what); }

void check_cpu(const at::Tensor& t, const char* what) {
  if (!t.defined()) invalid(std::string(what) + " is an undefined tensor");
  if (!t.device().is_cpu())
    invalid(std::string(what) + " must be a CPU tensor, got a tensor on " + t.device().str());
  if (t.is_sparse()) invalid(std::string(what) + " must be dense (sparse tensors are not supported)");
}

// The element type used to reduce `t`; throws for dtypes geoccl cannot reduce.
DataType reduce_dtype(const at::Tensor& t) {
  auto dt = to_geoccl_dtype(t.scalar_type());
  if (!dt)
    invalid(std::string("dtype ") + c10::toString(t.scalar_type()) +
            " is not supported for reductions (float32, float64, float16, bfloat16, int8, uint8, "
            "int32, int64)");
  return *dt;
}

// Data movement works on any dtype: its own element type when geoccl has one, else bytes.
struct Elems {
  size_t count;
  DataType dtype;
};
Elems move_elems(const at::Tensor& t, size_t numel) {
  if (auto dt = to_geoccl_dtype(t.scalar_type())) return {numel, *dt};
  return {numel * t.element_size(), DataType::kUInt8};
}

void same_dtype(const at::Tensor& a, const at::Tensor& b, const char* what) {
  if (a.scalar_type() != b.scalar_type())
    invalid(std::string(what) + ": tensors must have the same dtype, got " +
            c10::toString(a.scalar_type()) + " and " + c10::toString(b.scalar_type()));
}

void one_tensor(const std::vector<at::Tensor>& v, const char* what) {
  if (v.size() != 1)
    invalid(std::string(what) + " takes exactly one tensor per process, got " +
            std::to_string(v.size()));
}

// A contiguous buffer for `user`: the tensor itself, or a contiguous copy whose contents are
// copied back on success.
at::Tensor contiguous_out(const at::Tensor& user, GeocclWork& w) {
  if (user.is_contiguous()) return user;
  at::Tensor buf = user.contiguous();
  auto prev = std::move(w.finalize);
  w.finalize = [prev = std::move(prev), user, buf]() mutable {
    if (prev) prev();
    user.copy_(buf);
  };
  return buf;
}

// Copies block i of `flat` (numel of each target) into targets[i] after success.
void scatter_back(GeocclWork& w, at::Tensor flat, std::vector<at::Tensor> targets) {
  auto prev = std::move(w.finalize);
  w.finalize = [prev = std::move(prev), flat, targets]() mutable {
    if (prev) prev();
    int64_t off = 0;
    for (auto& t : targets) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
}

at::Tensor flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Completes `w` once every geoccl operation carrying it has completed; the first error wins.
void attach(const c10::intrusive_ptr<GeocclWork>& w, std::vector<Work> works) {
  if (works.empty()) {
    w->complete(nullptr);
    return;
  }
  struct Join {
    std::atomic<size_t> left;
    std::mutex mu;
    std::exception_ptr error;
  };
  auto j = std::make_shared<Join>();
  j->left = works.size();
  for (auto& gw : works) {
    gw.on_complete([w, j](std::exception_ptr e) {
      if (e) {
        std::lock_guard<std::mutex> lk(j->mu);
        if (!j->error) j->error = e;
      }
      if (j->left.fetch_sub(1) == 1) {
        std::exception_ptr err;
        {
          std::lock_guard<std::mutex> lk(j->mu);
          err = j->error;
        }
        w->complete(err);
      }
    });
  }
}

c10::intrusive_ptr<GeocclWork> make_work(int rank, c10d::OpType type,
                                         std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<GeocclWork>(rank, type, std::move(outputs));
}

}  // namespace

// ---- GeocclWork ----

GeocclWork::GeocclWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void GeocclWork::complete(std::exception_ptr error) {
  if (!error && finalize) {
    try {
      finalize();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finalize = nullptr;
  keep.clear();
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

int GeocclWork::sourceRank() const {
  if (source_rank < 0) return c10d::Work::sourceRank();  // torch's error: not a recvAnysource work
  return source_rank;
}

// ---- ProcessGroupGeoccl ----

ProcessGroupGeoccl::ProcessGroupGeoccl(int rank, int size, Config cfg,
                                       std::shared_ptr<StoreServer> server, Priority priority)
    : c10d::ProcessGroup(rank, size),
      server_(std::move(server)),
      timeout_(cfg.op_timeout),
      priority_(priority) {
  cfg.rank = rank;
  cfg.world_size = size;
  comm_ = std::make_unique<Communicator>(std::move(cfg));
}

ProcessGroupGeoccl::ProcessGroupGeoccl(std::shared_ptr<Communicator> comm, Priority priority)
    : c10d::ProcessGroup(comm->rank(), comm->size()),
      comm_(std::move(comm)),
      timeout_(comm_->config().op_timeout),
      priority_(priority) {}

ProcessGroupGeoccl::~ProcessGroupGeoccl() {
  // Pending futures may have Python callbacks that need the GIL on a completion thread: do not
  // hold it while the communicator shuts down (it runs the callbacks still queued).
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release nogil;
    comm_.reset();
  } else {
    comm_.reset();
  }
}

OpOptions ProcessGroupGeoccl::op_options(std::chrono::milliseconds timeout) const {
  OpOptions o;
  o.timeout = timeout.count() < 0 ? timeout_ : timeout;  // c10d's kUnsetTimeout is -1 ms
  o.priority = priority_;
  return o;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  one_tensor(tensors, "allreduce");
  const at::Tensor& t = tensors[0];
  check_cpu(t, "allreduce tensor");
  DataType dt = reduce_dtype(t);
  ReduceOp op = to_geoccl_op(opts.reduceOp);
  auto w = make_work(rank_, c10d::OpType::ALLREDUCE, tensors);
  at::Tensor buf = contiguous_out(t, *w);
  w->keep = {buf};
  attach(w, {comm_->allreduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), dt, op,
                              op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::allreduce_compressed(
    const at::Tensor& t, ReduceOp op, std::optional<Compression> compression,
    std::string feedback_key, std::chrono::milliseconds timeout) {
  check_cpu(t, "allreduce_compressed tensor");
  DataType dt = reduce_dtype(t);
  OpOptions o = op_options(timeout);
  o.compression = compression;
  o.feedback_key = std::move(feedback_key);
  auto w = make_work(rank_, c10d::OpType::ALLREDUCE, {t});
  at::Tensor buf = contiguous_out(t, *w);
  w->keep = {buf};
  Work gw = invalid_as_value_error(
      [&] { return comm_->allreduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), dt, op, o); });
  attach(w, {std::move(gw)});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) invalid("allreduce_coalesced needs at least one tensor");
  for (const auto& t : tensors) {
    check_cpu(t, "allreduce_coalesced tensor");
    same_dtype(tensors[0], t, "allreduce_coalesced");
  }
  DataType dt = reduce_dtype(tensors[0]);
  ReduceOp op = to_geoccl_op(opts.reduceOp);
  auto w = make_work(rank_, c10d::OpType::ALLREDUCE_COALESCED, tensors);
  at::Tensor flat = flatten(tensors);
  w->keep = {flat};
  scatter_back(*w, flat, tensors);
  attach(w, {comm_->allreduce(flat.data_ptr(), static_cast<size_t>(flat.numel()), dt, op,
                              op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  one_tensor(tensors, "broadcast");
  if (opts.rootTensor != 0) invalid("broadcast: rootTensor must be 0");
  const at::Tensor& t = tensors[0];
  check_cpu(t, "broadcast tensor");
  auto w = make_work(rank_, c10d::OpType::BROADCAST, tensors);
  at::Tensor buf = contiguous_out(t, *w);
  w->keep = {buf};
  Elems e = move_elems(buf, static_cast<size_t>(buf.numel()));
  attach(w, {comm_->broadcast(buf.data_ptr(), e.count, e.dtype, static_cast<int>(opts.rootRank),
                              op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  one_tensor(tensors, "reduce");
  if (opts.rootTensor != 0) invalid("reduce: rootTensor must be 0");
  const at::Tensor& t = tensors[0];
  check_cpu(t, "reduce tensor");
  DataType dt = reduce_dtype(t);
  ReduceOp op = to_geoccl_op(opts.reduceOp);
  auto w = make_work(rank_, c10d::OpType::REDUCE, tensors);
  at::Tensor buf = contiguous_out(t, *w);
  w->keep = {buf};
  attach(w, {comm_->reduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), dt, op,
                           static_cast<int>(opts.rootRank), op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  one_tensor(inputs, "allgather");
  if (outputs.size() != 1) invalid("allgather takes exactly one output list per process");
  const at::Tensor& in = inputs[0];
  check_cpu(in, "allgather input");
  auto& outs = outputs[0];
  if (static_cast<int>(outs.size()) != size_)
    invalid("allgather: the output list must hold " + std::to_string(size_) + " tensors, got " +
            std::to_string(outs.size()));
  for (const auto& o : outs) {
    check_cpu(o, "allgather output");
    same_dtype(in, o, "allgather");
    if (o.numel() != in.numel()) invalid("allgather: every output tensor must have the input's size");
  }
  auto w = make_work(rank_, c10d::OpType::ALLGATHER, outs);
  at::Tensor src = in.contiguous();
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  w->keep = {src, flat};
  scatter_back(*w, flat, outs);
  Elems e = move_elems(src, static_cast<size_t>(src.numel()));
  attach(w, {comm_->allgather(src.data_ptr(), flat.data_ptr(), e.count, e.dtype,
                              op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_cpu(input, "_allgather_base input");
  check_cpu(output, "_allgather_base output");
  same_dtype(input, output, "_allgather_base");
  if (output.numel() != input.numel() * size_)
    invalid("_allgather_base: the output must hold world_size times the input's elements");
  auto w = make_work(rank_, c10d::OpType::_ALLGATHER_BASE, {output});
  at::Tensor src = input.contiguous();
  at::Tensor dst = contiguous_out(output, *w);
  w->keep = {src, dst};
  Elems e = move_elems(src, static_cast<size_t>(src.numel()));
  attach(w, {comm_->allgather(src.data_ptr(), dst.data_ptr(), e.count, e.dtype,
                              op_options(opts.timeout))});
  return w;
}

// Every rank's inputs flattened into one block, all blocks gathered in one operation; output
// list r receives rank r's block, split along the inputs' sizes (as Gloo does).
c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  if (inputs.empty()) invalid("allgather_coalesced needs at least one input tensor");
  for (const auto& t : inputs) {
    check_cpu(t, "allgather_coalesced input");
    same_dtype(inputs[0], t, "allgather_coalesced");
  }
  if (static_cast<int>(outputs.size()) != size_)
    invalid("allgather_coalesced: the output must hold " + std::to_string(size_) + " lists (one per rank), got " +
            std::to_string(outputs.size()));
  std::vector<at::Tensor> targets;  // rank-major, the order of the gathered buffer
  for (const auto& list : outputs) {
    if (list.size() != inputs.size())
      invalid("allgather_coalesced: every output list must hold " + std::to_string(inputs.size()) +
              " tensors (as many as the input list), got " + std::to_string(list.size()));
    for (size_t i = 0; i < list.size(); ++i) {
      check_cpu(list[i], "allgather_coalesced output");
      same_dtype(inputs[0], list[i], "allgather_coalesced");
      if (list[i].numel() != inputs[i].numel())
        invalid("allgather_coalesced: output tensor " + std::to_string(i) +
                " of every list must have the size of input tensor " + std::to_string(i));
      targets.push_back(list[i]);
    }
  }
  auto w = make_work(rank_, c10d::OpType::ALLGATHER_COALESCED, targets);
  at::Tensor src = flatten(inputs);
  at::Tensor all = at::empty({src.numel() * size_}, src.options());
  w->keep = {src, all};
  scatter_back(*w, all, std::move(targets));
  Elems e = move_elems(src, static_cast<size_t>(src.numel()));
  attach(w, {comm_->allgather(src.data_ptr(), all.data_ptr(), e.count, e.dtype,
                              op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  one_tensor(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) invalid("gather: invalid root rank " + std::to_string(root));
  const at::Tensor& in = inputs[0];
  check_cpu(in, "gather input");
  at::Tensor src = in.contiguous();
  Elems e = move_elems(src, static_cast<size_t>(src.numel()));
  if (rank_ != root) {
    if (!outputs.empty() && !outputs[0].empty())
      invalid("gather: only the root may pass output tensors");
    auto w = make_work(rank_, c10d::OpType::GATHER, {});
    w->keep = {src};
    attach(w, {comm_->gather(src.data_ptr(), nullptr, e.count, e.dtype, root,
                             op_options(opts.timeout))});
    return w;
  }
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_)
    invalid("gather: the root needs one output list of " + std::to_string(size_) + " tensors");
  auto& outs = outputs[0];
  for (const auto& o : outs) {
    check_cpu(o, "gather output");
    same_dtype(in, o, "gather");
    if (o.numel() != in.numel()) invalid("gather: every output tensor must have the input's size");
  }
  auto w = make_work(rank_, c10d::OpType::GATHER, outs);
  at::Tensor flat = at::empty({in.numel() * size_}, in.options());
  w->keep = {src, flat};
  scatter_back(*w, flat, outs);
  attach(w, {comm_->gather(src.data_ptr(), flat.data_ptr(), e.count, e.dtype, root,
                           op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  one_tensor(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_) invalid("scatter: invalid root rank " + std::to_string(root));
  const at::Tensor& out = outputs[0];
  check_cpu(out, "scatter output");
  auto w = make_work(rank_, c10d::OpType::SCATTER, outputs);
  at::Tensor dst = contiguous_out(out, *w);
  Elems e = move_elems(dst, static_cast<size_t>(dst.numel()));
  at::Tensor flat;
  if (rank_ == root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_)
      invalid("scatter: the root needs one input list of " + std::to_string(size_) + " tensors");
    for (const auto& i : inputs[0]) {
      check_cpu(i, "scatter input");
      same_dtype(out, i, "scatter");
      if (i.numel() != out.numel()) invalid("scatter: every input tensor must have the output's size");
    }
    flat = flatten(inputs[0]);
  } else if (!inputs.empty() && !inputs[0].empty()) {
    invalid("scatter: only the root may pass input tensors");
  }
  w->keep = {dst};
  if (flat.defined()) w->keep.push_back(flat);
  attach(w, {comm_->scatter(flat.defined() ? flat.data_ptr() : nullptr, dst.data_ptr(), e.count,
                            e.dtype, root, op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  one_tensor(outputs, "reduce_scatter");
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_)
    invalid("reduce_scatter needs one input list of " + std::to_string(size_) + " tensors");
  const at::Tensor& out = outputs[0];
  check_cpu(out, "reduce_scatter output");
  for (const auto& i : inputs[0]) {
    check_cpu(i, "reduce_scatter input");
    same_dtype(out, i, "reduce_scatter");
    if (i.numel() != out.numel()) invalid("reduce_scatter: every input tensor must have the output's size");
  }
  DataType dt = reduce_dtype(out);
  ReduceOp op = to_geoccl_op(opts.reduceOp);
  auto w = make_work(rank_, c10d::OpType::REDUCE_SCATTER, outputs);
  at::Tensor flat = flatten(inputs[0]);
  at::Tensor dst = contiguous_out(out, *w);
  w->keep = {flat, dst};
  attach(w, {comm_->reduce_scatter(flat.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()),
                                   dt, op, op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_cpu(input, "_reduce_scatter_base input");
  check_cpu(output, "_reduce_scatter_base output");
  same_dtype(input, output, "_reduce_scatter_base");
  if (input.numel() != output.numel() * size_)
    invalid("_reduce_scatter_base: the input must hold world_size times the output's elements");
  DataType dt = reduce_dtype(output);
  ReduceOp op = to_geoccl_op(opts.reduceOp);
  auto w = make_work(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, {output});
  at::Tensor src = input.contiguous();
  at::Tensor dst = contiguous_out(output, *w);
  w->keep = {src, dst};
  attach(w, {comm_->reduce_scatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()),
                                   dt, op, op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_cpu(input, "alltoall_base input");
  check_cpu(output, "alltoall_base output");
  same_dtype(input, output, "alltoall_base");
  auto w = make_work(rank_, c10d::OpType::ALLTOALL_BASE, {output});
  at::Tensor src = input.contiguous();
  at::Tensor dst = contiguous_out(output, *w);
  w->keep = {src, dst};
  const int64_t n = size_;
  auto equal_split = [&](const std::vector<int64_t>& s, const at::Tensor& t) {
    if (s.empty()) return true;
    for (auto v : s)
      if (v * n != (t.dim() ? t.size(0) : 0)) return false;
    return true;
  };
  if (!output_splits.empty() && static_cast<int64_t>(output_splits.size()) != n)
    invalid("alltoall_base: output_split_sizes must have world_size entries");
  if (!input_splits.empty() && static_cast<int64_t>(input_splits.size()) != n)
    invalid("alltoall_base: input_split_sizes must have world_size entries");
  if (equal_split(output_splits, dst) && equal_split(input_splits, src)) {
    if (src.numel() != dst.numel() || src.numel() % n != 0)
      invalid("alltoall_base: input and output must have the same size, divisible by world_size");
    Elems e = move_elems(src, static_cast<size_t>(src.numel() / n));
    attach(w, {comm_->alltoall(src.data_ptr(), dst.data_ptr(), e.count, e.dtype,
                               op_options(opts.timeout))});
    return w;
  }
  // Uneven splits along dim 0: one send and one receive per peer.
  if (src.dim() == 0 || dst.dim() == 0) invalid("alltoall_base: split sizes need tensors of dim >= 1");
  const int64_t in_row = src.size(0) ? src.numel() / src.size(0) : 0;
  const int64_t out_row = dst.size(0) ? dst.numel() / dst.size(0) : 0;
  auto splits = [&](std::vector<int64_t> s, int64_t rows) {
    if (s.empty()) s.assign(static_cast<size_t>(n), rows / n);
    int64_t sum = 0;
    for (auto v : s) {
      if (v < 0) invalid("alltoall_base: negative split size");
      sum += v;
    }
    if (sum != rows) invalid("alltoall_base: split sizes must add up to the tensor's first dimension");
    return s;
  };
  auto in_s = splits(input_splits, src.size(0));
  auto out_s = splits(output_splits, dst.size(0));
  const size_t esz = src.element_size();
  auto* sp = static_cast<uint8_t*>(src.data_ptr());
  auto* dp = static_cast<uint8_t*>(dst.data_ptr());
  std::vector<size_t> in_off(static_cast<size_t>(n)), out_off(static_cast<size_t>(n));
  size_t io = 0, oo = 0;
  for (int64_t j = 0; j < n; ++j) {
    in_off[j] = io;
    out_off[j] = oo;
    io += static_cast<size_t>(in_s[j] * in_row) * esz;
    oo += static_cast<size_t>(out_s[j] * out_row) * esz;
  }
  const size_t mine_in = static_cast<size_t>(in_s[rank_] * in_row) * esz;
  const size_t mine_out = static_cast<size_t>(out_s[rank_] * out_row) * esz;
  if (mine_in != mine_out) invalid("alltoall_base: this rank's own block has different sizes in input and output");
  if (mine_in) std::memcpy(dp + out_off[rank_], sp + in_off[rank_], mine_in);
  std::vector<Work> works;
  OpOptions o = op_options(opts.timeout);
  for (int64_t k = 1; k < n; ++k) {
    const int to = static_cast<int>((rank_ + k) % n);
    const int from = static_cast<int>((rank_ - k + n) % n);
    size_t sbytes = static_cast<size_t>(in_s[to] * in_row) * esz;
    size_t rbytes = static_cast<size_t>(out_s[from] * out_row) * esz;
    if (sbytes) works.push_back(comm_->send(sp + in_off[to], sbytes, DataType::kUInt8, to, kAlltoallTag, o));
    if (rbytes) works.push_back(comm_->recv(dp + out_off[from], rbytes, DataType::kUInt8, from, kAlltoallTag, o));
  }
  attach(w, std::move(works));
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
    invalid("alltoall: input and output lists must hold world_size tensors each");
  for (int i = 0; i < size_; ++i) {
    check_cpu(inputs[i], "alltoall input");
    check_cpu(outputs[i], "alltoall output");
    same_dtype(inputs[0], inputs[i], "alltoall");
    same_dtype(inputs[0], outputs[i], "alltoall");
  }
  // Flatten into one buffer each way, then the uneven-split path handles any sizes.
  at::Tensor in = flatten(inputs);
  int64_t out_total = 0;
  std::vector<int64_t> in_s, out_s;
  for (int i = 0; i < size_; ++i) {
    in_s.push_back(inputs[i].numel());
    out_s.push_back(outputs[i].numel());
    out_total += outputs[i].numel();
  }
  at::Tensor out = at::empty({out_total}, inputs[0].options());
  auto inner = alltoall_base(out, in, out_s, in_s, opts);
  auto iw = c10::static_intrusive_pointer_cast<GeocclWork>(inner);
  auto w = make_work(rank_, c10d::OpType::ALLTOALL, outputs);
  w->keep = {in, out};
  scatter_back(*w, out, outputs);
  // Chain: the outer Work completes when the inner one does.
  iw->getFuture()->addCallback([w](c10::ivalue::Future& f) {
    w->complete(f.hasError() ? f.exception_ptr() : nullptr);
  });
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::barrier(const c10d::BarrierOptions& opts) {
  auto w = make_work(rank_, c10d::OpType::BARRIER, {});
  attach(w, {comm_->barrier(op_options(opts.timeout))});
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  one_tensor(tensors, "send");
  if (tag < 0) invalid("send: tag must be >= 0");
  const at::Tensor& t = tensors[0];
  check_cpu(t, "send tensor");
  auto w = make_work(rank_, c10d::OpType::SEND, tensors);
  at::Tensor src = t.contiguous();
  w->keep = {src};
  Elems e = move_elems(src, static_cast<size_t>(src.numel()));
  attach(w, {comm_->send(src.data_ptr(), e.count, e.dtype, dst, static_cast<uint32_t>(tag),
                         op_options(timeout_))});
  return w;
}

ProcessGroupGeoccl::Receive ProcessGroupGeoccl::prepare_recv(std::vector<at::Tensor>& tensors, int tag,
                                                            c10d::OpType type) {
  one_tensor(tensors, "recv");
  if (tag < 0) invalid("recv: tag must be >= 0");
  const at::Tensor& t = tensors[0];
  check_cpu(t, "recv tensor");
  Receive r{make_work(rank_, type, tensors), {}, {}};
  r.dst = contiguous_out(t, *r.work);
  r.work->keep = {r.dst};
  const Elems e = move_elems(r.dst, static_cast<size_t>(r.dst.numel()));
  r.elems = {e.count, e.dtype};
  return r;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  Receive r = prepare_recv(tensors, tag, c10d::OpType::RECV);
  attach(r.work, {comm_->recv(r.dst.data_ptr(), r.elems.count, r.elems.dtype, src,
                              static_cast<uint32_t>(tag), op_options(timeout_))});
  return r.work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGeoccl::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  Receive r = prepare_recv(tensors, tag, c10d::OpType::RECVANYSOURCE);
  Work gw = comm_->recv_any(r.dst.data_ptr(), r.elems.count, r.elems.dtype, static_cast<uint32_t>(tag),
                            op_options(timeout_));
  // The source is known once the receive has completed, before the torch Work completes.
  auto copy_back = std::move(r.work->finalize);
  r.work->finalize = [raw = r.work.get(), gw, copy_back] {
    raw->source_rank = gw.source();
    if (copy_back) copy_back();
  };
  attach(r.work, {gw});
  return r.work;
}

// ---- bindings ----

namespace {

// A torch ReduceOp (dist.ReduceOp.AVG) or its name ("avg", "sum", ...).
ReduceOp reduce_op_of(const py::object& op) {
  if (py::isinstance<py::str>(op)) return parse_op(op.cast<std::string>());
  try {
    return to_geoccl_op(op.cast<c10d::ReduceOp>());
  } catch (const py::cast_error&) {
    throw py::type_error("geoccl: op must be a torch.distributed.ReduceOp or a name (sum, avg, ...), got " +
                         std::string(py::str(op.get_type())));
  }
}

}  // namespace

void bind_process_group(py::module_& m) {
  py::class_<ProcessGroupGeoccl, c10::intrusive_ptr<ProcessGroupGeoccl>, c10d::ProcessGroup>(
      m, "ProcessGroupGeoccl", "torch.distributed process group on geoccl.")
      .def(py::init([](int rank, int size, const std::string& master_addr, int master_port,
                       const std::string& session, double timeout_s,
                       std::shared_ptr<StoreServer> server, const std::string& priority) {
             const Priority pr = parse_priority(priority);
             Config c = Config::from_env();  // GEOCCL_BIND_ADDR, GEOCCL_DOMAIN, ...
             c.master_addr = master_addr;
             c.master_port = static_cast<uint16_t>(master_port);
             c.session = session;
             c.op_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
             if (c.connect_timeout > c.op_timeout) c.connect_timeout = c.op_timeout;
             py::gil_scoped_release nogil;
             return c10::make_intrusive<ProcessGroupGeoccl>(rank, size, std::move(c), std::move(server), pr);
           }),
           py::arg("rank"), py::arg("size"), py::arg("master_addr"), py::arg("master_port"),
           py::arg("session"), py::arg("timeout"), py::arg("server") = nullptr,
           py::arg("priority") = "gradient")
      .def_property_readonly(
          "priority", [](const ProcessGroupGeoccl& pg) { return priority_name(pg.priority()); },
          "Priority class of every operation of the group: \"gradient\" or \"bulk\".")
      .def(
          "allreduce_compressed",
          [](ProcessGroupGeoccl& pg, const at::Tensor& tensor, const py::object& op,
             std::optional<std::string> compression, const std::string& feedback_key,
             std::optional<double> timeout_s) {
            const ReduceOp o = reduce_op_of(op);
            const auto c = parse_compression(compression);
            const auto timeout = timeout_s ? std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0))
                                           : std::chrono::milliseconds(-1);
            py::gil_scoped_release nogil;
            return pg.allreduce_compressed(tensor, o, c, feedback_key, timeout);
          },
          py::arg("tensor"), py::arg("op") = "avg", py::arg("compression") = py::none(),
          py::arg("feedback_key") = "", py::arg("timeout") = py::none(),
          "In-place allreduce of one CPU tensor whose hops across domains use `compression` (a "
          "spelling of geoccl.compression_name; None = GEOCCL_WAN_COMPRESSION), with error "
          "feedback under `feedback_key` (\"\" = none). op: a torch ReduceOp or \"sum\", \"avg\", "
          "...; timeout in seconds (None: the group's). Returns a torch Work whose get_future() "
          "holds [tensor]. Every rank must pass the same op and compression. ValueError for an "
          "explicit codec on anything but float32 SUM/AVG.")
      .def(
          "topology",
          [](ProcessGroupGeoccl& pg) {
            const TopologyInfo t = pg.communicator().topology();
            py::dict d;
            d["domain_of"] = t.domain_of;
            d["names"] = t.names;
            d["wan_one_way_ms"] = t.wan_one_way_ms;
            d["wan_rate_mbps"] = t.wan_rate_mbps;
            d["replans"] = t.replans;
            d["replan_change"] = t.replan_change;
            return d;
          },
          "The group's domains and the path figures in force (Communicator::topology): domain_of, "
          "names, wan_one_way_ms and wan_rate_mbps (domains x domains, row-major; empty without "
          "measured paths), replans (how many times re-planning replaced them) and replan_change.")
      .def(
          "predicted_allreduce_ms",
          [](ProcessGroupGeoccl& pg, int64_t count, std::optional<std::string> compression) {
            if (count < 0) throw py::value_error("count must be >= 0");
            const auto c = parse_compression(compression);
            return pg.communicator().predicted_allreduce_ms(static_cast<size_t>(count), c ? *c : Compression{});
          },
          py::arg("count"), py::arg("compression") = py::none(),
          "The cost model's time in ms of a float32 allreduce of `count` values with `compression` "
          "on the hops across domains (None: uncompressed), on the path figures in force (they "
          "change when the group re-plans); 0 without measured paths. What compression \"auto\" "
          "compares.")
      .def(
          "compression_stats",
          [](ProcessGroupGeoccl& pg) {
            return compression_stats_dict(pg.communicator().compression_stats());
          },
          "What compressed allreduces of this group did on this rank: calls, elements_encoded, "
          "bytes_encoded, feedback_keys, feedback_bytes (error-feedback residual memory).")
      .def(
          "forget_feedback",
          [](ProcessGroupGeoccl& pg, const std::string& key) {
            py::gil_scoped_release nogil;
            pg.communicator().forget_feedback(key);
          },
          py::arg("key") = "",
          "Drops the error-feedback residual kept under key (\"\" = all of them).")
      .def_property_readonly("op_timeout", &ProcessGroupGeoccl::timeout,
                             "Deadline of every operation (the group's timeout).")
      .def_property_readonly(
          "epoch", [](ProcessGroupGeoccl& pg) { return pg.communicator().epoch(); },
          "The membership epoch of the group's communicator (geoccl.elastic).")
      .def(
          "abort",
          [](ProcessGroupGeoccl& pg, const std::string& reason) {
            py::gil_scoped_release nogil;
            pg.abort(reason);
          },
          py::arg("reason") = "",
          "Fails every pending and later operation of the group, here and on every reachable "
          "member, with GeocclError (aborted, naming this rank and the reason).");
}

Communicator& communicator_of(const py::object& target) {
  if (py::isinstance<Communicator>(target)) return target.cast<Communicator&>();
  if (py::isinstance<ProcessGroupGeoccl>(target))
    return target.cast<ProcessGroupGeoccl&>().communicator();
  throw py::type_error(
      "geoccl: expected a geoccl.Communicator or a process group of backend \"geoccl\", got " +
      std::string(py::str(target.get_type())));
}

}  // namespace geoccl::python
