// The communicator: runs the start-up pipeline (api/startup/), then validates calls and hands
// each to the operation engine (api/op_engine.h) with the plan snapshot current when it is issued
// (api/plan.h).
#include <memory>
#include <optional>

#include "api/op_engine.h"
#include "api/peer_stats.h"
#include "api/plan.h"
#include "api/replanner.h"
#include "api/startup/startup.h"
#include "collectives/collectives.h"
#include "collectives/cost_model.h"
#include "collectives/planner.h"
#include "collectives/wan_codec.h"
#include "compression/codec.h"
#include "compression/error_feedback.h"
#include "compression/sparse_piece.h"
#include "core/logging.h"
#include "geoccl/communicator.h"
#include "membership/rendezvous.h"
#include "metrics/comm_metrics.h"
#include "metrics/exporter.h"
#include "metrics/trace.h"
#include "runtime/event_loop.h"
#include "runtime/progress.h"
#include "security/secret.h"
#include "transport/group.h"
#include "transport/router.h"

namespace geoccl {

using collectives::OpContext;
using protocol::FrameHeader;
using protocol::OpKind;

class CommunicatorImpl {
 public:
  explicit CommunicatorImpl(Config cfg);
  ~CommunicatorImpl();

  const Config& config() const { return cfg_; }
  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.world_size; }
  transport::Transport& transport() { return *router_; }

  // Queues a collective. `algo`: the algorithm's name for the metrics (static storage); null for
  // the communicator's own operations, which are not counted.
  Work submit(FrameHeader h, const OpOptions& o, std::function<void(OpContext&)> run, const char* algo = nullptr);
  Work submit_p2p(bool is_send, int peer, FrameHeader h, const OpOptions& o, std::span<uint8_t> data) {
    return engine_->submit_p2p(is_send, peer, h, o.timeout.value_or(cfg_.op_timeout), o.priority, data);
  }
  const std::string& algo(const OpOptions& o) const { return o.algo.empty() ? cfg_.algo : o.algo; }
  // The plan an operation issued now is made with.
  std::shared_ptr<const api::PlanSnapshot> plan() const { return plans_.current(); }
  // The WAN compression of an allreduce of `bytes` on `t`/`op` with options `o` under `plan`, or
  // nullopt (uncompressed). Throws kInvalidArgument for an explicit codec that cannot apply.
  std::optional<collectives::WanCompression> wan_compression(const api::PlanSnapshot& plan, const OpOptions& o,
                                                             size_t bytes, DataType t, ReduceOp op);
  // An allreduce issued with this WAN codec: the metrics' per-codec series.
  void note_codec(const std::string& codec, uint64_t bytes) {
    if (metrics_) metrics_->record_codec(codec, bytes);
  }
  CompressionStats compression_stats() const;
  compression::FeedbackStore& feedback() { return feedback_; }
  void abort(const std::string& reason);

 private:
  // Runs one set-up collective to its end (start-up steps, the trace's clock offset).
  void setup_collective(FrameHeader h, std::function<void(OpContext&)> run) { submit(h, {}, std::move(run)).wait(); }
  void start_metrics();

  Config cfg_;
  membership::RendezvousInfo rdv_;
  runtime::EventLoop loop_;
  runtime::Progress progress_;
  std::unique_ptr<transport::Group> group_;
  std::unique_ptr<transport::Router> router_;
  api::PlanOwner plans_;
  compression::FeedbackStore feedback_;
  collectives::CompressionCounters compressed_;
  // Observability (docs/metrics.md): null when off. The exporter is stopped first on
  // destruction: a scrape reads the router.
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<metrics::CommMetrics> metrics_;
  std::unique_ptr<metrics::HttpExporter> exporter_;
  std::unique_ptr<metrics::TraceWriter> trace_;  // GEOCCL_TRACE
  std::unique_ptr<api::OpEngine> engine_;
  std::unique_ptr<api::Replanner> replanner_;  // measured paths and replan_ops > 0
};

