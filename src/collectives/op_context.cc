#include "collectives/op_context.h"

#include <algorithm>

#include "core/reduce.h"
#include "geoccl/error.h"

namespace geoccl::collectives {

OpContext::OpContext(transport::Transport& t, runtime::Progress& progress, ScratchPool& scratch,
                     protocol::FrameHeader header, Clock::time_point deadline, size_t chunk_bytes)
    : transport_(t),
      progress_(progress),
      header_(header),
      deadline_(deadline),
      chunk_bytes_(chunk_bytes),
      scratch_(scratch) {
  for (int i = 0; i < t.size(); ++i) members_.push_back(i);
  my_index_ = t.rank();
}

OpContext OpContext::sub(std::vector<int> members, int scratch_base) {
  OpContext c(transport_, progress_, scratch_, header_, deadline_, chunk_bytes_);
  c.scratch_base_ = scratch_base_ + scratch_base;
  c.finishes_ = finishes_;
  c.trace_ = trace_;
  c.forwarding_ = forwarding_;
  c.my_index_ = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == transport_.rank()) c.my_index_ = static_cast<int>(i);
  if (c.my_index_ < 0) throw Error(ErrorCode::kInternal, "subgroup does not contain this rank");
  c.members_ = std::move(members);
  return c;
}

OpContext::~OpContext() {
  // Requests of a failed group complete with its error; this never waits past the deadline
  // because the timeout path aborts the group, which completes everything.
  for (auto& r : outstanding_) {
    if (!r->done.load(std::memory_order_acquire)) {
      if (!progress_.wait_until([&] { return r->done.load(std::memory_order_acquire); }, deadline_)) {
        transport_.abort(ErrorCode::kTimeout, "operation abandoned past its deadline");
        progress_.wait_until([&] { return r->done.load(std::memory_order_acquire); },
                             Clock::now() + std::chrono::seconds(5));
      }
    }
  }
  if (trace_) trace_done(nullptr);
}

void OpContext::trace_posted(const RequestPtr& r, int peer, size_t bytes, bool send) {
  posted_.push_back({r.get(), peer, bytes, metrics::TraceWriter::now_us(), send});
}

void OpContext::trace_done(const transport::Request* r) {
  const int64_t now = metrics::TraceWriter::now_us();
  for (size_t i = 0; i < posted_.size();) {
    const Posted& p = posted_[i];
    if (r && p.req != r) {
      ++i;
      continue;
    }
    const size_t bytes = p.send ? p.bytes : p.req->bytes;
    trace_->async_span(p.send ? "send" : "recv", "transfer", metrics::kTraceTrackPeer + p.peer, p.t0, now,
                       "\"peer\":" + std::to_string(p.peer) + ",\"bytes\":" + std::to_string(bytes) +
                           ",\"op\":" + metrics::json_string(protocol::op_kind_name(header_.kind)) +
                           ",\"seq\":" + std::to_string(header_.seq));
    posted_[i] = posted_.back();
    posted_.pop_back();
    if (r) return;
  }
}

RequestPtr OpContext::send(int peer, std::span<const uint8_t> data, uint64_t offset) {
  protocol::FrameHeader h = header_;
  h.offset = offset;
  auto r = transport_.send(global(peer), h, data);
  outstanding_.push_back(r);
  if (trace_) trace_posted(r, global(peer), data.size(), true);
  return r;
}

RequestPtr OpContext::recv_upto(int peer, std::span<uint8_t> dst, uint64_t offset) {
  protocol::FrameHeader h = header_;
  h.offset = offset;
  auto r = transport_.recv(global(peer), h, dst);
  outstanding_.push_back(r);
  if (trace_) trace_posted(r, global(peer), dst.size(), false);
  return r;
}

RequestPtr OpContext::recv(int peer, std::span<uint8_t> dst, uint64_t offset) {
  auto r = recv_upto(peer, dst, offset);
  std::lock_guard lk(finishes_->mu);
  finishes_->of[r.get()] = Finish{dst.size(), {}, {}, {}, {}};
  return r;
}

RequestPtr OpContext::recv_reduce(int peer, std::span<uint8_t> dst, std::span<uint8_t> staging,
                                  DataType t, ReduceOp op, uint64_t offset) {
  protocol::FrameHeader h = header_;
  h.offset = offset;
  Finish f{dst.size(), {}, {}, t, op};
  RequestPtr r = transport_.recv_reduce(global(peer), h, dst, t, op);
  if (!r) {
    r = transport_.recv(global(peer), h, staging.first(dst.size()));
    f.dst = dst;
    f.staging = staging.first(dst.size());
  }
  outstanding_.push_back(r);
  if (trace_) trace_posted(r, global(peer), dst.size(), false);
  std::lock_guard lk(finishes_->mu);
  finishes_->of[r.get()] = f;
  return r;
}

