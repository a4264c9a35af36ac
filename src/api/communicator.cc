// The communicator: validates calls, numbers them, and runs them in issue order on one worker
// thread per priority class (channel). Collectives run to completion there (their I/O is
// overlapped by the event loop); send/recv are only posted there, so a rank can have a send and
// the matching receive of an exchange in flight at once. Works of one class complete strictly in
// issue order; the classes run concurrently, each in its own frame space (transport/router.h).
#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "api/completion_pool.h"
#include "api/work_state.h"
#include "collectives/collectives.h"
#include "collectives/cost_model.h"
#include "collectives/detour.h"
#include "collectives/path_monitor.h"
#include "collectives/planner.h"
#include "collectives/wan_codec.h"
#include "compression/error_feedback.h"
#include "core/logging.h"
#include "security/secret.h"
#include "geoccl/communicator.h"
#include "membership/rendezvous.h"
#include "metrics/comm_metrics.h"
#include "metrics/exporter.h"
#include "metrics/trace.h"
#include "runtime/event_loop.h"
#include "runtime/progress.h"
#include "topology/topology.h"
#include "transport/group.h"
#include "transport/router.h"

namespace geoccl {

using Clock = std::chrono::steady_clock;
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

  // Queues a collective. `run` executes on its class's worker thread inside an OpContext.
  // `algo`: the algorithm's name for the metrics (static storage); null for the communicator's
  // own operations (set-up), which are not counted.
  Work submit(FrameHeader h, const OpOptions& o, std::function<void(OpContext&)> run,
              const char* algo = nullptr);
  // Queues a point-to-point transfer; sequence numbers are kept per peer and direction.
  Work submit_p2p(bool is_send, int peer, FrameHeader h, const OpOptions& o, std::span<uint8_t> data);
  const std::string& algo(const OpOptions& o) const { return o.algo.empty() ? cfg_.algo : o.algo; }
  const TopologyInfo& topology_info() const { return topo_info_; }
  // What an operation is planned with: the topology (its ring order) and the measured figures of
  // every pair of domains (empty: one domain, or not measured). Replaced whole when a re-plan
  // applies, so an operation keeps the inputs it was planned with.
  struct PlanInputs {
    topology::Topology topo;
    collectives::WanPaths paths;
  };
  std::shared_ptr<const PlanInputs> plan_inputs() const {
    std::lock_guard lk(plan_mu_);
    return plan_;
  }
  // `compressed`: the WAN codec applies to this call. Only the hierarchical plans have WAN hops
  // of their own to compress, so an automatic choice is made among them (the cost model would
  // otherwise trade the codec away for a flat ring without saying so).
  collectives::Plan plan_allreduce(const PlanInputs& in, size_t bytes, DataType t, const OpOptions& o,
                                   bool compressed) const {
    const std::string& a = algo(o);
    const bool automatic = (a.empty() || a == "auto") && in.topo.domains() > 1;
    return collectives::plan_allreduce(bytes, dtype_size(t), in.topo, in.paths.empty() ? nullptr : &in.paths,
                                       cfg_.chunk_bytes, cfg_.small_msg_bytes, cfg_.wan_small_msg_bytes,
                                       compressed && automatic ? std::string("hier") : a);
  }
  // The WAN compression of an allreduce of `bytes` on `t`/`op` with options `o`, or nullopt
  // (uncompressed). Throws kInvalidArgument for an explicit codec that cannot apply.
  std::optional<collectives::WanCompression> wan_compression(const OpOptions& o, size_t bytes,
                                                             DataType t, ReduceOp op);
  CompressionStats compression_stats() const;
  compression::FeedbackStore& feedback() { return feedback_; }
  void abort(const std::string& reason);

 private:
  struct Op {
    FrameHeader header;
    std::chrono::milliseconds timeout;
    std::function<void(OpContext&)> run;  // collectives
    bool p2p = false, is_send = false;
    bool any_source = false;  // recv_any: `peer` is found when the operation starts
    int peer = -1;
    std::span<uint8_t> data;
    std::shared_ptr<detail::WorkState> work;
    const char* algo = nullptr;  // metrics label; null: not counted
  };
  // An operation that has been started and whose Work is not completed yet.
  struct InFlight {
    std::shared_ptr<detail::WorkState> work;
    std::unique_ptr<OpContext> ctx;  // p2p: owns the posted requests
    std::vector<transport::RequestPtr> reqs;
    Clock::time_point deadline;
    std::exception_ptr error;
    std::string what;
    int source = -1;  // recv_any
    // Metrics and traces (when on): when it started, what it was.
    Clock::time_point started;
    int64_t trace_t0 = 0;
    const char* algo = nullptr;
    OpKind kind = OpKind::kNone;
    uint64_t bytes = 0, seq = 0;
    uint8_t channel = 0;
  };
  // One priority class: its queue, sequence numbers, worker and scratch memory.
  struct Channel {
    uint8_t id = 0;
    // Guarded by progress_.mutex().
    std::deque<Op> queue;
    uint64_t next_seq = 1;
    std::vector<uint64_t> send_seq, recv_seq;
    // Its worker thread only.
    std::deque<InFlight> inflight;
    collectives::ScratchPool scratch;
    std::thread worker;
  };

