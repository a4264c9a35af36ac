// Handshake decoders: never crash; accepted hellos and replies round-trip exactly.
#include <cstdlib>
#include <cstring>

#include "protocol/handshake.h"

using namespace geoccl::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kHelloSize) {
    Hello h;
    if (decode_hello(std::span<const uint8_t, kHelloSize>(data, kHelloSize), &h) ==
        HandshakeStatus::kAccepted) {
      if (std::memcmp(encode_hello(h).data(), data, kHelloSize) != 0) std::abort();
      (void)check_hello(h, 8, 42, 2);
    }
  }
  if (size >= kReplySize) {
    Reply r;
    if (decode_reply(std::span<const uint8_t, kReplySize>(data, kReplySize), &r) ==
        HandshakeStatus::kAccepted) {
      if (std::memcmp(encode_reply(r).data(), data, kReplySize) != 0) std::abort();
    }
  }
  return 0;
}
