#include "transport/group.h"

#include "core/logging.h"

namespace geoccl::transport {

void Group::fail(ErrorCode code, const std::string& message, bool tell_peers) {
  {
    std::lock_guard lk(mu_);
    if (failure_) return;
    failure_ = Failure{code, message};
  }
  failed_.store(true, std::memory_order_release);
  GEOCCL_LOG(kError, "group failed: " << error_code_name(code) << ": " << message);
  const Failure f{code, message};
  for (auto& l : listeners_) l(f, tell_peers);
  notify();
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

void Group::early_frame(int peer, const protocol::FrameHeader& h) {
  if (!current_op_ || failed()) return;
  const protocol::FrameHeader& cur = *current_op_;
  if (h.kind == protocol::OpKind::kSendRecv || h.seq > cur.seq) return;
  const std::string why = h.seq < cur.seq ? "a frame of an earlier operation arrived late"
                                          : protocol::describe_mismatch(cur, h);
  if (why.empty()) return;
  fail(ErrorCode::kMismatch,
       std::string("ranks disagree on ") + protocol::op_kind_name(cur.kind) + " #" +
           std::to_string(cur.seq) + " with rank " + std::to_string(peer) + ": " + why,
       true);
}

}  // namespace geoccl::transport