  Work enqueue(Op op, Priority priority);
  // Finds the domains: exchanges labels, and measures RTTs when there are none (see Config).
  void discover_topology();
  // GEOCCL_TRANSPORT remote=auto: the protocol decider (docs/transport.md, "Choosing TCP or
  // QUIC"): the leaders of every pair of domains probe each transport, every rank gets all the
  // figures, and every rank applies the same rule to them, so both ends of a pair choose alike.
  void choose_transports();
  // Across domains: the leaders of every pair of domains measure its RTT and one flow's rate in
  // each direction (path_probe.cc); every rank gets the same figures (wan_paths_), the inputs of
  // the planner's cost model.
  void measure_wan_paths();
  // After measure_wan_paths: pairs of domains whose direct path is much slower than one through a
  // third domain send their bulk data that way (collectives/detour.h); the plan's figures follow.
  void take_two_hop_paths();
  // Re-planning (GEOCCL_REPLAN_OPS; collectives/path_monitor.h), on the issuing thread after each
  // collective of the default class: every replan_ops of them, the previous check's agreed
  // figures are judged (a persisting change applies from the next collective on, on every rank
  // alike), and a new check is issued with this leader's window of readings.
  void after_collective_issued();
  void apply_replan(const collectives::WanPaths& next);
  // A leader's thread: reads its transport's view of the paths to the other leaders every 100 ms.
  void sample_paths();
  void stop_sampler();
  void worker_main(Channel& ch);
  void start(Channel& ch, Op& op);
  // recv_any: waits (bounded by `deadline`) until a peer's next message with the tag has
  // arrived, and sets op.peer. False when the group failed or the deadline passed (aborted).
  bool find_source(Channel& ch, Op& op, Clock::time_point deadline);
  // Completes finished in-flight operations in order; aborts the group on an expired one.
  void retire(Channel& ch);
  void stop_workers();
  // GEOCCL_METRICS_PORT: the registry, this communicator's series and the HTTP endpoint.
  void start_metrics();
  // One retired operation's metrics and trace span.
  void record_completion(const InFlight& f);

  Config cfg_;
  membership::RendezvousInfo rdv_;
  runtime::EventLoop loop_;
  runtime::Progress progress_;
  std::unique_ptr<transport::Group> group_;
  std::unique_ptr<transport::Router> router_;
  topology::Topology topo_;
  TopologyInfo topo_info_;
  collectives::WanPaths wan_paths_;
  mutable std::mutex plan_mu_;
  std::shared_ptr<const PlanInputs> plan_;  // guarded by plan_mu_
  // Re-planning: the monitor and the counter of default-class collectives (issuing thread), the
  // check in flight, and this leader's window of path readings (guarded by window_mu_).
  std::unique_ptr<collectives::PathMonitor> monitor_;
  uint64_t collectives_issued_ = 0;
  struct Check {
    Work work;
    std::shared_ptr<std::vector<double>> figures;  // k*k one-way delays, then k*k rates
  };
  std::optional<Check> check_;
  std::mutex window_mu_;
  std::unique_ptr<collectives::PathWindow> window_;
  std::mutex sampler_mu_;
  std::condition_variable sampler_cv_;
  bool sampler_stop_ = false;
  std::thread sampler_;
  Compression wan_default_;  // GEOCCL_WAN_COMPRESSION
  compression::FeedbackStore feedback_;
  collectives::CompressionCounters compressed_;

  // Guarded by progress_.mutex().
  bool stop_ = false;
  size_t incomplete_ = 0;  // issued operations whose Work has not completed

  // Observability (docs/metrics.md): null when off. The exporter is stopped first on
  // destruction: a scrape reads the router.
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<metrics::CommMetrics> metrics_;
  std::unique_ptr<metrics::HttpExporter> exporter_;
  std::unique_ptr<metrics::TraceWriter> trace_;  // GEOCCL_TRACE

  std::array<Channel, kPriorityClasses> channels_;
  // Runs Work callbacks off the workers. Last member, so destroyed first: after the workers are
  // joined (nothing posts any more) and before the state a callback may still reach.
  detail::CompletionPool completions_;
};

