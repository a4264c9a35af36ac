// The shared-memory handshake (protocol/shm_hello.h): never crash; what decodes re-decodes alike after
// encoding, and the acceptor's check never throws.
#include <cstdlib>
#include <span>

#include "protocol/shm_hello.h"

using namespace geoccl::protocol::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  Hello h;
  if (decode_hello(in, &h)) {
    Hello again;
    if (!decode_hello(encode_hello(h), &again) || again.rank != h.rank || again.flags != h.flags || again.token != h.token ||
        again.params_hash != h.params_hash || again.ring_bytes != h.ring_bytes)
      std::abort();
  }
  Reply r;
  if (decode_reply(in, &r)) {
    Reply again;
    if (!decode_reply(encode_reply(r), &again) || again.accepted != r.accepted || again.reason != r.reason)
      std::abort();
  }
  return 0;
}
