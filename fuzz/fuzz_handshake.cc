// Handshake decoders: never crash; accepted hellos and replies round-trip exactly, but for the
// reserved bytes (ignored by this version's decoder, written as zero by its encoder).
#include <array>
#include <cstdlib>
#include <cstring>

#include "protocol/handshake.h"

using namespace geoccl::protocol;

namespace {

// The input with the bytes the decoder ignores set to zero, as the encoder writes them.
// `reserved` is the length of the trailing reserved bytes: kHelloReserved for a Hello (its `via`
// field sits just before them), kHandshakeReserved for a Reply.
template <size_t N>
std::array<uint8_t, N> canonical(const uint8_t* data, size_t reserved,
                                 std::initializer_list<size_t> ignored_bytes) {
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), data, N);
  for (size_t i = N - reserved; i < N; ++i) out[i] = 0;
  for (size_t i : ignored_bytes) out[i] = 0;
  return out;
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
      if (encode_reply(r) != canonical<kReplySize>(data, kHandshakeReserved, {11})) std::abort();
    }
  }
  return 0;
}