CommunicatorImpl::CommunicatorImpl(Config cfg) : cfg_(std::move(cfg)) {
  cfg_.validate();
  wan_default_ = Compression::parse(cfg_.wan_compression);
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
  for (size_t c = 0; c < channels_.size(); ++c) {
    channels_[c].id = static_cast<uint8_t>(c);
    channels_[c].send_seq.assign(static_cast<size_t>(cfg_.world_size), 0);
    channels_[c].recv_seq.assign(static_cast<size_t>(cfg_.world_size), 0);
  }
  // A group of one needs no network; the router still exists (with no device) so collectives
  // have a peer model to ask (they return before any I/O).
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
  const auto deadline = Clock::now() + cfg_.connect_timeout;
  // A rank that could not join (other group parameters) left its reason in the store: every
  // rank still setting up fails with it instead of waiting for that rank.
  auto poll = [&] {
    std::optional<std::string> why;
    ErrorCode code = ErrorCode::kInvalidArgument;
    try {
      why = membership::setup_error(rdv_);
    } catch (const Error& e) {
      // A reason sealed with another group secret (security/store_seal.h): a rank with a wrong
      // secret left it.
      if (e.code() != ErrorCode::kProtocol) throw;
      const std::string what = e.what(), prefix = std::string(error_code_name(e.code())) + ": ";
      why = what.starts_with(prefix) ? what.substr(prefix.size()) : what;
      code = ErrorCode::kProtocol;
    }
    if (why) {
      rdv_.store->add(rdv_.prefix + membership::kSetupErrorSeenKey, 1);
      throw Error(code, *why);
    }
  };
  try {
  router_ = std::make_unique<transport::Router>(
      *group_, cfg_, rdv_.data_streams,
      cfg_.world_size > 1 ? membership::choose_bind_address(cfg_) : "",
      [&](const std::string& key, const std::vector<uint8_t>& value) {
        rdv_.store->set(rdv_.prefix + "addr/" + key, value);
      },
      [&](const std::string& key) {
        for (;;) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
          try {
            return rdv_.store->get(rdv_.prefix + "addr/" + key,
                                   std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(200)));
          } catch (const Error& e) {
            if (e.code() != ErrorCode::kTimeout || left.count() <= 200) throw;
          }
          poll();
        }
      },
      poll, deadline);
  } catch (const Error& e) {
    // A peer that rejected this rank's handshake (a wrong group secret, another version): the
    // ranks still setting up fail with the reason too, instead of waiting for this one.
    if (e.code() == ErrorCode::kProtocol && rdv_.store) {
      const std::string msg = "rank " + std::to_string(cfg_.rank) + " could not connect: " + e.what();
      try {
        if (!membership::setup_error(rdv_))
          rdv_.store->set(rdv_.prefix + membership::kSetupErrorKey, std::vector<uint8_t>(msg.begin(), msg.end()));
      } catch (const Error&) {
      }
    }
    // The store lives in this process: keep it up until the other ranks have read why the
    // setup failed (bounded), so that they fail with that reason rather than a lost store.
    if (rdv_.server && (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kProtocol))
      membership::await_setup_error_seen(rdv_, cfg_.world_size - 1, std::chrono::seconds(5));
    throw;
  }
  if (cfg_.world_size > 1) GEOCCL_LOG(kInfo, "connected to all peers");
  for (auto& ch : channels_) ch.worker = std::thread([this, &ch] { worker_main(ch); });
  topo_ = topology::single_domain(cfg_.world_size);
  if (cfg_.world_size > 1) {
    try {
      discover_topology();
    } catch (...) {
      stop_workers();  // before members are destroyed
      throw;
    }
  }
  // The WAN treatment of a peer (striping, stream recovery, WAN socket options) follows the
  // domains, however they were found: labels or measured RTTs.
  // On one site every peer is a LAN peer (which also drops the copies kept until now).
  for (int r = 0; r < cfg_.world_size; ++r)
    if (r != cfg_.rank)
      router_->set_wan_peer(r, topo_.domain_of[static_cast<size_t>(r)] !=
                                   topo_.domain_of[static_cast<size_t>(cfg_.rank)]);
  router_->set_domains(topo_.domain_of, topo_.names);
  if (router_->deciding() && topo_.domains() > 1) {
    try {
      choose_transports();
    } catch (...) {
      stop_workers();
      throw;
    }
  }
  if (topo_.domains() > 1 && cfg_.plan_probe_bytes > 0) {
    try {
      measure_wan_paths();
      if (cfg_.two_hop_gain > 0) take_two_hop_paths();
    } catch (...) {
      stop_workers();
      throw;
    }
  }
  topo_info_.domain_of = topo_.domain_of;
  topo_info_.names = topo_.names;
  topo_info_.source = topo_.source;
  topo_info_.describe = topo_.describe();
  if (cfg_.rank == 0) GEOCCL_LOG(kInfo, "topology: " << topo_info_.describe);
  topo_info_.ring_order = topo_.ring_order;
  plan_ = std::make_shared<const PlanInputs>(PlanInputs{topo_, wan_paths_});
  if (!wan_paths_.empty() && cfg_.replan_ops > 0) {
    collectives::PathMonitorOptions po;
    po.persist = cfg_.replan_persist;
    monitor_ = std::make_unique<collectives::PathMonitor>(wan_paths_, po);
    window_ = std::make_unique<collectives::PathWindow>(wan_paths_.k);
  }
  try {
    if (metrics_) start_metrics();
    if (trace_ && cfg_.world_size > 1) {
      // The offset of this rank's clock to rank 0's, for `geoccl trace merge`.
      FrameHeader h;
      h.kind = OpKind::kBarrier;
      h.dtype = static_cast<uint8_t>(DataType::kUInt8);
      h.tag = 0x434c434b;  // "CLCK"
      collectives::ClockOffset off;
      submit(h, {}, [&](OpContext& c) { off = collectives::measure_clock_offset(c, 5, &metrics::TraceWriter::now_us); })
          .wait();
      trace_->set_clock_offset(off.offset_us, off.rtt_us);
    }
  } catch (...) {
    stop_workers();
    throw;
  }
  // Last: nothing after it throws, so the destructor always stops it. A leader samples its paths.
  const int dm = topo_.domain_of[static_cast<size_t>(cfg_.rank)];
  if (monitor_ && topo_.members[static_cast<size_t>(dm)][0] == cfg_.rank) sampler_ = std::thread([this] { sample_paths(); });
}

void CommunicatorImpl::start_metrics() {
  metrics_->set_topology(topo_.domain_of, topo_.names);
  metrics_->set_peer_source([this] { return router_->stats(); });
  exporter_ = std::make_unique<metrics::HttpExporter>(*registry_, cfg_.metrics_bind, cfg_.metrics_port);
  GEOCCL_LOG(kInfo, "metrics at http://" << cfg_.metrics_bind << ":" << exporter_->port() << "/metrics");
}

void CommunicatorImpl::record_completion(const InFlight& f) {
  const auto kind = static_cast<uint8_t>(f.kind);
  const char* op = protocol::op_kind_name(f.kind);
  if (trace_) {
    const int64_t now = metrics::TraceWriter::now_us();
    trace_->complete(op, "op", metrics::kTraceTrackOps + f.channel, f.trace_t0, now - f.trace_t0,
                     "\"seq\":" + std::to_string(f.seq) + ",\"bytes\":" + std::to_string(f.bytes) +
                         ",\"algo\":" + metrics::json_string(f.algo) + ",\"ok\":" + (f.error ? "false" : "true"));
  }
  if (!metrics_) return;
  if (!f.error) {
    metrics_->record(kind, op, f.algo, f.bytes, std::chrono::duration<double>(Clock::now() - f.started).count());
    return;
  }
  ErrorCode code = ErrorCode::kInternal;
  try {
    std::rethrow_exception(f.error);
  } catch (const Error& e) {
    code = e.code();
  } catch (...) {
  }
  metrics_->record_error(kind, op, code);
}

