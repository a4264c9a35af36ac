// Authentication messages (security/auth.h): the decoders never crash, and no input makes an
// acceptor or a dialler accept a proof it did not get from a holder of the job key.
#include <array>
#include <cstdlib>
#include <cstring>

#include "security/auth.h"

using namespace geoccl::security;

namespace {

GroupKey fixed_key() {
  GroupKey k;
  k.job_key.fill(7);
  k.ciphers = kCipherXChaCha20Poly1305;
  return k;
}

template <size_t N>
std::array<uint8_t, N> take(const uint8_t* data, size_t size) {
  std::array<uint8_t, N> a{};
  std::memcpy(a.data(), data, std::min(N, size));
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  AuthInit init;
  AuthResp resp;
  AuthFin fin;
  (void)decode_auth_init(take<kAuthInitSize>(data, size), &init);
  (void)decode_auth_resp(take<kAuthRespSize>(data, size), &resp);
  (void)decode_auth_fin(take<kAuthFinSize>(data, size), &fin);
  const std::array<uint8_t, 4> hello{1, 2, 3, 4}, reply{5, 6, 7, 8};
  const GroupKey key = fixed_key();
  // An acceptor that gets a fuzzed AuthInit, then a fuzzed AuthFin, never accepts it.
  {
    AuthAcceptor a(key);
    std::array<uint8_t, kAuthRespSize> r{};
    const auto st = a.on_init(hello, reply, take<kAuthInitSize>(data, size), &r);
    if (st == AuthStatus::kOk) {
      ConnectionKeys keys;
      const size_t off = std::min(size, kAuthInitSize);
      if (a.on_fin(take<kAuthFinSize>(data + off, size - off), &keys) == AuthStatus::kOk) std::abort();
    }
  }
  // A dialler that gets a fuzzed AuthResp never accepts it either.
  {
    AuthDialler d(key);
    std::array<uint8_t, kAuthFinSize> f{};
    ConnectionKeys keys;
    if (d.on_resp(hello, reply, take<kAuthRespSize>(data, size), &f, &keys) == AuthStatus::kOk) std::abort();
  }
  return 0;
}