CommunicatorImpl::CommunicatorImpl(Config cfg) : cfg_(std::move(cfg)) {
  cfg_.validate();
  core::LogLevel level;
  if (core::parse_log_level(cfg_.log_level, &level)) core::set_log_level(level);
  core::set_log_tag(cfg_.rank, cfg_.domain);
  if (!cfg_.trace_dir.empty())
    trace_ = std::make_unique<metrics::TraceWriter>(cfg_.trace_dir, cfg_.rank, cfg_.world_size, cfg_.domain);
  if (cfg_.metrics_port > 0) {
    registry_ = std::make_unique<metrics::Registry>();
    metrics_ = std::make_unique<metrics::CommMetrics>(*registry_, cfg_.rank, cfg_.world_size, cfg_.domain,
                                                      static_cast<double>(cfg_.metrics_link_bps));
  }
  // Step "rendezvous". A group of one needs no network; the router still exists (with no device)
  // so collectives have a peer model to ask (they return before any I/O).
  if (cfg_.world_size > 1) rdv_ = membership::join_store(cfg_);
  group_ = std::make_unique<transport::Group>(loop_, cfg_.rank, cfg_.world_size, rdv_.session_id,
                                              rdv_.params.hash(), [this] { progress_.notify(); });
  if (rdv_.secret) {
    group_->set_security(security::job_key(*rdv_.secret, rdv_.session_id, security::offered_ciphers(cfg_.cipher)));
  } else if (cfg_.world_size > 1 && !cfg_.domain.empty() && !cfg_.allow_insecure) {
    GEOCCL_LOG(kWarn, "no group secret (GEOCCL_SECRET / GEOCCL_SECRET_FILE) in a multi-domain job: traffic "
                      "between ranks is neither authenticated nor encrypted, and anyone who reaches a rank "
                      "can join or inject frames (docs/security.md; GEOCCL_ALLOW_INSECURE=1 silences this)");
  }
  // A handler that threw, or a loop that died: the group fails with the reason on every rank
  // (from the loop thread while it runs; a dead loop fails it directly).
  loop_.set_error_handler([this](const std::string& why) {
    if (loop_.in_loop_thread() && loop_.alive())
      group_->fail(ErrorCode::kInternal, "I/O thread: " + why, true);
    else
      group_->fail(ErrorCode::kIo, "I/O thread stopped: " + why, false);
  });
  // Step "connect", then the engine that runs the set-up collectives of the later steps.
  router_ = api::startup::connect(cfg_, *group_, rdv_);
  engine_ = std::make_unique<api::OpEngine>(*router_, *group_, progress_, cfg_.rank, cfg_.world_size, cfg_.epoch,
                                            cfg_.chunk_bytes, metrics_.get(), trace_.get());
  try {
    const api::startup::Context ctx{cfg_, *router_, [this](FrameHeader h, std::function<void(OpContext&)> run) {
                                      setup_collective(h, std::move(run));
                                    }};
    plans_.publish(api::startup::plan(ctx));
    if (metrics_) start_metrics();
    if (trace_ && cfg_.world_size > 1) {
      // The offset of this rank's clock to rank 0's, for `geoccl trace merge`.
      FrameHeader h;
      h.kind = OpKind::kBarrier;
      h.dtype = static_cast<uint8_t>(DataType::kUInt8);
      h.tag = 0x434c434b;  // "CLCK"
      collectives::ClockOffset off;
      setup_collective(h, [&](OpContext& c) { off = collectives::measure_clock_offset(c, 5, &metrics::TraceWriter::now_us); });
      trace_->set_clock_offset(off.offset_us, off.rtt_us);
    }
  } catch (...) {
    engine_->stop();  // before members are destroyed
    throw;
  }
  // Last: nothing after it throws. A leader samples its paths.
  if (!plans_.current()->paths.empty() && cfg_.replan_ops > 0)
    replanner_ = std::make_unique<api::Replanner>(
        plans_, *router_,
        [this](FrameHeader h, std::function<void(OpContext&)> run) { return submit(h, {}, std::move(run)); },
        cfg_.rank, cfg_.replan_ops, cfg_.replan_persist);
}