namespace {

// The header of a set-up collective of float64 figures.
FrameHeader probe_header(uint32_t tag) {
  FrameHeader h;
  h.kind = OpKind::kBarrier;
  h.dtype = static_cast<uint8_t>(DataType::kFloat64);
  h.tag = tag;
  return h;
}

// Pairs of domains in a fixed order, for their leaders (la, lb): every leader takes its pairs
// one after another, so both ends of a pair reach it in the same order.
template <class F>
void for_leader_pairs(const topology::Topology& t, int me, F&& f) {
  for (int da = 0; da < t.domains(); ++da)
    for (int db = da + 1; db < t.domains(); ++db) {
      const int la = t.members[static_cast<size_t>(da)][0], lb = t.members[static_cast<size_t>(db)][0];
      if (me == la || me == lb) f(da, db, la, lb);
    }
}

}  // namespace

void CommunicatorImpl::choose_transports() {
  const auto names = router_->candidates();
  const int n = cfg_.world_size, me = cfg_.rank, k = topo_.domains();
  const auto un = static_cast<size_t>(n), uk = static_cast<size_t>(k), nc = names.size();
  constexpr size_t kFields = 5;  // ok, rtt, burst, mbps, cpu
  auto slot = [&](int da, int db, size_t cand) { return ((static_cast<size_t>(da) * uk + static_cast<size_t>(db)) * nc + cand) * kFields; };
  // Figures of every pair of domains, then which peers each rank reaches over each candidate.
  std::vector<double> shared(uk * uk * nc * kFields + un * un * nc, 0.0);
  double* reach = shared.data() + uk * uk * nc * kFields;
  for (int r = 0; r < n; ++r)
    if (r != me)
      for (size_t i = 0; i < nc; ++i)
        reach[(static_cast<size_t>(me) * un + static_cast<size_t>(r)) * nc + i] = router_->connected(r, names[i]) ? 1 : 0;
  submit(probe_header(0x5450524f /* "TPRO" */), {}, [&](OpContext& c) {
    for_leader_pairs(topo_, me, [&](int da, int db, int la, int lb) {
      const int peer = me == la ? lb : la;
      std::vector<char> available(nc);
      for (size_t i = 0; i < nc; ++i) available[i] = router_->connected(peer, names[i]);
      const auto figs = collectives::probe_path(
          c, peer, names, available, [&](size_t i) { router_->use(peer, names[i]); },
          cfg_.transport_probe_bytes, 5);
      if (me > peer) return;  // the lower rank measured
      for (size_t i = 0; i < nc; ++i) {
        double* f = shared.data() + slot(da, db, i);
        f[0] = figs[i].ok ? 1 : 0;
        f[1] = figs[i].rtt_ms;
        f[2] = figs[i].burst_ms;
        f[3] = figs[i].mbps;
        f[4] = figs[i].cpu_s_per_gbit;
      }
    });
    collectives::ring_allreduce(c, shared.data(), shared.size(), DataType::kFloat64, ReduceOp::kMax);
  }).wait();
  // Every rank decides from the same figures.
  std::vector<topology::TransportDecision> decision(uk * uk);
  for (int da = 0; da < k; ++da)
    for (int db = da + 1; db < k; ++db) {
      std::vector<topology::PathFigures> figs(nc);
      for (size_t i = 0; i < nc; ++i) {
        const double* f = shared.data() + slot(da, db, i);
        figs[i].transport = names[i];
        figs[i].ok = f[0] > 0;
        figs[i].rtt_ms = f[1];
        figs[i].burst_ms = f[2];
        figs[i].mbps = f[3];
        figs[i].cpu_s_per_gbit = f[4];
      }
      auto& d = decision[static_cast<size_t>(da) * uk + static_cast<size_t>(db)];
      d = topology::choose_transport(figs);
      const std::string pair = (topo_.names[static_cast<size_t>(da)].empty() ? std::to_string(da) : topo_.names[static_cast<size_t>(da)]) +
                               "-" + (topo_.names[static_cast<size_t>(db)].empty() ? std::to_string(db) : topo_.names[static_cast<size_t>(db)]);
      d.why = "domains " + pair + ": " + d.why;
      if (me == 0) GEOCCL_LOG(kInfo, "transport " << d.why);
    }
  const int dm = topo_.domain_of[static_cast<size_t>(me)];
  for (int r = 0; r < n; ++r) {
    const int dr = topo_.domain_of[static_cast<size_t>(r)];
    if (r == me || dr == dm) continue;
    const auto& d = decision[static_cast<size_t>(std::min(dm, dr)) * uk + static_cast<size_t>(std::max(dm, dr))];
    size_t pick = static_cast<size_t>(d.chosen);
    std::string why = d.why;
    // The pair's own link: both ends must have it (both read the same matrix).
    auto reaches = [&](int a, int b) { return reach[(static_cast<size_t>(a) * un + static_cast<size_t>(b)) * nc + pick] > 0; };
    if (pick != 0 && !(reaches(me, r) && reaches(r, me))) {
      why = names[0] + ": " + names[pick] + " was chosen for the domains but does not connect ranks " +
            std::to_string(std::min(me, r)) + " and " + std::to_string(std::max(me, r)) + " (" + d.why + ")";
      pick = 0;
    }
    router_->use(r, names[pick], why);
  }
}

