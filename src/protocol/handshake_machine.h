// The connection handshake as one I/O-free state machine, which every device drives the same way:
// bytes in, bytes out, a verdict. TCP runs it on each stream, shared memory on its unix socket,
// QUIC on its control stream.
//
//   dialler                                          acceptor
//   Hello, extension, [AuthInit]        ------->     the group's checks; then its device judges
//                                                    what only it can (accept or refuse)
//                   <-------   Reply, [reason] | [AuthResp]
//   [AuthFin]                           ------->     the dialler's proof: done, or refused
//
// The wire formats are handshake.h's (Hello, Reply) and security/auth.h's (AuthInit, AuthResp,
// AuthFin). The bracketed parts: AuthInit/AuthResp/AuthFin when this side has a group secret
// (HandshakeSetup::key), the reason text when the Reply refuses. A relay request (the Hello's
// kHelloFlagRelayRequest) is answered by the relay once it has reached the target, and carries no
// authentication: the dialler runs the handshake with the target end to end through the tunnel.
// A dial-back request (kHelloFlagDialBack) makes the acceptor connect out, so with a secret it is
// authenticated as a connection is, and served only once it is done; without one it is answered
// at kJudge like a relay request.
//
// Use: after constructing, and after every feed(), accept() or refuse(), send take_output()'s
// bytes; read at most want() bytes and feed() them (feed takes any chunk and returns what it
// used, so bytes behind the handshake, such as QUIC's first frames, stay with the caller). The
// machine reads no clock and owns no socket: deadlines and descriptors stay with the device.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol/handshake.h"
#include "security/auth.h"

namespace geoccl::protocol {

// What this rank says about itself and expects of its peers.
struct HandshakeSetup {
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint64_t session_id = 0;
  uint64_t params_hash = 0;
  Transport transport = Transport::kTcp;
  uint16_t streams = 1;                     // connections per pair (a Hello's stream is below)
  bool relays = false;                      // relay and dial-back requests are taken (else refused: TCP only)
  const security::GroupKey* key = nullptr;  // authenticate inside the handshake (the caller keeps it alive)
};

enum class HandshakeState {
  kRunning,  // more bytes are wanted
  kJudge,    // acceptor: the Hello passed the group's checks; the device accepts or refuses it
  kDone,     // established (keys() holds the connection's keys when authenticated)
  kRefused,  // ended: status() and why() say why
};

// What both ends have: their output, their state and, at the end, the verdict.
class HandshakeEnd {
 public:
  // The bytes to send now (empty when there are none).
  std::vector<uint8_t> take_output() { return std::exchange(out_, {}); }
  HandshakeState state() const { return state_; }
  // On kRefused: the status the refusal carries (kAccepted when the secret is what failed).
  HandshakeStatus status() const { return status_; }
  // On kRefused: what went wrong, for a message ("different session (another job?)", "the peer
  // could not prove the group secret ...", a device's reason).
  const std::string& why() const { return why_; }
  // On kRefused: whether the group secret is what failed (a wrong proof on either side) rather
  // than the Hello: a retry with the same secret fails the same way.
  bool auth_failed() const { return auth_failed_; }
  // On kDone with a secret: the connection's keys (cipher 0 otherwise).
  const security::ConnectionKeys& keys() const { return keys_; }

 protected:
  void refused(HandshakeStatus status, std::string why, bool auth = false);

  HandshakeState state_ = HandshakeState::kRunning;
  HandshakeStatus status_ = HandshakeStatus::kAccepted;
  std::string why_;
  bool auth_failed_ = false;
  std::vector<uint8_t> out_;
  security::ConnectionKeys keys_;
};

class HandshakeDialler : public HandshakeEnd {
 public:
  // `answerer`: the rank expected to answer (the relay, for a relay request). `relay` 0, one
  // relay flag with `via`, or kHelloFlagDialBack (handshake.h; with kHelloFlagRelayed and `via`
  // through a relay). `extension`: the transport's bytes behind the Hello. A relay request carries
  // no proof; everything else does when this side has a secret.
  HandshakeDialler(const HandshakeSetup& me, uint32_t answerer, uint16_t stream,
                   std::span<const uint8_t> extension = {}, uint32_t relay = 0, uint32_t via = 0);

  // Bytes wanted to make progress (0 once it ended); feed() takes any chunk and returns how many
  // of its bytes it used.
  size_t want() const;
  size_t feed(std::span<const uint8_t> in);
  const Reply& reply() const { return reply_; }

 private:
  enum class Step { kReply, kReason, kAuthResp, kFinished };
  uint32_t answerer_;
  bool relay_request_;
  Step step_ = Step::kReply;
  std::vector<uint8_t> hello_;  // Hello and extension, as sent: the transcript's first part
  std::vector<uint8_t> in_;     // the message being read
  std::vector<uint8_t> reply_bytes_;
  Reply reply_;
  std::unique_ptr<security::AuthDialler> auth_;
};

class HandshakeAcceptor : public HandshakeEnd {
 public:
  explicit HandshakeAcceptor(const HandshakeSetup& me);

  size_t want() const;
  size_t feed(std::span<const uint8_t> in);

  // From kJudge on: the dialler's Hello and its transport extension.
  const Hello& hello() const { return hello_; }
  std::span<const uint8_t> extension() const;
  bool relay_request() const { return (hello_.flags & kHelloFlagRelayRequest) != 0; }
  // A lower rank asks to be dialled (kHelloFlagDialBack). With a secret (dial_back_needs_proof())
  // it is accept()ed as a connection is and served once kDone, when the dialler has proved the
  // secret; without one it is answered at kJudge with relay_reply(true).
  bool dial_back_request() const { return (hello_.flags & kHelloFlagDialBack) != 0; }
  bool dial_back_needs_proof() const { return dial_back_request() && me_.key != nullptr; }

  // kJudge -> the Reply (and with a secret AuthResp) is output; kDone, or kRunning until the
  // dialler's proof. Not for a relay request, nor a dial-back request without a secret
  // (relay_reply()).
  void accept();
  // A refusal by the device, at any point until it adopts the connection (in kJudge, or its own
  // check of what it read, such as a packet that held more or less than a message, or of a state
  // that changed while the proof travelled) -> kRefused. Before accept() a refusing Reply with
  // `reason` (empty: the status says it) is output; after it nothing is (the dialler reads
  // frames next): the device closes the connection.
  void refuse(HandshakeStatus status, std::string reason);
  // A relay request's answer, sent by the relay once it knows whether it reached the target.
  std::array<uint8_t, kReplySize> relay_reply(bool reached) const;

 private:
  bool request() const { return relay_request() || dial_back_request(); }
  // Answered at kJudge by relay_reply(), without a proof.
  bool unproven_request() const { return relay_request() || (dial_back_request() && !me_.key); }
  void judge_hello();
  void refuse_with(HandshakeStatus status, std::string reason);
  Reply reply(HandshakeStatus status) const;

  enum class Step { kHello, kRest, kJudge, kFin, kFinished };
  HandshakeSetup me_;
  Step step_ = Step::kHello;
  Hello hello_;
  std::vector<uint8_t> in_;  // Hello, extension, AuthInit; then AuthFin
  std::vector<uint8_t> ext_;  // the extension, kept past accept()
  size_t need_ = kHelloSize;
  bool replied_ = false;  // the accepting Reply is out
  std::unique_ptr<security::AuthAcceptor> auth_;
};

}  // namespace geoccl::protocol