CommunicatorImpl::~CommunicatorImpl() {
  exporter_.reset();
  replanner_.reset();
  // Operations the user did not wait for fail on every rank, rather than hang the peers.
  if (engine_->close())
    router_->abort(ErrorCode::kAborted, "rank " + std::to_string(cfg_.rank) +
                                            " destroyed its communicator with operations pending");
  engine_->stop();
  router_.reset();
}

void CommunicatorImpl::start_metrics() {
  const auto& topo = plans_.current()->topo;
  metrics_->set_topology(topo.domain_of, topo.names);
  metrics_->set_peer_source([this] {
    std::vector<metrics::PeerFigures> out;
    for (const auto& l : router_->stats()) out.push_back(api::to_peer_figures(l));
    return out;
  });
  exporter_ = std::make_unique<metrics::HttpExporter>(*registry_, cfg_.metrics_bind, cfg_.metrics_port);
  GEOCCL_LOG(kInfo, "metrics at http://" << cfg_.metrics_bind << ":" << exporter_->port() << "/metrics");
}

Work CommunicatorImpl::submit(FrameHeader h, const OpOptions& o, std::function<void(OpContext&)> run,
                              const char* algo) {
  Work w = engine_->submit(h, o.timeout.value_or(cfg_.op_timeout), o.priority, std::move(run), algo);
  if (replanner_ && algo && o.priority == Priority::kGradient) replanner_->after_collective();
  return w;
}

void CommunicatorImpl::abort(const std::string& reason) {
  // The transport fails every pending request and tells every peer; the workers wake up, and an
  // operation that starts from now on fails before it posts anything.
  router_->abort(ErrorCode::kAborted, "rank " + std::to_string(cfg_.rank) + " aborted the communicator" +
                                          (reason.empty() ? "" : ": " + reason));
  progress_.notify();
}

// ---------------------------------------------------------------------------------------------
// Public API: validation, then a closure per operation.

namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::kInvalidArgument, what); }

void check_dtype(DataType t) {
  if (!is_valid(t)) invalid("unknown dtype " + std::to_string(static_cast<int>(t)));
}
void check_op(ReduceOp op) {
  if (!is_valid(op)) invalid("unknown reduce op " + std::to_string(static_cast<int>(op)));
}
void check_buf(const void* p, size_t count, const char* name) {
  if (!p && count > 0) invalid(std::string(name) + " is null but count > 0");
}
size_t checked_bytes(size_t count, DataType t, size_t mult = 1) {
  const size_t es = dtype_size(t);
  if (count > SIZE_MAX / es / mult) invalid("buffer size overflows");
  return count * es;
}

FrameHeader header(OpKind kind, DataType t, size_t bytes, uint8_t op = 0, uint32_t tag = 0) {
  FrameHeader h;
  h.kind = kind;
  h.dtype = static_cast<uint8_t>(t);
  h.reduce_op = op;
  h.tag = tag;
  h.op_bytes = bytes;
  return h;
}

}  // namespace

Communicator::Communicator(Config cfg) : impl_(std::make_unique<CommunicatorImpl>(std::move(cfg))) {}
Communicator::~Communicator() = default;

