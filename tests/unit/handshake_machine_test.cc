// The handshake state machine (protocol/handshake_machine.h), driven without sockets: both ends
// exchange their bytes in chunks of every size, a device's verdict is a callback.
#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "geoccl/config.h"
#include "protocol/handshake_machine.h"
#include "protocol/shm_hello.h"
#include "protocol/wire.h"
#include "security/secret.h"

using namespace geoccl;
using namespace geoccl::protocol;

namespace {

security::GroupKey key_of(const std::string& secret) {
  Config c;
  c.secret = secret;
  return security::job_key(*security::load_secret(c), 42, security::offered_ciphers("auto"));
}

HandshakeSetup setup(uint32_t rank, Transport t = Transport::kTcp, const security::GroupKey* key = nullptr) {
  HandshakeSetup s;
  s.rank = rank;
  s.world_size = 4;
  s.session_id = 42;
  s.params_hash = 7;
  s.transport = t;
  s.streams = 3;
  s.key = key;
  return s;
}

// The acceptor's device: accepts unless it returns a reason.
using Judge = std::function<std::optional<std::string>(const HandshakeAcceptor&)>;

// Carries each side's output to the other in chunks of `chunk` bytes until neither has more to
// say. Returns the bytes the acceptor did not use (what came behind the handshake).
std::vector<uint8_t> run(HandshakeDialler& d, HandshakeAcceptor& a, size_t chunk, const Judge& judge = {},
                         std::vector<uint8_t> trailing = {}) {
  std::vector<uint8_t> to_a = d.take_output(), to_d, left;
  to_a.insert(to_a.end(), trailing.begin(), trailing.end());
  for (int round = 0; round < 100 && (!to_a.empty() || !to_d.empty()); ++round) {
    size_t at = 0;
    while (at < to_a.size()) {
      const size_t n = std::min(chunk, to_a.size() - at);
      const size_t used = a.feed(std::span<const uint8_t>(to_a).subspan(at, n));
      if (a.state() == HandshakeState::kJudge) {
        const auto reason = judge ? judge(a) : std::nullopt;
        if (reason) a.refuse(HandshakeStatus::kRefused, *reason);
        else a.accept();
      }
      if (used < n) {  // the handshake ended inside this chunk: the rest is the caller's
        left.assign(to_a.begin() + static_cast<std::ptrdiff_t>(at + used), to_a.end());
        break;
      }
      at += n;
    }
    to_a.clear();
    const auto out = a.take_output();
    to_d.insert(to_d.end(), out.begin(), out.end());
    at = 0;
    while (at < to_d.size()) {
      const size_t n = std::min(chunk, to_d.size() - at);
      at += d.feed(std::span<const uint8_t>(to_d).subspan(at, n));
      if (d.state() != HandshakeState::kRunning) break;
    }
    to_d.clear();
    to_a = d.take_output();
  }
  return left;
}

// Both ends refused the handshake as a failed proof of the group secret, each saying so.
void expect_refused_as_wrong_secret(const HandshakeDialler& d, const HandshakeAcceptor& a) {
  ASSERT_EQ(d.state(), HandshakeState::kRefused);
  EXPECT_TRUE(d.auth_failed());
  EXPECT_NE(d.why().find("could not prove the group secret"), std::string::npos) << d.why();
  ASSERT_EQ(a.state(), HandshakeState::kRefused);
  EXPECT_TRUE(a.auth_failed());
  EXPECT_NE(a.why().find("rejected our proof of the group secret"), std::string::npos) << a.why();
}

}  // namespace

