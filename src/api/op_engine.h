// The operation engine: numbers the operations of each priority class and runs them in issue
// order on one worker thread per class (channel). Collectives run to completion there (their I/O
// is overlapped by the event loop); send/recv are only posted there, so a rank can have a send
// and the matching receive of an exchange in flight at once. Collectives of one class complete
// strictly in issue order; a send or receive completes when its own message has gone or arrived,
// so one still waiting for its peer holds back nothing after it. The classes run concurrently,
// each in its own frame space (transport/router.h).
// Every operation ends by its deadline: one that passes it aborts the group with kTimeout.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "api/completion_pool.h"
#include "api/work_state.h"
#include "collectives/op_context.h"
#include "geoccl/communicator.h"
#include "protocol/frame.h"
#include "runtime/progress.h"

namespace geoccl::metrics {
class CommMetrics;
class TraceWriter;
}  // namespace geoccl::metrics
namespace geoccl::transport {
class Group;
class Router;
}  // namespace geoccl::transport

namespace geoccl::api {

class OpEngine {
 public:
  using Clock = std::chrono::steady_clock;
  // `metrics` and `trace` may be null (off). The workers start at once.
  OpEngine(transport::Router& router, transport::Group& group, runtime::Progress& progress, int rank,
           int world_size, uint32_t epoch, size_t chunk_bytes, metrics::CommMetrics* metrics,
           metrics::TraceWriter* trace);
  // Stops the workers (abort_pending() first if operations may be pending).
  ~OpEngine();
  OpEngine(const OpEngine&) = delete;
  OpEngine& operator=(const OpEngine&) = delete;

  // Queues a collective of class `priority`. `run` executes on its class's worker thread inside
  // an OpContext. `algo`: the algorithm's name for the metrics (static storage); null for the
  // communicator's own operations (set-up), which are not counted. Throws kInvalidArgument for
  // an unknown class, kAborted once the engine stops.
  Work submit(protocol::FrameHeader h, std::chrono::milliseconds timeout, Priority priority,
              std::function<void(collectives::OpContext&)> run, const char* algo = nullptr);
  // Queues a point-to-point transfer; sequence numbers are kept per peer and direction. `peer`
  // negative: a receive from any peer (found when the operation starts).
  Work submit_p2p(bool is_send, int peer, protocol::FrameHeader h, std::chrono::milliseconds timeout,
                  Priority priority, std::span<uint8_t> data);
  // Refuses new operations; whether issued operations have not completed yet.
  bool close();
  // Joins the workers (each finishes what it started first). Idempotent.
  void stop();

 private:
  struct Op {
    protocol::FrameHeader header;
    std::chrono::milliseconds timeout{};
    std::function<void(collectives::OpContext&)> run;  // collectives
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
    std::unique_ptr<collectives::OpContext> ctx;  // p2p: owns the posted requests
    std::vector<transport::RequestPtr> reqs;
    Clock::time_point deadline;
    std::exception_ptr error;
    std::string what;
    int source = -1;  // recv_any
    // Metrics and traces (when on): when it started, what it was.
    Clock::time_point started;
    int64_t trace_t0 = 0;
    const char* algo = nullptr;
    protocol::OpKind kind = protocol::OpKind::kNone;
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
  void worker_main(Channel& ch);
  void start(Channel& ch, Op& op);
  // recv_any: waits (bounded by `deadline`) until a peer's next message with the tag has
  // arrived, and sets op.peer. False when the group failed or the deadline passed (aborted).
  bool find_source(Channel& ch, Op& op, Clock::time_point deadline);
  // Completes finished in-flight operations (a point-to-point one still waiting holds back none
  // after it); aborts the group on an expired one.
  void retire(Channel& ch);
  // One retired operation's metrics and trace span.
  void record_completion(const InFlight& f);

  transport::Router& router_;
  transport::Group& group_;
  runtime::Progress& progress_;
  const int rank_;
  const uint32_t epoch_;
  const size_t chunk_bytes_;
  metrics::CommMetrics* const metrics_;
  metrics::TraceWriter* const trace_;
  // Guarded by progress_.mutex().
  bool stop_ = false;
  size_t incomplete_ = 0;  // issued operations whose Work has not completed
  std::array<Channel, kPriorityClasses> channels_;
  // Runs Work callbacks off the workers. Last member, so destroyed first: after the workers are
  // joined (nothing posts any more) and before the state a callback may still reach.
  detail::CompletionPool completions_;
};

}  // namespace geoccl::api