std::unique_ptr<Communicator> Communicator::from_env() {
  return std::make_unique<Communicator>(Config::from_env());
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
const Config& Communicator::config() const { return impl_->config(); }
uint32_t Communicator::epoch() const { return impl_->config().epoch; }
void Communicator::abort(const std::string& reason) { impl_->abort(reason); }
std::vector<PeerStats> Communicator::peer_stats() const {
  std::vector<PeerStats> out;
  for (const auto& l : impl_->transport().stats()) out.push_back(api::to_peer_stats(l));
  return out;
}
TopologyInfo Communicator::topology() const { return impl_->plan()->info(); }

std::optional<collectives::WanCompression> CommunicatorImpl::wan_compression(const api::PlanSnapshot& plan,
                                                                             const OpOptions& o, size_t bytes,
                                                                             DataType t, ReduceOp op) {
  const bool explicit_codec = o.compression.has_value();
  const Compression z = explicit_codec ? *o.compression : plan.wan_codec;
  if (!z.enabled()) return std::nullopt;
  const bool applies = t == DataType::kFloat32 && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  if (explicit_codec) {
    if (!applies)
      invalid("compression " + z.name() + " needs a float32 sum or avg allreduce, got " +
              std::string(dtype_name(t)) + " " + std::string(reduce_op_name(op)));
    (void)Compression::parse(z.name());  // a ratio out of range, an unknown codec
  } else if (!applies || bytes < cfg_.wan_compression_min_bytes) {
    return std::nullopt;
  }
  collectives::WanCompression w;
  // The public Codec and the format's CodecId number the codecs alike.
  constexpr auto same = [](Codec a, compression::CodecId b) { return int(a) == int(b); };
  using compression::CodecId;
  static_assert(
      same(Codec::kFp16, CodecId::kFp16) && same(Codec::kBf16, CodecId::kBf16) &&
      same(Codec::kInt8, CodecId::kInt8) && same(Codec::kInt4, CodecId::kInt4) &&
      same(Codec::kTopK, CodecId::kTopK) && same(Codec::kInt2, CodecId::kInt2) &&
      same(Codec::kInt2Sr, CodecId::kInt2Sr) && same(Codec::kTopKInt8, CodecId::kTopKInt8) &&
      same(Codec::kTopKInt4, CodecId::kTopKInt4) && same(Codec::kTopKInt2, CodecId::kTopKInt2) &&
      same(Codec::kTopKInt2, compression::kLastCodec));
  w.spec.codec = static_cast<compression::CodecId>(z.codec);
  if (z.is_topk()) w.spec.k = compression::topk_k_for_ratio(z.topk_ratio);
  w.algo = z.algo;
  w.name = z.name();
  w.feedback = &feedback_;
  w.key = o.feedback_key;
  w.counters = &compressed_;
  return w;
}

CompressionStats CommunicatorImpl::compression_stats() const {
  CompressionStats s;
  s.calls = compressed_.calls.load(std::memory_order_relaxed);
  s.elements_encoded = compressed_.elements.load(std::memory_order_relaxed);
  s.bytes_encoded = compressed_.bytes.load(std::memory_order_relaxed);
  s.feedback_keys = feedback_.keys();
  s.feedback_bytes = feedback_.bytes();
  return s;
}

CompressionStats Communicator::compression_stats() const { return impl_->compression_stats(); }

void Communicator::forget_feedback(const std::string& key) {
  if (key.empty()) impl_->feedback().forget_all();
  else impl_->feedback().forget(key);
}

AllreducePlan Communicator::plan_allreduce(size_t count, DataType t, const OpOptions& o) const {
  const size_t bytes = checked_bytes(count, t);
  const auto in = impl_->plan();
  const auto p = in->allreduce(bytes, dtype_size(t), impl_->algo(o),
                               impl_->wan_compression(*in, o, bytes, t, ReduceOp::kSum).has_value());
  return {collectives::algo_name(p.algo), p.why, p.predicted_ms};
}

namespace {

// Only the hierarchical plans have WAN hops of their own to compress.
bool compresses(collectives::Algo a) {
  return a == collectives::Algo::kHierarchical || a == collectives::Algo::kHierarchicalSmall ||
         a == collectives::Algo::kHierarchicalDirect || a == collectives::Algo::kHierarchicalLeaders;
}

}  // namespace

double Communicator::predicted_allreduce_ms(size_t count, const Compression& codec) const {
  const auto in = impl_->plan();
  if (in->paths.empty() || count == 0) return 0;
  const size_t bytes = checked_bytes(count, DataType::kFloat32);
  const std::string& algo = impl_->algo({});
  const double plain = std::max(0.0, in->allreduce(bytes, 4, algo, false).predicted_ms);
  // A codec applies only where the call would run a hierarchical plan (GEOCCL_ALGO may force
  // another): then it is the uncompressed call.
  const collectives::Algo runs = in->allreduce(bytes, 4, algo, true).algo;
  if (!codec.enabled() || !compresses(runs)) return plain;
  compression::CodecSpec spec;
  spec.codec = static_cast<compression::CodecId>(codec.codec);
  if (codec.is_topk()) spec.k = compression::topk_k_for_ratio(codec.topk_ratio);
  double wire = static_cast<double>(compression::encoded_size(spec, count));
  // The WAN step as a hierarchical ring of the encoded bytes: the ring form sends 2(k-1)/k
  // encodings per uplink, as that ring does; the allgather form k-1, as a ring of k/2 times them.
  collectives::WanCompression form;
  form.spec = spec;
  form.algo = codec.algo;
  const int k = in->topo.domains();
  if (form.resolve(k) == CompressedAlgo::kAllgather) wire *= k / 2.0;
  const size_t wire_bytes = (static_cast<size_t>(wire) + 3) / 4 * 4;
  // The form the call runs (the planner's or a forced one), at the encoded bytes.
  return std::max(0.0, collectives::predicted_ms(in->topo, in->paths, runs, wire_bytes, 4, in->chunk_bytes));
}

Work Communicator::allreduce(void* buf, size_t count, DataType t, ReduceOp op, const OpOptions& o) {
  check_dtype(t);
  check_op(op);
  check_buf(buf, count, "buffer");
  const size_t bytes = checked_bytes(count, t);
  const auto in = impl_->plan();
  auto z = impl_->wan_compression(*in, o, bytes, t, op);
  const auto plan = in->allreduce(bytes, dtype_size(t), impl_->algo(o), z.has_value());
  if (!compresses(plan.algo)) z.reset();
  if (z) impl_->note_codec(z->name, bytes);
  GEOCCL_LOG(kDebug, "allreduce " << bytes << " B: " << collectives::algo_name(plan.algo) << ", predicted "
                                  << plan.predicted_ms << " ms (" << plan.why << ")"
                                  << (z ? ", WAN codec " + z->name : std::string()));
  // The codec is part of what every rank must agree on: the frames' tag carries it (codec, form,
  // top-k k), so ranks that disagree fail with kMismatch instead of misreading each other.
  uint32_t tag = 0;
  if (z) tag = static_cast<uint32_t>(z->spec.codec) | static_cast<uint32_t>(z->algo) << 8 | z->spec.k << 12;
  const double settle_ms = in->paths.empty() ? 0 : in->paths.largest_delay();
  // The body keeps the algorithm, not the plan (whose reason is a string for the log).
  return impl_->submit(header(OpKind::kAllreduce, t, bytes, static_cast<uint8_t>(op), tag), o,
                       [=, algo = plan.algo, z = std::move(z)](OpContext& c) {
                         const auto& topo = in->topo;
                         const collectives::WanCompression* zp = z ? &*z : nullptr;
                         switch (algo) {
                           case collectives::Algo::kRing:
                             return collectives::ring_allreduce(c, buf, count, t, op);
                           case collectives::Algo::kHierarchical:
                             return collectives::hierarchical_allreduce(c, topo, buf, count, t, op, zp);
                           case collectives::Algo::kHierarchicalSmall:
                             return collectives::hierarchical_small_allreduce(c, topo, buf, count, t, op, zp, settle_ms);
                           case collectives::Algo::kHierarchicalDirect:
                             return collectives::hierarchical_direct_allreduce(c, topo, buf, count, t, op, zp);
                           case collectives::Algo::kHierarchicalLeaders:
                             return collectives::hierarchical_leaders_allreduce(c, topo, buf, count, t, op, zp);
                           default:
                             return collectives::recursive_doubling_allreduce(c, buf, count, t, op);
                         }
                       },
                       collectives::algo_name(plan.algo));
}

Work Communicator::broadcast(void* buf, size_t count, DataType t, int root, const OpOptions& o) {
  check_dtype(t);
  check_buf(buf, count, "buffer");
  if (root < 0 || root >= size()) invalid("root " + std::to_string(root) + " out of range");
  const size_t bytes = checked_bytes(count, t);
  const auto in = impl_->plan();
  const size_t small = in->small_msg_bytes;
  const auto plan = collectives::plan_broadcast(bytes, size(), in->topo.domains(), small, impl_->algo(o));
  return impl_->submit(header(OpKind::kBroadcast, t, bytes, 0, static_cast<uint32_t>(root)), o,
                       [=](OpContext& c) {
                         const auto& topo = in->topo;
                         if (plan.algo == collectives::Algo::kHierarchical)
                           collectives::hierarchical_broadcast(c, topo, buf, bytes, root, small);
                         else if (plan.algo == collectives::Algo::kTree)
                           collectives::tree_broadcast(c, buf, bytes, root);
                         else
                           collectives::chain_broadcast(c, buf, bytes, root);
                       },
                       collectives::algo_name(plan.algo));
}

Work Communicator::allgather(const void* send, void* recv, size_t count, DataType t, const OpOptions& o) {
  check_dtype(t);
  check_buf(send, count, "send buffer");
  check_buf(recv, count, "recv buffer");
  const size_t bytes = checked_bytes(count, t, static_cast<size_t>(size()));
  const auto in = impl_->plan();
  const size_t small = in->small_msg_bytes;
  const auto plan = collectives::plan_allgather(bytes * static_cast<size_t>(size()), in->topo.domains(), small,
                                                impl_->algo(o));
  return impl_->submit(header(OpKind::kAllgather, t, bytes), o, [=](OpContext& c) {
    const auto& topo = in->topo;
    if (plan.algo == collectives::Algo::kHierarchical)
      collectives::hierarchical_allgather(c, topo, send, recv, bytes, small);
    else if (plan.algo == collectives::Algo::kBruck)
      collectives::bruck_allgather(c, send, recv, bytes);
    else
      collectives::ring_allgather(c, send, recv, bytes);
  }, collectives::algo_name(plan.algo));
}

Work Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                  ReduceOp op, const OpOptions& o) {
  check_dtype(t);
  check_op(op);
  check_buf(send, recv_count, "send buffer");
  check_buf(recv, recv_count, "recv buffer");
  const size_t bytes = checked_bytes(recv_count, t, static_cast<size_t>(size()));
  const auto* s = static_cast<const uint8_t*>(send);
  const auto* r = static_cast<const uint8_t*>(recv);
  if (bytes > 0 && s < r + bytes && r < s + bytes * static_cast<size_t>(size()))
    invalid("reduce_scatter send and recv buffers overlap");
  return impl_->submit(header(OpKind::kReduceScatter, t, bytes, static_cast<uint8_t>(op)), o,
                       [=](OpContext& c) {
                         collectives::ring_reduce_scatter(c, send, recv, recv_count, t, op);
                       },
                       "ring");
}

