#include "transport/group.h"

#include <algorithm>

#include "core/logging.h"

namespace geoccl::transport {

void Group::fail(ErrorCode code, const std::string& message, bool tell_peers,
                 std::vector<int> ranks) {
  const Failure f{code, message, std::move(ranks)};
  {
    std::lock_guard lk(mu_);
    if (failure_) return;
    failure_ = f;
  }
  failed_.store(true, std::memory_order_release);
  GEOCCL_LOG(kError, "group failed: " << error_code_name(code) << ": " << message);
  std::vector<FailureListener> ls;
  {
    std::lock_guard lk(listeners_mu_);
    for (auto& [id, l] : listeners_) ls.push_back(l);
  }
  for (auto& l : ls) l(f, tell_peers);
  notify();
}

Group::ListenerId Group::on_failure(FailureListener l) {
  std::lock_guard lk(listeners_mu_);
  listeners_.emplace_back(next_listener_, std::move(l));
  return next_listener_++;
}

void Group::remove_failure_listener(ListenerId id) {
  std::lock_guard lk(listeners_mu_);
  std::erase_if(listeners_, [id](const auto& e) { return e.first == id; });
}

void Group::peer_aborted(int peer, std::span<const uint8_t> payload) {
  uint8_t code = 0;
  std::string msg;
  std::vector<int> ranks;
  if (!protocol::decode_abort(payload, &code, &msg, &ranks) || code == 0 || code > kLastErrorCode ||
      std::any_of(ranks.begin(), ranks.end(), [&](int r) { return r >= size_; })) {
    code = static_cast<uint8_t>(ErrorCode::kAborted);
    msg = "malformed abort frame";
    ranks.clear();
  }
  fail(static_cast<ErrorCode>(code), "rank " + std::to_string(peer) + " reports: " + msg, true,
       std::move(ranks));
}

void Group::heartbeat(int peer, std::span<const uint8_t> payload) {
  std::vector<protocol::SilentPeer> silent;
  if (!protocol::decode_heartbeat(payload, static_cast<uint32_t>(size_), &silent)) {
    fail(ErrorCode::kProtocol, "malformed heartbeat from rank " + std::to_string(peer), true);
    return;
  }
  if (liveness_) liveness_->report(peer, std::move(silent), std::chrono::steady_clock::now());
}

std::optional<Failure> Group::failure() const {
  if (!failed()) return std::nullopt;
  std::lock_guard lk(mu_);
  return failure_;
}

bool Group::complete_if_failed(const RequestPtr& req) {
  auto f = failure();
  if (!f) return false;
  complete(req, *f);
  notify();
  return true;
}

void Group::set_current_operation(const protocol::FrameHeader& h) {
  if (h.channel < kPriorityClasses) current_op_[h.channel] = h;
}

void Group::early_frame(int peer, const protocol::FrameHeader& h) {
  if (failed()) return;
  if (h.channel >= kPriorityClasses) {
    fail(ErrorCode::kMismatch,
         "rank " + std::to_string(peer) + " sent a frame on channel " + std::to_string(h.channel) +
             ", which this version does not have",
         true);
    return;
  }
  if (h.kind == protocol::OpKind::kSendRecv) {
    // Only a message's first frame says where it starts.
    if (h.offset != 0 || !watching_[h.channel]) return;
    {
      std::lock_guard lk(early_mu_);
      auto& by_peer = early_messages_[h.channel];
      if (by_peer.empty()) by_peer.resize(static_cast<size_t>(size_));
      by_peer[static_cast<size_t>(peer)][h.seq] = h.tag;
    }
    notify();
    return;
  }
  const auto& current = current_op_[h.channel];
  if (!current) return;
  const protocol::FrameHeader& cur = *current;
  if (h.seq > cur.seq) return;
  const std::string why = h.seq < cur.seq ? "a frame of an earlier operation arrived late"
                                          : protocol::describe_mismatch(cur, h);
  if (!why.empty()) mismatch(peer, cur, why);
}

void Group::watch_early_messages(uint8_t channel, bool on) {
  if (channel >= kPriorityClasses) return;
  watching_[channel] = on;
  if (on) return;
  std::lock_guard lk(early_mu_);
  early_messages_[channel].clear();
}

int Group::early_message(uint8_t channel, uint32_t tag, const std::vector<uint64_t>& next_seq) {
  if (channel >= kPriorityClasses) return -1;
  std::lock_guard lk(early_mu_);
  auto& by_peer = early_messages_[channel];
  for (size_t p = 0; p < by_peer.size() && p < next_seq.size(); ++p) {
    auto& m = by_peer[p];
    m.erase(m.begin(), m.lower_bound(next_seq[p]));
    const auto it = m.find(next_seq[p]);
    if (it != m.end() && it->second == tag) return static_cast<int>(p);
  }
  return -1;
}

bool Group::check_frame(int peer, const protocol::FrameHeader& expect, const protocol::FrameHeader& got,
                        size_t max_bytes, bool exact) {
  std::string why = protocol::describe_mismatch(expect, got);
  if (why.empty() && exact && got.payload_len != max_bytes)
    why = "message length: expected " + std::to_string(max_bytes) + " bytes to reduce, peer sent " +
          std::to_string(got.payload_len);
  if (why.empty() && got.payload_len > max_bytes)
    why = "message length: the receive holds at most " + std::to_string(max_bytes) +
          " bytes, peer sent " + std::to_string(got.payload_len);
  if (why.empty()) return true;
  mismatch(peer, expect, why);
  return false;
}

void Group::mismatch(int peer, const protocol::FrameHeader& op, const std::string& why) {
  fail(ErrorCode::kMismatch,
       std::string("ranks disagree on ") + protocol::op_kind_name(op.kind) + " #" +
           std::to_string(op.seq) + " with rank " + std::to_string(peer) + ": " + why,
       true);
}

}  // namespace geoccl::transport
