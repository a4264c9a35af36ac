#include "api/op_engine.h"

#include <algorithm>

#include "geoccl/error.h"
#include "metrics/comm_metrics.h"
#include "metrics/trace.h"
#include "transport/group.h"
#include "transport/router.h"

namespace geoccl::api {

using collectives::OpContext;
using protocol::FrameHeader;
using protocol::OpKind;

OpEngine::OpEngine(transport::Router& router, transport::Group& group, runtime::Progress& progress, int rank,
                   int world_size, uint32_t epoch, size_t chunk_bytes, metrics::CommMetrics* metrics,
                   metrics::TraceWriter* trace)
    : router_(router),
      group_(group),
      progress_(progress),
      rank_(rank),
      epoch_(epoch),
      chunk_bytes_(chunk_bytes),
      metrics_(metrics),
      trace_(trace) {
  for (size_t c = 0; c < channels_.size(); ++c) {
    channels_[c].id = static_cast<uint8_t>(c);
    channels_[c].send_seq.assign(static_cast<size_t>(world_size), 0);
    channels_[c].recv_seq.assign(static_cast<size_t>(world_size), 0);
  }
  for (auto& ch : channels_) ch.worker = std::thread([this, &ch] { worker_main(ch); });
}

OpEngine::~OpEngine() { stop(); }

bool OpEngine::close() {
  std::lock_guard lk(progress_.mutex());
  stop_ = true;
  return incomplete_ > 0;
}

void OpEngine::stop() {
  {
    std::lock_guard lk(progress_.mutex());
    stop_ = true;
  }
  progress_.notify();
  for (auto& ch : channels_)
    if (ch.worker.joinable()) ch.worker.join();
}

Work OpEngine::enqueue(Op op, Priority priority) {
  const auto c = static_cast<size_t>(priority);
  if (c >= channels_.size())
    throw Error(ErrorCode::kInvalidArgument, "unknown priority class " + std::to_string(c));
  Channel& ch = channels_[c];
  auto state = std::make_shared<detail::WorkState>();
  op.work = state;
  op.header.channel = ch.id;
  op.header.epoch = epoch_;
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

Work OpEngine::submit(FrameHeader h, std::chrono::milliseconds timeout, Priority priority,
                      std::function<void(OpContext&)> run, const char* algo) {
  Op op;
  op.header = h;
  op.algo = algo;
  op.timeout = timeout;
  op.run = std::move(run);
  return enqueue(std::move(op), priority);
}

Work OpEngine::submit_p2p(bool is_send, int peer, FrameHeader h, std::chrono::milliseconds timeout,
                          Priority priority, std::span<uint8_t> data) {
  Op op;
  op.any_source = peer < 0;
  op.header = h;
  op.timeout = timeout;
  op.p2p = true;
  op.algo = "p2p";
  op.is_send = is_send;
  op.peer = peer;
  op.data = data;
  return enqueue(std::move(op), priority);
}

void OpEngine::record_completion(const InFlight& f) {
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

bool OpEngine::find_source(Channel& ch, Op& op, Clock::time_point deadline) {
  // The group records early messages of this class only while this receive waits.
  router_.watch_early_messages(ch.id, true);
  struct Unwatch {
    transport::Router& router;
    uint8_t channel;
    ~Unwatch() { router.watch_early_messages(channel, false); }
  } unwatch{router_, ch.id};
  std::vector<uint64_t> next(ch.recv_seq.size());
  for (size_t p = 0; p < next.size(); ++p)
    next[p] = static_cast<int>(p) == rank_ ? UINT64_MAX : ch.recv_seq[p] + 1;
  for (;;) {
    const int src = group_.early_message(ch.id, op.header.tag, next);
    if (src >= 0) {
      op.peer = src;
      return true;
    }
    if (router_.failure()) return false;
    if (Clock::now() >= deadline) {
      router_.abort(ErrorCode::kTimeout, "recv from any source (tag " + std::to_string(op.header.tag) +
                                             ") passed its deadline on rank " + std::to_string(rank_));
      return false;
    }
    retire(ch);  // earlier operations still complete meanwhile
    progress_.wait_until([&] { return router_.failure().has_value() ||
                                      group_.early_message(ch.id, op.header.tag, next) >= 0; },
                         std::min(deadline, Clock::now() + std::chrono::milliseconds(50)));
  }
}

void OpEngine::start(Channel& ch, Op& op) {
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
  if (const auto failure = router_.failure()) {
    f.error = std::make_exception_ptr(Error(failure->code, failure->message, failure->ranks));
    f.what = protocol::op_kind_name(op.header.kind);
    ch.inflight.push_back(std::move(f));
    return;
  }
  if (op.p2p && !op.is_send) {
    if (op.any_source && !find_source(ch, op, f.deadline)) {
      const auto failure = router_.failure();
      f.error =
          std::make_exception_ptr(Error(failure ? failure->code : ErrorCode::kAborted,
                                        failure ? failure->message : "recv from any source failed",
                                        failure ? failure->ranks : std::vector<int>{}));
      f.what = "recv_any";
      ch.inflight.push_back(std::move(f));
      return;
    }
    op.header.seq = ++ch.recv_seq[static_cast<size_t>(op.peer)];
    f.source = op.any_source ? op.peer : -1;
  }
  f.what = std::string(protocol::op_kind_name(op.header.kind)) + " #" + std::to_string(op.header.seq);
  f.seq = op.header.seq;
  f.ctx = std::make_unique<OpContext>(router_, progress_, ch.scratch, op.header, f.deadline, chunk_bytes_);
  if (trace_ && f.algo) f.ctx->set_trace(trace_);
  if (!op.p2p) router_.begin_operation(op.header);
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

void OpEngine::retire(Channel& ch) {
  // Collectives finish on the worker before the next operation starts, so only point-to-point
  // operations wait here for their peer; one that waits holds back none after it (a receive
  // from a rank that has not sent yet must not hold up the collectives and sends behind it).
  // Collectives therefore still complete in issue order among themselves.
  for (auto it = ch.inflight.begin(); it != ch.inflight.end();) {
    InFlight& f = *it;
    bool done = true;
    for (auto& r : f.reqs) done = done && r->done.load(std::memory_order_acquire);
    if (!done) {
      if (Clock::now() < f.deadline) {
        ++it;
        continue;
      }
      router_.abort(ErrorCode::kTimeout, f.what + " passed its deadline on rank " + std::to_string(rank_));
      continue;  // the abort completed every request
    }
    if (!f.error)
      for (auto& r : f.reqs)
        if (!r->ok()) {
          f.error =
              std::make_exception_ptr(Error(r->failure.code, r->failure.message, r->failure.ranks));
          break;
        }
    if (f.algo) record_completion(f);
    auto work = std::move(f.work);
    auto error = f.error;
    work->source = f.source;
    it = ch.inflight.erase(it);
    {
      std::lock_guard lk(progress_.mutex());
      --incomplete_;
    }
    work->complete(error, &completions_);
  }
}

void OpEngine::worker_main(Channel& ch) {
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
          auto until = Clock::now() + std::chrono::milliseconds(100);
          for (const InFlight& f : ch.inflight) until = std::min(until, f.deadline);
          progress_.cv().wait_until(lk, until);
        }
      }
      op = std::move(ch.queue.front());
      ch.queue.pop_front();
    }
    start(ch, op);
    retire(ch);
  }
}

}  // namespace geoccl::api