TEST(HandshakeMachine, WithoutASecretTheHelloAndReplyEstablishInAnyChunking) {
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{58}, size_t{1000}}) {
    HandshakeDialler d(setup(3), 1, 2);
    HandshakeAcceptor a(setup(1));
    const std::vector<uint8_t> frames = {9, 8, 7};
    const auto left = run(d, a, chunk, {}, frames);
    ASSERT_EQ(d.state(), HandshakeState::kDone) << chunk << " " << d.why();
    ASSERT_EQ(a.state(), HandshakeState::kDone) << chunk << " " << a.why();
    EXPECT_EQ(a.hello().rank, 3u);
    EXPECT_EQ(a.hello().stream, 2u);
    EXPECT_EQ(a.hello().transport, static_cast<uint8_t>(Transport::kTcp));
    EXPECT_EQ(d.reply().rank, 1u);
    EXPECT_EQ(left, frames) << chunk;  // bytes behind the Hello are the connection's
    EXPECT_EQ(d.keys().cipher, 0);
  }
}

TEST(HandshakeMachine, WithASecretBothEndsGetTheSameKeysAndTheExtensionArrives) {
  const auto key = key_of("machine-secret-0123456789");
  protocol::shm::Extension ext;
  ext.ring_bytes = 8192;
  ext.token[3] = 5;
  for (size_t chunk : {size_t{1}, size_t{13}, size_t{1000}}) {
    HandshakeDialler d(setup(2, Transport::kSharedMemory, &key), 0, 0, protocol::shm::encode_extension(ext));
    HandshakeAcceptor a(setup(0, Transport::kSharedMemory, &key));
    std::optional<protocol::shm::Extension> seen;
    run(d, a, chunk, [&](const HandshakeAcceptor& acc) -> std::optional<std::string> {
      protocol::shm::Extension e;
      if (protocol::shm::decode_extension(acc.extension(), &e)) seen = e;
      return std::nullopt;
    });
    ASSERT_EQ(d.state(), HandshakeState::kDone) << d.why();
    ASSERT_EQ(a.state(), HandshakeState::kDone) << a.why();
    ASSERT_TRUE(seen);
    protocol::shm::Extension after;  // still there once the proof is in
    EXPECT_TRUE(protocol::shm::decode_extension(a.extension(), &after));
    EXPECT_EQ(after.token, ext.token);
    EXPECT_EQ(seen->ring_bytes, 8192u);
    EXPECT_EQ(seen->token, ext.token);
    EXPECT_NE(d.keys().cipher, 0);
    EXPECT_EQ(d.keys().send, a.keys().recv);
    EXPECT_EQ(d.keys().recv, a.keys().send);
    EXPECT_NE(d.keys().send, d.keys().recv);
  }
}

TEST(HandshakeMachine, AWrongSecretIsReportedAtBothEnds) {
  const auto mine = key_of("the secret of rank zero!"), theirs = key_of("the secret of rank one!!");
  HandshakeDialler d(setup(1, Transport::kTcp, &theirs), 0, 0);
  HandshakeAcceptor a(setup(0, Transport::kTcp, &mine));
  run(d, a, 1000);
  expect_refused_as_wrong_secret(d, a);
  EXPECT_EQ(a.keys().cipher, 0);
  EXPECT_EQ(d.keys().cipher, 0);
}