void CommunicatorImpl::measure_wan_paths() {
  const int k = topo_.domains(), me = cfg_.rank;
  const auto uk = static_cast<size_t>(k);
  // [0, k*k): one-way delay, [k*k, 2k*k): rate, filled by the sending leader; max over ranks.
  std::vector<double> shared(2 * uk * uk, 0.0);
  submit(probe_header(0x504c414e /* "PLAN" */), {}, [&](OpContext& c) {
    // The RTT from pings; the rate of each direction from two bursts (probe_rate, timed by the
    // receiver), the faster kept: the first warms the connection. The lower rank of a probe's
    // context sends.
    for_leader_pairs(topo_, me, [&](int da, int db, int, int) {
      for (const auto& [from, to] : {std::pair{da, db}, std::pair{db, da}}) {
        const int sender = topo_.members[static_cast<size_t>(from)][0];
        const int receiver = topo_.members[static_cast<size_t>(to)][0];
        OpContext pair = c.sub({sender, receiver});
        const int other = me == sender ? 1 : 0;
        const auto figs = collectives::probe_path(pair, other, {"current"}, {1}, [](size_t) {}, 4096, 5);
        double mbps = 0;
        const double rtt = figs.empty() || !figs[0].ok ? 0 : figs[0].rtt_ms;
        for (int round = 0; round < 2; ++round)
          mbps = std::max(mbps, collectives::probe_rate(pair, other, cfg_.plan_probe_bytes, rtt));
        if (me != sender || figs.empty() || !figs[0].ok || mbps <= 0) continue;
        const double rtt_ms = figs[0].rtt_ms;
        const size_t ij = static_cast<size_t>(from) * uk + static_cast<size_t>(to);
        const size_t ji = static_cast<size_t>(to) * uk + static_cast<size_t>(from);
        shared[ij] = shared[ji] = rtt_ms / 2;
        shared[uk * uk + ij] = mbps;
      }
    });
    collectives::ring_allreduce(c, shared.data(), shared.size(), DataType::kFloat64, ReduceOp::kMax);
  }).wait();
  // Both directions measured a delay: the max-reduction kept the larger (the same everywhere).
  wan_paths_.k = k;
  wan_paths_.one_way_ms.assign(shared.begin(), shared.begin() + static_cast<std::ptrdiff_t>(uk * uk));
  wan_paths_.rate_mbps.assign(shared.begin() + static_cast<std::ptrdiff_t>(uk * uk), shared.end());
  topo_info_.wan_one_way_ms = wan_paths_.one_way_ms;
  topo_info_.wan_rate_mbps = wan_paths_.rate_mbps;
  if (me == 0)
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b)
        if (a != b)
          GEOCCL_LOG(kDebug, "path " << a << "->" << b << ": one-way " << wan_paths_.delay(a, b) << " ms, "
                                     << wan_paths_.rate(a, b) << " Mbit/s");
}

void CommunicatorImpl::take_two_hop_paths() {
  const auto detours = collectives::choose_detours(wan_paths_, cfg_.two_hop_gain, cfg_.plan_probe_bytes);
  if (detours.empty()) return;
  const int me = cfg_.rank, dm = topo_.domain_of[static_cast<size_t>(me)];
  auto leader = [&](int d) { return topo_.members[static_cast<size_t>(d)][0]; };
  std::vector<std::pair<int, int>> moving;  // (peer, relay) asked to move
  // Whether the leaders' pair of each detour took it (their transport may be one that does not:
  // QUIC), filled by those leaders and agreed below: the plan follows the leaders.
  std::vector<double> taken(detours.size(), 0.0);
  for (size_t i = 0; i < detours.size(); ++i) {
    const auto& d = detours[i];
    // The middle domain's leader relays: its paths to both ends are the ones measured.
    const int via = leader(d.via);
    if (dm != d.a && dm != d.c) continue;
    for (int r : topo_.members[static_cast<size_t>(dm == d.a ? d.c : d.a)]) {
      const bool ok = router_->set_two_hop(r, via, d.min_frame_bytes);
      if (ok) moving.emplace_back(r, via);
      else GEOCCL_LOG(kInfo, "the path to rank " << r << " stays direct: its transport takes no two-hop path");
      if (me == leader(dm) && r == leader(dm == d.a ? d.c : d.a)) taken[i] = ok ? 1 : 0;
    }
  }
  submit(probe_header(0x32484f50 /* "2HOP" */), {}, [&](OpContext& c) {
    collectives::ring_allreduce(c, taken.data(), taken.size(), DataType::kFloat64, ReduceOp::kMax);
  }).wait();
  std::vector<collectives::Detour> used;
  for (size_t i = 0; i < detours.size(); ++i) {
    const int via = leader(detours[i].via);
    const std::string line = detours[i].describe(topo_.names) + "; relay rank " + std::to_string(via);
    if (taken[i] > 0) {
      used.push_back(detours[i]);
      topo_info_.two_hop.push_back(line);
    }
    if (me == 0) GEOCCL_LOG(kInfo, (taken[i] > 0 ? "two-hop path for bulk data: " : "two-hop path not taken (the transport of the leaders' pair takes none): ") << line);
  }
  // The first collectives find the streams moved: wait (bounded) until they are, on both ends.
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!moving.empty()) {
    const auto stats = router_->stats();
    std::erase_if(moving, [&](const std::pair<int, int>& m) {
      return std::any_of(stats.begin(), stats.end(), [&](const PeerStats& ps) { return ps.peer == m.first && ps.two_hop == m.second; });
    });
    if (moving.empty()) break;
    if (Clock::now() > until) {
      GEOCCL_LOG(kInfo, "the two-hop path to rank " << moving[0].first << " is not up after 10 s; its bulk data go direct until it is");
      break;
    }
    if (const auto f = router_->failure()) throw Error(f->code, f->message);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Every rank plans with the same figures.
  wan_paths_ = collectives::with_detours(wan_paths_, used);
  topo_info_.wan_rate_mbps = wan_paths_.rate_mbps;
}

void CommunicatorImpl::sample_paths() {
  const int k = topo_.domains(), dm = topo_.domain_of[static_cast<size_t>(cfg_.rank)];
  std::unique_lock lk(sampler_mu_);
  while (!sampler_cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return sampler_stop_; })) {
    lk.unlock();
    std::vector<double> srtt(static_cast<size_t>(k), 0.0), rate(static_cast<size_t>(k), 0.0);
    for (int d = 0; d < k; ++d) {
      if (d == dm) continue;
      const auto r = router_->path_reading(topo_.members[static_cast<size_t>(d)][0]);
      srtt[static_cast<size_t>(d)] = r.srtt_ms;
      rate[static_cast<size_t>(d)] = r.delivery_mbps;
    }
    {
      std::lock_guard wl(window_mu_);
      window_->add(dm, srtt, rate);
    }
    lk.lock();
  }
}