Work Communicator::reduce(void* buf, size_t count, DataType t, ReduceOp op, int root, const OpOptions& o) {
  check_dtype(t);
  check_op(op);
  check_buf(buf, count, "buffer");
  if (root < 0 || root >= size()) invalid("root " + std::to_string(root) + " out of range");
  const size_t bytes = checked_bytes(count, t);
  return impl_->submit(
      header(OpKind::kReduce, t, bytes, static_cast<uint8_t>(op), static_cast<uint32_t>(root)), o,
      [=](OpContext& c) { collectives::tree_reduce(c, buf, count, t, op, root); }, "tree");
}

Work Communicator::gather(const void* send, void* recv, size_t count, DataType t, int root,
                          const OpOptions& o) {
  check_dtype(t);
  if (root < 0 || root >= size()) invalid("root " + std::to_string(root) + " out of range");
  check_buf(send, count, "send buffer");
  if (rank() == root) check_buf(recv, count, "recv buffer (root)");
  const size_t bytes = checked_bytes(count, t, static_cast<size_t>(size()));
  return impl_->submit(header(OpKind::kGather, t, bytes, 0, static_cast<uint32_t>(root)), o,
                       [=](OpContext& c) { collectives::direct_gather(c, send, recv, bytes, root); }, "direct");
}