TEST(HandshakeMachine, TheGroupsChecksRefuseBeforeTheDeviceIsAsked) {
  const auto key = key_of("machine-secret-0123456789");
  struct Case {
    HandshakeSetup dialler, acceptor;
    HandshakeStatus status;
    const char* why;
  };
  std::vector<Case> cases;
  auto c = [&](auto change_d, auto change_a, HandshakeStatus st, const char* why) {
    Case k{setup(3), setup(1), st, why};
    change_d(k.dialler);
    change_a(k.acceptor);
    cases.push_back(k);
  };
  auto same = [](HandshakeSetup&) {};
  c([](HandshakeSetup& s) { s.session_id = 43; }, same, HandshakeStatus::kBadSession, "different session");
  c([](HandshakeSetup& s) { s.params_hash = 8; }, same, HandshakeStatus::kBadParams, "group parameters differ");
  c([](HandshakeSetup& s) { s.world_size = 5; }, same, HandshakeStatus::kBadWorldSize, "(5 vs 4)");
  c([](HandshakeSetup& s) { s.transport = Transport::kSharedMemory; }, same, HandshakeStatus::kBadTransport,
    "a shm Hello reached the tcp listener");
  c([&](HandshakeSetup& s) { s.key = &key; }, same, HandshakeStatus::kAuthMismatch, "one side has a group secret");
  c(same, [&](HandshakeSetup& s) { s.key = &key; }, HandshakeStatus::kAuthMismatch, "one side has a group secret");
  c([](HandshakeSetup& s) { s.rank = 0; }, same, HandshakeStatus::kBadRank, "the higher rank of a pair dials");
  c(same, [](HandshakeSetup& s) { s.streams = 2; }, HandshakeStatus::kBadStream, "stream index out of range");
  for (const auto& k : cases) {
    HandshakeDialler d(k.dialler, 1, 2);
    HandshakeAcceptor a(k.acceptor);
    bool asked = false;
    run(d, a, 5, [&](const HandshakeAcceptor&) -> std::optional<std::string> {
      asked = true;
      return std::nullopt;
    });
    EXPECT_FALSE(asked) << k.why;
    ASSERT_EQ(a.state(), HandshakeState::kRefused) << k.why;
    EXPECT_EQ(a.status(), k.status) << k.why;
    ASSERT_EQ(d.state(), HandshakeState::kRefused) << k.why;
    EXPECT_EQ(d.status(), k.status) << k.why;
    EXPECT_FALSE(d.auth_failed());
    EXPECT_NE(d.why().find(k.why), std::string::npos) << d.why();
  }
}

TEST(HandshakeMachine, TheDevicesRefusalReachesTheDiallerWithItsReason) {
  const auto key = key_of("machine-secret-0123456789");
  for (const auto* k : {static_cast<const security::GroupKey*>(nullptr), &key}) {
    HandshakeDialler d(setup(3, Transport::kTcp, k), 1, 0);
    HandshakeAcceptor a(setup(1, Transport::kTcp, k));
    run(d, a, 3, [](const HandshakeAcceptor&) { return std::optional<std::string>("token mismatch"); });
    ASSERT_EQ(d.state(), HandshakeState::kRefused);
    EXPECT_EQ(d.status(), HandshakeStatus::kRefused);
    EXPECT_EQ(d.why(), "token mismatch");
    EXPECT_EQ(a.why(), "token mismatch");
  }
  // A reason longer than the wire allows is cut, not refused.
  HandshakeDialler d(setup(3), 1, 0);
  HandshakeAcceptor a(setup(1));
  run(d, a, 1000, [](const HandshakeAcceptor&) { return std::optional<std::string>(std::string(1000, 'r')); });
  ASSERT_EQ(d.state(), HandshakeState::kRefused);
  EXPECT_EQ(d.why(), std::string(kMaxReason, 'r'));
}

