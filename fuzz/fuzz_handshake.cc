// The handshake: its decoders never crash, and accepted hellos and replies round-trip exactly but
// for the reserved bytes (ignored by this version's decoder, written as zero by its encoder). The
// state machine at both ends (handshake_machine.h), fed the input in chunks the input chooses,
// never crashes, never uses more than it is given, keeps its state rules, and never takes a
// stranger's bytes for a proof of the group secret.
#include <array>
#include <cstdlib>
#include <cstring>

#include "protocol/handshake.h"
#include "protocol/handshake_machine.h"

using namespace geoccl::protocol;

namespace {

// The input with the bytes the decoder ignores set to zero, as the encoder writes them.
// `reserved` is the length of the trailing reserved bytes: kHelloReserved for a Hello,
// kReplyReserved for a Reply.
template <size_t N>
std::array<uint8_t, N> canonical(const uint8_t* data, size_t reserved,
                                 std::initializer_list<size_t> ignored_bytes) {
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), data, N);
  for (size_t i = N - reserved; i < N; ++i) out[i] = 0;
  for (size_t i : ignored_bytes) out[i] = 0;
  return out;
}

geoccl::security::GroupKey fixed_key() {
  geoccl::security::GroupKey k;
  k.job_key.fill(7);
  k.ciphers = geoccl::security::kCipherXChaCha20Poly1305;
  return k;
}

HandshakeSetup setup(uint32_t rank, const geoccl::security::GroupKey* key) {
  HandshakeSetup s;
  s.rank = rank;
  s.world_size = 8;
  s.session_id = 42;
  s.params_hash = 7;
  s.streams = 2;
  s.key = key;
  return s;
}

// Feeds `data` in chunks whose sizes the input's first byte picks; `step` runs after each chunk.
template <typename Machine, typename Step>
void drive(Machine& m, const uint8_t* data, size_t size, Step step) {
  const size_t chunk = size ? 1 + data[0] % 64 : 1;
  for (size_t at = 0; at < size;) {
    const size_t n = std::min(chunk, size - at);
    const size_t used = m.feed(std::span<const uint8_t>(data + at, n));
    if (used > n) std::abort();
    // Only a machine that wants nothing more leaves bytes.
    if (used < n && (m.want() != 0 || m.state() == HandshakeState::kRunning)) std::abort();
    const auto before = m.state();
    step();
    if (used == 0 && m.state() == before) break;  // it waits for nothing this input can give
    at += used;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kHelloSize) {
    Hello h;
    if (decode_hello(std::span<const uint8_t, kHelloSize>(data, kHelloSize), &h) ==
        HandshakeStatus::kAccepted) {
      if (encode_hello(h) != canonical<kHelloSize>(data, kHelloReserved, {})) std::abort();
      (void)check_hello(h, 8, 42, 2, 7);
    }
  }
  if (size >= kReplySize) {
    Reply r;
    if (decode_reply(std::span<const uint8_t, kReplySize>(data, kReplySize), &r) ==
        HandshakeStatus::kAccepted) {
      if (encode_reply(r) != canonical<kReplySize>(data, kReplyReserved, {11})) std::abort();
    }
  }
  const auto key = fixed_key();
  for (const auto* k : {static_cast<const geoccl::security::GroupKey*>(nullptr), &key}) {
    // An acceptor fed a stranger's bytes; its device accepts whatever passes the group's checks.
    HandshakeAcceptor a(setup(0, k));
    drive(a, data, size, [&] {
      if (a.state() == HandshakeState::kJudge && !a.relay_request()) a.accept();
      (void)a.take_output();
    });
    // The proof cannot be right: nobody who answered holds the key's private ephemeral half.
    if (k && a.state() == HandshakeState::kDone) std::abort();
    // An acceptor that takes relay and dial-back requests (TCP's), in the middle of the ranks: a
    // relay request, and without a secret a dial-back request, stops in kJudge without a proof
    // and is answered by the device; with a secret a dial-back request is accepted as a
    // connection is, and never done (served) on a stranger's bytes.
    auto tcp = setup(5, k);
    tcp.relays = true;
    HandshakeAcceptor t(tcp);
    drive(t, data, size, [&] {
      if (t.state() != HandshakeState::kJudge) return (void)t.take_output();
      if (t.dial_back_request() && (t.hello().rank >= 5 || t.relay_request())) std::abort();
      if (t.dial_back_needs_proof() && t.hello().minor < kMinorDialBackProof) std::abort();
      if (t.relay_request() || (t.dial_back_request() && !t.dial_back_needs_proof())) {
        (void)t.relay_reply(true);
      } else {
        t.accept();
      }
      (void)t.take_output();
    });
    if (k && t.state() == HandshakeState::kDone) std::abort();
    // A dialler fed a stranger's answer, and one asking to be dialled back (with a secret it
    // wants the acceptor's proof as well).
    HandshakeDialler back(setup(3, k), 5, 0, {}, kHelloFlagDialBack);
    (void)back.take_output();
    drive(back, data, size, [&] { (void)back.take_output(); });
    if (k && back.state() == HandshakeState::kDone) std::abort();
    HandshakeDialler d(setup(3, k), 0, 1);
    (void)d.take_output();
    drive(d, data, size, [&] { (void)d.take_output(); });
    if (k && d.state() == HandshakeState::kDone) std::abort();
  }
  return 0;
}