Work Communicator::scatter(const void* send, void* recv, size_t count, DataType t, int root,
                           const OpOptions& o) {
  check_dtype(t);
  if (root < 0 || root >= size()) invalid("root " + std::to_string(root) + " out of range");
  if (rank() == root) check_buf(send, count, "send buffer (root)");
  check_buf(recv, count, "recv buffer");
  const size_t bytes = checked_bytes(count, t, static_cast<size_t>(size()));
  return impl_->submit(header(OpKind::kScatter, t, bytes, 0, static_cast<uint32_t>(root)), o,
                       [=](OpContext& c) { collectives::direct_scatter(c, send, recv, bytes, root); }, "direct");
}

Work Communicator::alltoall(const void* send, void* recv, size_t count, DataType t, const OpOptions& o) {
  check_dtype(t);
  check_buf(send, count, "send buffer");
  check_buf(recv, count, "recv buffer");
  const size_t bytes = checked_bytes(count, t, static_cast<size_t>(size()));
  const size_t total = bytes * static_cast<size_t>(size());
  const auto* s = static_cast<const uint8_t*>(send);
  const auto* r = static_cast<const uint8_t*>(recv);
  if (total > 0 && s < r + total && r < s + total) invalid("alltoall send and recv buffers overlap");
  return impl_->submit(header(OpKind::kAlltoall, t, bytes), o,
                       [=](OpContext& c) { collectives::pairwise_alltoall(c, send, recv, bytes); }, "pairwise");
}