void CommunicatorImpl::stop_sampler() {
  {
    std::lock_guard lk(sampler_mu_);
    sampler_stop_ = true;
  }
  sampler_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void CommunicatorImpl::after_collective_issued() {
  if (!monitor_ || ++collectives_issued_ % static_cast<uint64_t>(cfg_.replan_ops) != 0) return;
  const auto kk = static_cast<size_t>(monitor_->plan().k) * static_cast<size_t>(monitor_->plan().k);
  if (check_) {
    std::optional<collectives::WanPaths> next;
    try {
      check_->work.wait();
      const auto& f = *check_->figures;
      next = monitor_->on_check(std::vector<double>(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(kk)),
                                std::vector<double>(f.begin() + static_cast<std::ptrdiff_t>(kk), f.end()));
    } catch (const Error&) {
      // The group failed: the operations around the check report it.
    }
    check_.reset();
    if (next) apply_replan(*next);
  }
  std::shared_ptr<std::vector<double>> figures;
  {
    std::lock_guard wl(window_mu_);
    figures = std::make_shared<std::vector<double>>(window_->take());
  }
  Work w = submit(probe_header(0x52504c4e /* "RPLN" */), {}, [figures](OpContext& c) {
    collectives::ring_allreduce(c, figures->data(), figures->size(), DataType::kFloat64, ReduceOp::kMax);
  });
  check_ = Check{std::move(w), std::move(figures)};
}

void CommunicatorImpl::apply_replan(const collectives::WanPaths& next) {
  auto in = std::make_shared<PlanInputs>(*plan_inputs());
  in->paths = next;
  // The ring order: a hop costs its one-way delay and one chunk's time at its rate.
  std::vector<double> cost(next.one_way_ms.size(), 0.0);
  for (size_t x = 0; x < cost.size(); ++x)
    cost[x] = next.one_way_ms[x] +
              (next.rate_mbps[x] > 0 ? 8.0 * static_cast<double>(cfg_.chunk_bytes) / (next.rate_mbps[x] * 1e3) : 0);
  topology::choose_ring_order_by_cost(&in->topo, cost);
  {
    std::lock_guard lk(plan_mu_);
    plan_ = in;
  }
  topo_info_.wan_one_way_ms = next.one_way_ms;
  topo_info_.wan_rate_mbps = next.rate_mbps;
  ++topo_info_.replans;
  topo_info_.replanned_after_op = collectives_issued_;
  topo_info_.replan_change = monitor_->last_change();
  topo_info_.ring_order = in->topo.ring_order;
  std::string order;
  for (int d : in->topo.ring_order) {
    const auto& name = in->topo.names[static_cast<size_t>(d)];
    order += (order.empty() ? "" : ",") + (name.empty() ? std::to_string(d) : name);
  }
  GEOCCL_LOG(kInfo, "re-planned after collective #" << collectives_issued_ << ": " << monitor_->last_change()
                                                    << "; ring order " << order);
}

void CommunicatorImpl::discover_topology() {
  constexpr size_t kLabel = 64;
  const auto n = static_cast<size_t>(cfg_.world_size);
  std::vector<uint8_t> mine(kLabel, 0), all(kLabel * n, 0);
  std::copy_n(cfg_.domain.begin(), std::min(kLabel - 1, cfg_.domain.size()), mine.begin());
  FrameHeader h;
  h.kind = OpKind::kAllgather;
  h.dtype = static_cast<uint8_t>(DataType::kUInt8);
  h.op_bytes = kLabel * n;
  submit(h, {}, [&](OpContext& c) { collectives::ring_allgather(c, mine.data(), all.data(), kLabel); })
      .wait();
  std::vector<std::string> labels;
  for (size_t r = 0; r < n; ++r)
    labels.emplace_back(reinterpret_cast<const char*>(all.data() + r * kLabel));
  const bool labelled = std::any_of(labels.begin(), labels.end(), [](auto& l) { return !l.empty(); });
  if (cfg_.topology == "flat") return;
  if (cfg_.topology == "labels" || (cfg_.topology == "auto" && labelled)) {
    topo_ = topology::from_labels(labels);
    // From 4 domains on, the inter-domain ring order matters: measure the paths to choose it.
    if (topo_.domains() <= 3) return;
  }
  // Measure. The probe is a collective of its own so that every rank runs it.
  FrameHeader p;
  p.kind = OpKind::kBarrier;
  p.dtype = static_cast<uint8_t>(DataType::kFloat64);
  p.tag = 0x50524f42;  // "PROB"
  p.op_bytes = n * n * sizeof(double);
  std::vector<double> rtt;
  submit(p, {}, [&](OpContext& c) { rtt = collectives::measure_rtt_matrix(c, 5); }).wait();
  if (topo_.source == "labels")
    topology::choose_ring_order(&topo_, rtt);
  else
    topo_ = topology::from_rtt(rtt, cfg_.world_size);
  topo_info_.rtt_ms = rtt;
}

CommunicatorImpl::~CommunicatorImpl() {
  exporter_.reset();
  stop_sampler();
  // Every rank issued the same checks: the one in flight completes everywhere (or fails with the
  // group); it is not a pending operation of the user's.
  if (check_) {
    try {
      check_->work.wait();
    } catch (const Error&) {
    }
    check_.reset();
  }
  bool pending;
  {
    std::lock_guard lk(progress_.mutex());
    stop_ = true;
    pending = incomplete_ > 0;
  }
  if (pending)
    router_->abort(ErrorCode::kAborted, "rank " + std::to_string(cfg_.rank) +
                                               " destroyed its communicator with operations pending");
  stop_workers();
  router_.reset();
}

void CommunicatorImpl::abort(const std::string& reason) {
  // The transport fails every pending request and tells every peer; the workers wake up, and an
  // operation that starts from now on fails before it posts anything (start()).
  router_->abort(ErrorCode::kAborted, "rank " + std::to_string(cfg_.rank) + " aborted the communicator" +
                                          (reason.empty() ? "" : ": " + reason));
  progress_.notify();
}

void CommunicatorImpl::stop_workers() {
  {
    std::lock_guard lk(progress_.mutex());
    stop_ = true;
  }
  progress_.notify();
  for (auto& ch : channels_)
    if (ch.worker.joinable()) ch.worker.join();
}

Work CommunicatorImpl::enqueue(Op op, Priority priority) {
  const auto c = static_cast<size_t>(priority);
  if (c >= channels_.size())
    throw Error(ErrorCode::kInvalidArgument, "unknown priority class " + std::to_string(c));
  Channel& ch = channels_[c];
  auto state = std::make_shared<detail::WorkState>();
  op.work = state;
  op.header.channel = ch.id;
  op.header.epoch = cfg_.epoch;
  {
    std::lock_guard lk(progress_.mutex());
    if (stop_) throw Error(ErrorCode::kAborted, "communicator is shutting down");
    if (op.p2p) {
      // Receives are numbered when they start, on the worker: a receive from any peer learns its
      // peer only then, and every later receive of the class comes after it.
      if (op.is_send) op.header.seq = ++ch.send_seq[static_cast<size_t>(op.peer)];
    } else {
      op.header.seq = ch.next_seq++;
    }
    ch.queue.push_back(std::move(op));
    ++incomplete_;
  }
  progress_.cv().notify_all();
  return Work(state);
}

Work CommunicatorImpl::submit(FrameHeader h, const OpOptions& o, std::function<void(OpContext&)> run,
                              const char* algo) {
  Op op;
  op.header = h;
  op.algo = algo;
  op.timeout = o.timeout.value_or(cfg_.op_timeout);
  op.run = std::move(run);
  Work w = enqueue(std::move(op), o.priority);
  if (algo && o.priority == Priority::kGradient) after_collective_issued();
  return w;
}

Work CommunicatorImpl::submit_p2p(bool is_send, int peer, FrameHeader h, const OpOptions& o,
                                  std::span<uint8_t> data) {
  Op op;
  op.any_source = peer < 0;
  op.header = h;
  op.timeout = o.timeout.value_or(cfg_.op_timeout);
  op.p2p = true;
  op.algo = "p2p";
  op.is_send = is_send;
  op.peer = peer;
  op.data = data;
  return enqueue(std::move(op), o.priority);
}

bool CommunicatorImpl::find_source(Channel& ch, Op& op, Clock::time_point deadline) {
  // The group records early messages of this class only while this receive waits.
  router_->watch_early_messages(ch.id, true);
  struct Unwatch {
    transport::Router& router;
    uint8_t channel;
    ~Unwatch() { router.watch_early_messages(channel, false); }
  } unwatch{*router_, ch.id};
  std::vector<uint64_t> next(ch.recv_seq.size());
  for (size_t p = 0; p < next.size(); ++p)
    next[p] = static_cast<int>(p) == cfg_.rank ? UINT64_MAX : ch.recv_seq[p] + 1;
  for (;;) {
    const int src = group_->early_message(ch.id, op.header.tag, next);
    if (src >= 0) {
      op.peer = src;
      return true;
    }
    if (router_->failure()) return false;
    if (Clock::now() >= deadline) {
      router_->abort(ErrorCode::kTimeout, "recv from any source (tag " + std::to_string(op.header.tag) +
                                              ") passed its deadline on rank " + std::to_string(cfg_.rank));
      return false;
    }
    retire(ch);  // earlier operations still complete meanwhile
    progress_.wait_until([&] { return router_->failure().has_value() ||
                                      group_->early_message(ch.id, op.header.tag, next) >= 0; },
                         std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
  }
}

void CommunicatorImpl::start(Channel& ch, Op& op) {
  InFlight f;
  f.work = op.work;
  if ((metrics_ || trace_) && op.algo) {
    f.started = Clock::now();
    if (trace_) f.trace_t0 = metrics::TraceWriter::now_us();
    f.algo = op.algo;
    f.kind = op.header.kind;
    f.bytes = op.header.op_bytes;
    f.channel = ch.id;
  }
  f.deadline = Clock::now() + op.timeout;
  // A failed group (an abort, a lost peer) runs nothing more: the operation ends with the
  // group's failure at once, in issue order, instead of posting requests that fail one by one.
  if (const auto failure = router_->failure()) {
    f.error = std::make_exception_ptr(Error(failure->code, failure->message));
    f.what = protocol::op_kind_name(op.header.kind);
    ch.inflight.push_back(std::move(f));
    return;
  }
  if (op.p2p && !op.is_send) {
    if (op.any_source && !find_source(ch, op, f.deadline)) {
      const auto failure = router_->failure();
      f.error = std::make_exception_ptr(Error(failure ? failure->code : ErrorCode::kAborted,
                                              failure ? failure->message : "recv from any source failed"));
      f.what = "recv_any";
      ch.inflight.push_back(std::move(f));
      return;
    }
    op.header.seq = ++ch.recv_seq[static_cast<size_t>(op.peer)];
    f.source = op.any_source ? op.peer : -1;
  }
  f.what = std::string(protocol::op_kind_name(op.header.kind)) + " #" + std::to_string(op.header.seq);
  f.seq = op.header.seq;
  f.ctx = std::make_unique<OpContext>(*router_, progress_, ch.scratch, op.header, f.deadline,
                                      cfg_.chunk_bytes);
  if (trace_ && f.algo) f.ctx->set_trace(trace_.get());
  if (!op.p2p) router_->begin_operation(op.header);
  if (op.p2p) {
    if (op.is_send)
      f.ctx->send_chunked(op.peer, op.data, &f.reqs);
    else
      f.ctx->recv_chunked(op.peer, op.data, &f.reqs);
  } else {
    try {
      op.run(*f.ctx);
    } catch (...) {
      f.error = std::current_exception();
    }
    f.ctx.reset();  // waits for sends still in flight from user memory
  }
  ch.inflight.push_back(std::move(f));
}

void CommunicatorImpl::retire(Channel& ch) {
  while (!ch.inflight.empty()) {
    InFlight& f = ch.inflight.front();
    bool done = true;
    for (auto& r : f.reqs) done = done && r->done.load(std::memory_order_acquire);
    if (!done) {
      if (Clock::now() < f.deadline) return;
      router_->abort(ErrorCode::kTimeout, f.what + " passed its deadline on rank " +
                                                 std::to_string(cfg_.rank));
      continue;  // the abort completed every request
    }
    if (!f.error)
      for (auto& r : f.reqs)
        if (!r->ok()) {
          f.error = std::make_exception_ptr(Error(r->failure.code, r->failure.message));
          break;
        }
    if (f.algo) record_completion(f);
    auto work = std::move(f.work);
    auto error = f.error;
    work->source = f.source;
    ch.inflight.pop_front();
    {
      std::lock_guard lk(progress_.mutex());
      --incomplete_;
    }
    work->complete(error, &completions_);
  }
}

void CommunicatorImpl::worker_main(Channel& ch) {
  for (;;) {
    Op op;
    {
      std::unique_lock lk(progress_.mutex());
      for (;;) {
        if (!ch.queue.empty()) break;
        lk.unlock();
        retire(ch);
        lk.lock();
        if (!ch.queue.empty()) break;
        if (stop_ && ch.inflight.empty()) return;
        if (ch.inflight.empty()) {
          progress_.cv().wait(lk);
        } else {
          progress_.cv().wait_until(lk, std::min(ch.inflight.front().deadline,
                                                 Clock::now() + std::chrono::milliseconds(100)));
        }
      }
      op = std::move(ch.queue.front());
      ch.queue.pop_front();
    }
    start(ch, op);
    retire(ch);
  }
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
std::vector<PeerStats> Communicator::peer_stats() const { return impl_->transport().stats(); }
const TopologyInfo& Communicator::topology() const { return impl_->topology_info(); }

std::optional<collectives::WanCompression> CommunicatorImpl::wan_compression(const OpOptions& o,
                                                                             size_t bytes, DataType t,
                                                                             ReduceOp op) {
  const bool explicit_codec = o.compression.has_value();
  const Compression z = explicit_codec ? *o.compression : wan_default_;
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
  w.spec.codec = static_cast<compression::CodecId>(z.codec);
  if (z.codec == Codec::kTopK) w.spec.k = compression::topk_k_for_ratio(z.topk_ratio);
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
  const auto p = impl_->plan_allreduce(*impl_->plan_inputs(), bytes, t, o,
                                       impl_->wan_compression(o, bytes, t, ReduceOp::kSum).has_value());
  return {collectives::algo_name(p.algo), p.why, p.predicted_ms};
}

Work Communicator::allreduce(void* buf, size_t count, DataType t, ReduceOp op, const OpOptions& o) {
  check_dtype(t);
  check_op(op);
  check_buf(buf, count, "buffer");
  const size_t bytes = checked_bytes(count, t);
  const auto in = impl_->plan_inputs();
  auto z = impl_->wan_compression(o, bytes, t, op);
  const auto plan = impl_->plan_allreduce(*in, bytes, t, o, z.has_value());
  // Only the hierarchical plans have WAN hops of their own to compress.
  const bool hierarchical = plan.algo == collectives::Algo::kHierarchical ||
                            plan.algo == collectives::Algo::kHierarchicalSmall ||
                            plan.algo == collectives::Algo::kHierarchicalDirect ||
                            plan.algo == collectives::Algo::kHierarchicalLeaders;
  if (!hierarchical) z.reset();
  GEOCCL_LOG(kDebug, "allreduce " << bytes << " B: " << collectives::algo_name(plan.algo) << ", predicted "
                                  << plan.predicted_ms << " ms (" << plan.why << ")"
                                  << (z ? ", WAN codec " + z->name : std::string()));
  // The codec is part of what every rank must agree on: the frames' tag carries it (codec, form,
  // top-k k), so ranks that disagree fail with kMismatch instead of misreading each other.
  uint32_t tag = 0;
  if (z) tag = static_cast<uint32_t>(z->spec.codec) | static_cast<uint32_t>(z->algo) << 8 | z->spec.k << 12;
  const double settle_ms = in->paths.empty() ? 0 : in->paths.largest_delay();
  return impl_->submit(header(OpKind::kAllreduce, t, bytes, static_cast<uint8_t>(op), tag), o,
                       [=, z = std::move(z)](OpContext& c) {
                         const auto& topo = in->topo;
                         const collectives::WanCompression* zp = z ? &*z : nullptr;
                         switch (plan.algo) {
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
  const auto in = impl_->plan_inputs();
  const size_t small = config().small_msg_bytes;
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
  const auto in = impl_->plan_inputs();
  const size_t small = config().small_msg_bytes;
  const auto plan = collectives::plan_allgather(in->topo.domains(), impl_->algo(o));
  return impl_->submit(header(OpKind::kAllgather, t, bytes), o, [=](OpContext& c) {
    const auto& topo = in->topo;
    if (plan.algo == collectives::Algo::kHierarchical)
      collectives::hierarchical_allgather(c, topo, send, recv, bytes, small);
    else
      collectives::ring_allgather(c, send, recv, bytes);
  }, plan.algo == collectives::Algo::kHierarchical ? "hier" : "ring");
}

Work Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t,
                                  ReduceOp op, const OpOptions& o) {
  check_dtype(t);
  check_op(op);
  check_buf(send, recv_count, "send buffer");
  check_buf(recv, recv_count, "recv buffer");
  const size_t bytes = checked_bytes(recv_count, t, static_cast<size_t>(size()));
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