bool OpContext::forwards_around() const {
  const int n = size();
  if (n < 3 || !forwarding_) return false;
  const int first = my_index_ == 0 ? 1 : 0;
  for (int m = 0; m < n; ++m)
    if (m != my_index_ && m != first && !transport_.forwards(global(first), global(m), header_.channel)) return false;
  return true;
}

transport::Transport::Forwarded OpContext::recv_forward(int from, int to, std::span<uint8_t> dst,
                                                        const transport::Transport::Forwarding& how, uint64_t offset) {
  protocol::FrameHeader h = header_;
  h.offset = offset;
  auto f = transport_.recv_forward(global(from), h, dst, global(to), h, how);
  if (!f.recv || !f.send) {
    const std::string why = "recv_forward between ranks " + std::to_string(global(from)) + " and " +
                            std::to_string(global(to)) + ", which no device forwards between";
    transport_.abort(ErrorCode::kInternal, why);
    throw Error(ErrorCode::kInternal, why);
  }
  outstanding_.push_back(f.recv);
  outstanding_.push_back(f.send);
  if (trace_) {
    trace_posted(f.recv, global(from), dst.size(), false);
    trace_posted(f.send, global(to), dst.size(), true);
  }
  std::lock_guard lk(finishes_->mu);
  finishes_->of[f.recv.get()] = Finish{dst.size(), {}, {}, {}, {}};
  return f;
}

void OpContext::finish(const RequestPtr& r) {
  Finish f;
  {
    std::lock_guard lk(finishes_->mu);
    auto it = finishes_->of.find(r.get());
    if (it == finishes_->of.end()) return;
    f = it->second;
    finishes_->of.erase(it);
  }
  if (r->bytes != f.exact) {
    const std::string why = std::string("ranks disagree on ") + protocol::op_kind_name(header_.kind) +
                            " #" + std::to_string(header_.seq) + ": message length: expected " +
                            std::to_string(f.exact) + " bytes, peer sent " + std::to_string(r->bytes);
    transport_.abort(ErrorCode::kMismatch, why);
    throw Error(ErrorCode::kMismatch, why);
  }
  if (!f.staging.empty()) core::reduce_into(f.dst.data(), f.staging.data(), f.dst.size() / dtype_size(f.dtype), f.dtype, f.op);
}

void OpContext::send_chunked(int peer, std::span<const uint8_t> data, std::vector<RequestPtr>* out) {
  for (size_t off = 0; off < data.size(); off += chunk_bytes_)
    out->push_back(send(peer, data.subspan(off, std::min(chunk_bytes_, data.size() - off)), off));
}

void OpContext::send_chunked_to_each(std::span<const PeerBytes> parts, std::vector<RequestPtr>* out) {
  for (size_t off = 0;; off += chunk_bytes_) {
    bool more = false;
    for (const auto& [peer, data] : parts) {
      if (off >= data.size()) continue;
      out->push_back(send(peer, data.subspan(off, std::min(chunk_bytes_, data.size() - off)), off));
      more = true;
    }
    if (!more) return;
  }
}

void OpContext::recv_chunked(int peer, std::span<uint8_t> dst, std::vector<RequestPtr>* out) {
  for (size_t off = 0; off < dst.size(); off += chunk_bytes_)
    out->push_back(recv(peer, dst.subspan(off, std::min(chunk_bytes_, dst.size() - off)), off));
}

void OpContext::wait(const RequestPtr& r) {
  if (!r->done.load(std::memory_order_acquire) &&
      !progress_.wait_until([&] { return r->done.load(std::memory_order_acquire); }, deadline_)) {
    transport_.abort(ErrorCode::kTimeout,
                     std::string(protocol::op_kind_name(header_.kind)) + " #" +
                         std::to_string(header_.seq) + " passed its deadline on rank " +
                         std::to_string(transport_.rank()));
  }
  if (!r->done.load(std::memory_order_acquire))
    progress_.wait_until([&] { return r->done.load(std::memory_order_acquire); },
                         Clock::now() + std::chrono::seconds(5));
  if (!r->done.load(std::memory_order_acquire))
    throw Error(ErrorCode::kInternal, "request did not complete after abort");
  if (!r->ok()) throw Error(r->failure.code, r->failure.message, r->failure.ranks);
  if (trace_) trace_done(r.get());
  finish(r);
}

void OpContext::wait_all(std::vector<RequestPtr>& rs) {
  for (auto& r : rs) wait(r);
  rs.clear();
}

}  // namespace geoccl::collectives