Work Communicator::barrier(const OpOptions& o) {
  return impl_->submit(header(OpKind::kBarrier, DataType::kUInt8, 0), o,
                       [](OpContext& c) { collectives::dissemination_barrier(c); }, "dissemination");
}

Work Communicator::sparse_allgather(const int64_t* indices, float* values, size_t nnz, float* out, size_t count,
                                    uint32_t value_bits, SparseResult* result, const OpOptions& o) {
  check_buf(indices, nnz, "indices");
  check_buf(values, nnz, "values");
  check_buf(out, count, "out");
  const size_t bytes = checked_bytes(count, DataType::kFloat32);
  // Encoded here, so that a bad index is this call's error, before anything is sent.
  auto piece = std::make_shared<const std::vector<uint8_t>>(compression::sparse_encode(
      value_bits, count, {indices, nnz}, {values, nnz}, {values, nnz}));
  return impl_->submit(header(OpKind::kSparseAllgather, DataType::kFloat32, bytes, 0, value_bits), o,
                       [=](OpContext& c) {
                         const auto t = collectives::sparse_allgather(c, *piece, {out, count});
                         if (result) *result = {piece->size(), t.bytes_sent, t.bytes_received};
                       },
                       "direct");
}

Work Communicator::send(const void* buf, size_t count, DataType t, int peer, uint32_t tag,
                        const OpOptions& o) {
  check_dtype(t);
  check_buf(buf, count, "buffer");
  if (peer < 0 || peer >= size() || peer == rank()) invalid("send peer " + std::to_string(peer) + " invalid");
  const size_t bytes = checked_bytes(count, t);
  return impl_->submit_p2p(true, peer, header(OpKind::kSendRecv, t, bytes, 0, tag), o,
                           {static_cast<uint8_t*>(const_cast<void*>(buf)), bytes});
}

Work Communicator::recv_any(void* buf, size_t count, DataType t, uint32_t tag, const OpOptions& o) {
  check_dtype(t);
  check_buf(buf, count, "buffer");
  if (size() < 2) invalid("recv_any in a group of one: there is no peer to receive from");
  const size_t bytes = checked_bytes(count, t);
  return impl_->submit_p2p(false, -1, header(OpKind::kSendRecv, t, bytes, 0, tag), o,
                           {static_cast<uint8_t*>(buf), bytes});
}

Work Communicator::recv(void* buf, size_t count, DataType t, int peer, uint32_t tag, const OpOptions& o) {
  check_dtype(t);
  check_buf(buf, count, "buffer");
  if (peer < 0 || peer >= size() || peer == rank()) invalid("recv peer " + std::to_string(peer) + " invalid");
  const size_t bytes = checked_bytes(count, t);
  return impl_->submit_p2p(false, peer, header(OpKind::kSendRecv, t, bytes, 0, tag), o,
                           {static_cast<uint8_t*>(buf), bytes});
}

}  // namespace geoccl