TEST(HandshakeMachine, ARelayRequestCarriesNoAuthenticationAndIsAnsweredByTheRelay) {
  const auto key = key_of("machine-secret-0123456789");
  for (bool reached : {true, false}) {
    // Rank 0 asks rank 3 to carry its stream 1 to rank 2 (a lower rank asks: the relay takes it).
    HandshakeDialler d(setup(0, Transport::kTcp, &key), 3, 1, {}, kHelloFlagRelayRequest, 2);
    auto relay = setup(3, Transport::kTcp, &key);
    relay.relays = true;
    HandshakeAcceptor a(relay);
    const auto hello = d.take_output();
    EXPECT_EQ(hello.size(), kHelloSize);  // no AuthInit
    EXPECT_EQ(a.feed(hello), kHelloSize);
    ASSERT_EQ(a.state(), HandshakeState::kJudge) << a.why();
    EXPECT_TRUE(a.relay_request());
    EXPECT_EQ(a.hello().via, 2u);
    const auto answer = a.relay_reply(reached);
    EXPECT_EQ(d.feed(answer), kReplySize);
    EXPECT_EQ(d.state(), reached ? HandshakeState::kDone : HandshakeState::kRefused);
    if (!reached) {
      EXPECT_EQ(d.status(), HandshakeStatus::kUnreachable);
    }
  }
  // A transport that relays nothing refuses the request, secret or not.
  {
    HandshakeDialler d(setup(0, Transport::kSharedMemory), 3, 0, {}, kHelloFlagRelayRequest, 2);
    HandshakeAcceptor a(setup(3, Transport::kSharedMemory));
    run(d, a, 1000);
    ASSERT_EQ(a.state(), HandshakeState::kRefused);
    EXPECT_EQ(d.status(), HandshakeStatus::kRefused);
    EXPECT_NE(d.why().find("takes no relay or dial-back requests"), std::string::npos) << d.why();
  }
  // Then the handshake through the tunnel, end to end, says which relay carries it.
  HandshakeDialler d(setup(2, Transport::kTcp, &key), 0, 1, {}, kHelloFlagRelayed, 3);
  HandshakeAcceptor a(setup(0, Transport::kTcp, &key));
  run(d, a, 1000);
  ASSERT_EQ(a.state(), HandshakeState::kDone) << a.why();
  EXPECT_EQ(a.hello().flags & kHelloFlagRelayed, kHelloFlagRelayed);
  EXPECT_EQ(a.hello().via, 3u);
}

TEST(HandshakeMachine, ADialBackRequestWithoutASecretIsAnsweredWithoutAProof) {
  auto tcp = [&](uint32_t rank) {
    auto s = setup(rank, Transport::kTcp);
    s.relays = true;
    return s;
  };
  {
    // Rank 1 asks rank 3 to dial it: judged, answered and done.
    HandshakeDialler d(tcp(1), 3, 0, {}, kHelloFlagDialBack);
    HandshakeAcceptor a(tcp(3));
    const auto hello = d.take_output();
    EXPECT_EQ(hello.size(), kHelloSize);
    EXPECT_EQ(a.feed(hello), kHelloSize);
    ASSERT_EQ(a.state(), HandshakeState::kJudge) << a.why();
    EXPECT_TRUE(a.dial_back_request());
    EXPECT_FALSE(a.dial_back_needs_proof());
    EXPECT_FALSE(a.relay_request());
    a.accept();  // not for a request without a secret: nothing is output
    EXPECT_TRUE(a.take_output().empty());
    EXPECT_EQ(d.feed(a.relay_reply(true)), kReplySize);
    EXPECT_EQ(d.state(), HandshakeState::kDone);
  }
  // A higher rank cannot ask (it dials), nor can a transport without requests take one.
  for (auto [asker, other, transport] : {std::tuple{3u, 1u, Transport::kTcp}, std::tuple{1u, 3u, Transport::kSharedMemory}}) {
    auto ds = transport == Transport::kTcp ? tcp(asker) : setup(asker, transport);
    auto as = transport == Transport::kTcp ? tcp(other) : setup(other, transport);
    HandshakeDialler d(ds, other, 0, {}, kHelloFlagDialBack);
    HandshakeAcceptor a(as);
    run(d, a, 1000);
    EXPECT_EQ(a.state(), HandshakeState::kRefused);
    EXPECT_EQ(d.state(), HandshakeState::kRefused);
  }
}

