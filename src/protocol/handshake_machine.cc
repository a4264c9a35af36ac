#include "protocol/handshake_machine.h"

#include <algorithm>
#include <utility>

namespace geoccl::protocol {

namespace {

// Appends what `in` has of the `need` bytes a message takes; returns the bytes used.
size_t gather(std::vector<uint8_t>& buf, size_t need, std::span<const uint8_t> in) {
  const size_t take = std::min(need > buf.size() ? need - buf.size() : 0, in.size());
  buf.insert(buf.end(), in.begin(), in.begin() + static_cast<std::ptrdiff_t>(take));
  return take;
}

std::string text_of(std::span<const uint8_t> b) { return std::string(b.begin(), b.end()); }

}  // namespace

void HandshakeEnd::refused(HandshakeStatus status, std::string why, bool auth) {
  state_ = HandshakeState::kRefused;
  status_ = status;
  why_ = std::move(why);
  auth_failed_ = auth;
}

// ---- dialler ----

HandshakeDialler::HandshakeDialler(const HandshakeSetup& me, uint32_t answerer, uint16_t stream,
                                   std::span<const uint8_t> extension, uint32_t relay, uint32_t via)
    : answerer_(answerer), relay_request_((relay & kHelloFlagRelayRequest) != 0) {
  Hello h;
  h.stream = stream;
  h.rank = me.rank;
  h.world_size = me.world_size;
  h.session_id = me.session_id;
  h.params_hash = me.params_hash;
  h.flags = relay & (kHelloFlagRelayRequest | kHelloFlagRelayed | kHelloFlagDialBack);
  if (me.key) h.flags |= kHelloFlagAuth;
  h.via = relay ? via : 0;
  h.transport = static_cast<uint8_t>(me.transport);
  const size_t ext = std::min(extension.size(), kMaxExtension);
  h.extension = static_cast<uint8_t>(ext);
  const auto hb = encode_hello(h);
  hello_.assign(hb.begin(), hb.end());
  hello_.insert(hello_.end(), extension.begin(), extension.begin() + static_cast<std::ptrdiff_t>(ext));
  out_ = hello_;
  if (me.key && !relay_request_) {
    auth_ = std::make_unique<security::AuthDialler>(*me.key);
    const auto init = auth_->init();
    out_.insert(out_.end(), init.begin(), init.end());
  }
}

size_t HandshakeDialler::want() const {
  if (state_ != HandshakeState::kRunning) return 0;
  switch (step_) {
    case Step::kReply: return kReplySize - in_.size();
    case Step::kReason: return reply_.reason - in_.size();
    case Step::kAuthResp: return security::kAuthRespSize - in_.size();
    case Step::kFinished: return 0;
  }
  return 0;
}

size_t HandshakeDialler::feed(std::span<const uint8_t> in) {
  size_t used = 0;
  while (state_ == HandshakeState::kRunning) {
    const size_t need = in_.size() + want();
    used += gather(in_, need, in.subspan(used));
    if (in_.size() < need) break;
    switch (step_) {
      case Step::kReply: {
        auto st = decode_reply(std::span<const uint8_t, kReplySize>(in_.data(), kReplySize), &reply_);
        if (st != HandshakeStatus::kAccepted) {
          refused(st, "did not answer as a geoccl peer (" + std::string(handshake_status_name(st)) + ")");
          break;
        }
        reply_bytes_ = in_;
        in_.clear();
        if (reply_.status != HandshakeStatus::kAccepted) {
          status_ = reply_.status;
          if (reply_.reason == 0) refused(reply_.status, handshake_status_name(reply_.status));
          else step_ = Step::kReason;
          break;
        }
        if (reply_.rank != answerer_) {
          refused(HandshakeStatus::kBadRank, "answered as rank " + std::to_string(reply_.rank));
          break;
        }
        if (auth_) {
          step_ = Step::kAuthResp;
        } else {
          step_ = Step::kFinished;
          state_ = HandshakeState::kDone;
        }
        break;
      }
      case Step::kReason: refused(reply_.status, text_of(in_)); break;
      case Step::kAuthResp: {
        std::array<uint8_t, security::kAuthFinSize> fin{};
        const auto ast = auth_->on_resp(
            hello_, reply_bytes_, std::span<const uint8_t, security::kAuthRespSize>(in_.data(), security::kAuthRespSize),
            &fin, &keys_);
        in_.clear();
        // On a wrong proof the acceptor still hears ours, saying so: both sides report it.
        if (ast == security::AuthStatus::kOk || ast == security::AuthStatus::kBadProof ||
            ast == security::AuthStatus::kBadKey)
          out_.insert(out_.end(), fin.begin(), fin.end());
        if (ast == security::AuthStatus::kOk) {
          step_ = Step::kFinished;
          state_ = HandshakeState::kDone;
        } else {
          keys_ = {};
          refused(HandshakeStatus::kAccepted, security::auth_status_name(ast), true);
        }
        break;
      }
      case Step::kFinished: break;
    }
  }
  return used;
}

// ---- acceptor ----

HandshakeAcceptor::HandshakeAcceptor(const HandshakeSetup& me) : me_(me) {}

size_t HandshakeAcceptor::want() const {
  if (state_ != HandshakeState::kRunning) return 0;
  return need_ - in_.size();
}

std::span<const uint8_t> HandshakeAcceptor::extension() const { return ext_; }

Reply HandshakeAcceptor::reply(HandshakeStatus status) const {
  Reply r;
  r.status = status;
  r.rank = me_.rank;
  if (me_.key) r.flags |= kHelloFlagAuth;
  return r;
}

void HandshakeAcceptor::refuse_with(HandshakeStatus status, std::string reason) {
  if (reason.size() > kMaxReason) reason.resize(kMaxReason);
  Reply r = reply(status);
  r.reason = static_cast<uint16_t>(reason.size());
  const auto b = encode_reply(r);
  out_.insert(out_.end(), b.begin(), b.end());
  out_.insert(out_.end(), reason.begin(), reason.end());
  step_ = Step::kFinished;
  refused(status, reason.empty() ? std::string(handshake_status_name(status)) : std::move(reason));
}

void HandshakeAcceptor::judge_hello() {
  auto st = decode_hello(std::span<const uint8_t, kHelloSize>(in_.data(), kHelloSize), &hello_);
  if (st != HandshakeStatus::kAccepted) return refuse_with(st, "");
  const Hello& h = hello_;
  st = check_hello(h, me_.world_size, me_.session_id, me_.streams, me_.params_hash);
  if (st == HandshakeStatus::kBadVersion)
    return refuse_with(st, std::string(handshake_status_name(st)) + " (" + std::to_string(h.version) + ", we speak " +
                               std::to_string(kProtocolVersion) + ")");
  if (st == HandshakeStatus::kBadWorldSize)
    return refuse_with(st, std::string(handshake_status_name(st)) + " (" + std::to_string(h.world_size) + " vs " +
                               std::to_string(me_.world_size) + ")");
  if (st != HandshakeStatus::kAccepted) return refuse_with(st, "");
  if (h.transport != static_cast<uint8_t>(me_.transport)) {
    const char* theirs = h.transport <= static_cast<uint8_t>(Transport::kQuic)
                             ? transport_name(static_cast<Transport>(h.transport))
                             : "unknown";
    return refuse_with(HandshakeStatus::kBadTransport, std::string("a ") + theirs + " Hello reached the " +
                                                           transport_name(me_.transport) + " listener");
  }
  st = check_auth_flag(h, me_.key != nullptr);
  if (st != HandshakeStatus::kAccepted) return refuse_with(st, "");
  if (request() && !me_.relays)
    return refuse_with(HandshakeStatus::kRefused, std::string("the ") + transport_name(me_.transport) +
                                                      " transport takes no relay or dial-back requests");
  // The higher rank of a pair dials; a relay request may come from any rank, a dial-back request
  // from a lower one.
  if (dial_back_request() ? h.rank >= me_.rank || relay_request() : !relay_request() && h.rank <= me_.rank)
    return refuse_with(HandshakeStatus::kBadRank, "rank " + std::to_string(h.rank) + " cannot dial rank " +
                                                      std::to_string(me_.rank) + ": the higher rank of a pair dials");
  // An older dialler's dial-back request brings no proof, and the request makes us connect out:
  // with a secret only a proven one is served, whatever minor the Hello claims.
  if (dial_back_needs_proof() && h.minor < kMinorDialBackProof)
    return refuse_with(HandshakeStatus::kRefused, "a dial-back request of handshake minor " + std::to_string(h.minor) +
                                                      " carries no proof of the group secret (minor " +
                                                      std::to_string(kMinorDialBackProof) + " does; we speak " +
                                                      std::to_string(kProtocolMinor) + ")");
  need_ = kHelloSize + h.extension + (me_.key && !unproven_request() ? security::kAuthInitSize : 0);
  step_ = Step::kRest;
}

size_t HandshakeAcceptor::feed(std::span<const uint8_t> in) {
  size_t used = 0;
  while (state_ == HandshakeState::kRunning) {
    used += gather(in_, need_, in.subspan(used));
    if (in_.size() < need_) break;
    switch (step_) {
      case Step::kHello: judge_hello(); break;
      case Step::kRest:
        ext_.assign(in_.begin() + static_cast<std::ptrdiff_t>(kHelloSize),
                    in_.begin() + static_cast<std::ptrdiff_t>(kHelloSize + hello_.extension));
        step_ = Step::kJudge;
        state_ = HandshakeState::kJudge;
        break;
      case Step::kFin: {
        const auto ast =
            auth_->on_fin(std::span<const uint8_t, security::kAuthFinSize>(in_.data(), security::kAuthFinSize), &keys_);
        step_ = Step::kFinished;
        if (ast == security::AuthStatus::kOk) {
          state_ = HandshakeState::kDone;
        } else {
          keys_ = {};
          refused(HandshakeStatus::kAccepted, security::auth_status_name(ast), true);
        }
        break;
      }
      case Step::kJudge:
      case Step::kFinished: return used;
    }
  }
  return used;
}

void HandshakeAcceptor::accept() {
  if (state_ != HandshakeState::kJudge || unproven_request()) return;
  const auto rb = encode_reply(reply(HandshakeStatus::kAccepted));
  replied_ = true;
  if (!me_.key) {
    out_.insert(out_.end(), rb.begin(), rb.end());
    step_ = Step::kFinished;
    state_ = HandshakeState::kDone;
    return;
  }
  auth_ = std::make_unique<security::AuthAcceptor>(*me_.key);
  std::array<uint8_t, security::kAuthRespSize> resp{};
  const size_t hello_end = kHelloSize + hello_.extension;
  const auto ast = auth_->on_init(
      std::span<const uint8_t>(in_.data(), hello_end), rb,
      std::span<const uint8_t, security::kAuthInitSize>(in_.data() + hello_end, security::kAuthInitSize), &resp);
  if (ast != security::AuthStatus::kOk)
    return refuse_with(ast == security::AuthStatus::kNoCommonCipher ? HandshakeStatus::kAuthMismatch
                                                                    : HandshakeStatus::kMalformed,
                       security::auth_status_name(ast));
  out_.insert(out_.end(), rb.begin(), rb.end());
  out_.insert(out_.end(), resp.begin(), resp.end());
  in_.clear();
  need_ = security::kAuthFinSize;
  step_ = Step::kFin;
  state_ = HandshakeState::kRunning;
}

void HandshakeAcceptor::refuse(HandshakeStatus status, std::string reason) {
  if (state_ == HandshakeState::kRefused) return;
  if (!replied_) return refuse_with(status, std::move(reason));
  // The dialler has our accepting Reply and reads frames next: a Reply now would be taken for
  // one. The refusal is this side's alone; the device closes the connection.
  step_ = Step::kFinished;
  keys_ = {};
  refused(status, reason.empty() ? std::string(handshake_status_name(status)) : std::move(reason));
}

std::array<uint8_t, kReplySize> HandshakeAcceptor::relay_reply(bool reached) const {
  return encode_reply(reply(reached ? HandshakeStatus::kAccepted : HandshakeStatus::kUnreachable));
}

}  // namespace geoccl::protocol