// A dial-back request makes the acceptor connect out: with a secret it is a connection's
// handshake, done only when the dialler proved the secret, directly or through a relay.
TEST(HandshakeMachine, ADialBackRequestWithASecretCompletesOnlyWithTheRightSecret) {
  const auto key = key_of("machine-secret-0123456789"), other = key_of("a stranger's guess 0123");
  auto tcp = [&](uint32_t rank, const security::GroupKey* k) {
    auto s = setup(rank, Transport::kTcp, k);
    s.relays = true;
    return s;
  };
  for (uint32_t relayed : {0u, kHelloFlagRelayed}) {
    for (size_t chunk : {size_t{1}, size_t{13}, size_t{1000}}) {
      SCOPED_TRACE(std::to_string(relayed) + " " + std::to_string(chunk));
      HandshakeDialler d(tcp(1, &key), 3, 0, {}, kHelloFlagDialBack | relayed, relayed ? 2 : 0);
      HandshakeAcceptor a(tcp(3, &key));
      bool judged = false;
      run(d, a, chunk, [&](const HandshakeAcceptor& acc) -> std::optional<std::string> {
        judged = true;
        EXPECT_TRUE(acc.dial_back_request());
        EXPECT_TRUE(acc.dial_back_needs_proof());
        EXPECT_FALSE(acc.relay_request());
        return std::nullopt;
      });
      EXPECT_TRUE(judged);
      ASSERT_EQ(d.state(), HandshakeState::kDone) << d.why();
      ASSERT_EQ(a.state(), HandshakeState::kDone) << a.why();
      EXPECT_EQ(a.hello().flags & kHelloFlagRelayed, relayed);
      EXPECT_EQ(a.hello().via, relayed ? 2u : 0u);
    }
  }
  // The Hello alone is no request: the acceptor waits for the proof.
  {
    HandshakeDialler d(tcp(1, &key), 3, 0, {}, kHelloFlagDialBack);
    HandshakeAcceptor a(tcp(3, &key));
    auto out = d.take_output();
    ASSERT_EQ(out.size(), kHelloSize + security::kAuthInitSize);
    out.resize(kHelloSize);
    EXPECT_EQ(a.feed(out), kHelloSize);
    EXPECT_EQ(a.state(), HandshakeState::kRunning);
    EXPECT_EQ(a.want(), security::kAuthInitSize);
  }
  // Another secret: refused at both ends as a failed authentication.
  {
    HandshakeDialler d(tcp(1, &other), 3, 0, {}, kHelloFlagDialBack);
    HandshakeAcceptor a(tcp(3, &key));
    run(d, a, 1000);
    expect_refused_as_wrong_secret(d, a);
  }
  // A dial-back Hello of minor 4 brings no proof: refused at once with the reason, whatever
  // follows it.
  {
    HandshakeDialler d(tcp(1, &key), 3, 0, {}, kHelloFlagDialBack);
    auto out = d.take_output();
    Hello h;
    ASSERT_EQ(decode_hello(std::span<const uint8_t, kHelloSize>(out.data(), kHelloSize), &h), HandshakeStatus::kAccepted);
    h.minor = 4;
    const auto old = encode_hello(h);
    std::copy(old.begin(), old.end(), out.begin());
    HandshakeAcceptor a(tcp(3, &key));
    EXPECT_EQ(a.feed(out), kHelloSize);
    ASSERT_EQ(a.state(), HandshakeState::kRefused);
    EXPECT_EQ(a.status(), HandshakeStatus::kRefused);
    EXPECT_FALSE(a.auth_failed());
    EXPECT_NE(a.why().find("minor 4 carries no proof of the group secret"), std::string::npos) << a.why();
    const auto answer = a.take_output();
    ASSERT_GE(answer.size(), kReplySize);
    EXPECT_EQ(d.feed(answer), answer.size());
    ASSERT_EQ(d.state(), HandshakeState::kRefused);
    EXPECT_EQ(d.status(), HandshakeStatus::kRefused);
    EXPECT_NE(d.why().find("minor 4"), std::string::npos) << d.why();
  }
}

TEST(HandshakeMachine, AnAnswerFromAnotherRankOrAStrangerIsRefused) {
  HandshakeDialler d(setup(3), 2, 0);  // expects rank 2
  HandshakeAcceptor a(setup(1));
  run(d, a, 1000);
  ASSERT_EQ(d.state(), HandshakeState::kRefused);
  EXPECT_EQ(d.status(), HandshakeStatus::kBadRank);
  EXPECT_NE(d.why().find("answered as rank 1"), std::string::npos) << d.why();

  HandshakeAcceptor b(setup(1));
  const std::vector<uint8_t> junk(100, 'x');
  EXPECT_EQ(b.feed(junk), kHelloSize);
  ASSERT_EQ(b.state(), HandshakeState::kRefused);
  EXPECT_EQ(b.status(), HandshakeStatus::kBadMagic);
  Reply r;
  const auto out = b.take_output();
  ASSERT_EQ(out.size(), kReplySize);
  ASSERT_EQ(decode_reply(std::span<const uint8_t, kReplySize>(out.data(), kReplySize), &r), HandshakeStatus::kAccepted);
  EXPECT_EQ(r.status, HandshakeStatus::kBadMagic);

  HandshakeDialler e(setup(3), 1, 0);
  e.take_output();
  EXPECT_EQ(e.feed(junk), kReplySize);
  EXPECT_EQ(e.state(), HandshakeState::kRefused);
}

TEST(HandshakeMachine, AForgedProofIsRefusedAndGivesNoKeys) {
  const auto key = key_of("machine-secret-0123456789"), guess = key_of("a stranger's guess 0123");
  HandshakeDialler d(setup(3, Transport::kTcp, &guess), 1, 0);
  HandshakeAcceptor a(setup(1, Transport::kTcp, &key));
  a.feed(d.take_output());
  ASSERT_EQ(a.state(), HandshakeState::kJudge);
  a.accept();
  EXPECT_EQ(a.take_output().size(), kReplySize + security::kAuthRespSize);
  std::vector<uint8_t> fin;
  Writer w(&fin);
  w.u64(security::kAuthFinMagic);
  w.u8(0);
  for (int i = 0; i < 32; ++i) w.u8(static_cast<uint8_t>(i * 7));
  EXPECT_EQ(a.feed(fin), security::kAuthFinSize);
  ASSERT_EQ(a.state(), HandshakeState::kRefused);
  EXPECT_TRUE(a.auth_failed());
  EXPECT_NE(a.why().find("could not prove the group secret"), std::string::npos) << a.why();
  EXPECT_EQ(a.keys().cipher, 0);
}

// Once the accepting Reply is out the dialler reads frames next: a refusal then (the device's
// state changed while the proof travelled, or the proof came in a malformed packet) sends nothing
// and gives no keys; the device closes the connection.
TEST(HandshakeMachine, ARefusalAfterTheAcceptingReplySendsNothing) {
  const auto key = key_of("machine-secret-0123456789");
  for (const auto* k : {static_cast<const security::GroupKey*>(nullptr), &key}) {
    HandshakeDialler d(setup(3, Transport::kTcp, k), 1, 0);
    HandshakeAcceptor a(setup(1, Transport::kTcp, k));
    run(d, a, 1000);
    ASSERT_EQ(a.state(), HandshakeState::kDone) << a.why();
    a.refuse(HandshakeStatus::kRefused, "rank 3 is connected already");
    EXPECT_EQ(a.state(), HandshakeState::kRefused);
    EXPECT_TRUE(a.take_output().empty());
    EXPECT_EQ(a.why(), "rank 3 is connected already");
    EXPECT_EQ(a.keys().cipher, 0);
  }
  // Mid-proof (accepted, AuthFin not in yet): the same.
  HandshakeDialler d(setup(3, Transport::kTcp, &key), 1, 0);
  HandshakeAcceptor a(setup(1, Transport::kTcp, &key));
  a.feed(d.take_output());
  a.accept();
  EXPECT_FALSE(a.take_output().empty());
  a.refuse(HandshakeStatus::kMalformed, "");
  EXPECT_EQ(a.state(), HandshakeState::kRefused);
  EXPECT_TRUE(a.take_output().empty());
}
