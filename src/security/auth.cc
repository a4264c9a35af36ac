#include "security/auth.h"

#include <sodium.h>

#include <algorithm>
#include <vector>

#include "protocol/wire.h"

namespace geoccl::security {

namespace {

constexpr char kTranscriptContext[] = "geoccl auth v1";
constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "geocclk1";
static_assert(crypto_scalarmult_BYTES == 32 && crypto_scalarmult_SCALARBYTES == 32 &&
              crypto_kdf_KEYBYTES == kKeyBytes);

struct Derived {
  Key th{}, d2a{}, a2d{}, mac_a_key{}, mac_d_key{};
  ~Derived() { sodium_memzero(this, sizeof *this); }
};

void hash_update(crypto_generichash_state* st, std::span<const uint8_t> b) {
  crypto_generichash_update(st, b.data(), b.size());
}

// th and the four keys of the connection; false for an ephemeral key of low order.
bool derive(const GroupKey& g, const std::array<uint8_t, 32>& secret, const std::array<uint8_t, 32>& peer_public,
            std::span<const uint8_t> hello, std::span<const uint8_t> reply, std::span<const uint8_t> init,
            std::span<const uint8_t> resp_without_mac, Derived* d) {
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, d->th.size());
  hash_update(&st, {reinterpret_cast<const uint8_t*>(kTranscriptContext), sizeof kTranscriptContext});
  for (auto part : {hello, reply, init, resp_without_mac}) hash_update(&st, part);
  crypto_generichash_final(&st, d->th.data(), d->th.size());
  uint8_t shared[32];
  if (crypto_scalarmult(shared, secret.data(), peer_public.data()) != 0) return false;
  Key prk{};
  crypto_generichash_init(&st, g.job_key.data(), g.job_key.size(), prk.size());
  crypto_generichash_update(&st, shared, sizeof shared);
  hash_update(&st, d->th);
  crypto_generichash_final(&st, prk.data(), prk.size());
  sodium_memzero(shared, sizeof shared);
  crypto_kdf_derive_from_key(d->d2a.data(), d->d2a.size(), 1, kKdfContext, prk.data());
  crypto_kdf_derive_from_key(d->a2d.data(), d->a2d.size(), 2, kKdfContext, prk.data());
  crypto_kdf_derive_from_key(d->mac_a_key.data(), 32, 3, kKdfContext, prk.data());
  crypto_kdf_derive_from_key(d->mac_d_key.data(), 32, 4, kKdfContext, prk.data());
  sodium_memzero(prk.data(), prk.size());
  return true;
}

Key mac(const Key& key, std::span<const uint8_t> a, std::span<const uint8_t> b = {}) {
  Key out{};
  crypto_generichash_state st;
  crypto_generichash_init(&st, key.data(), key.size(), out.size());
  hash_update(&st, a);
  hash_update(&st, b);
  crypto_generichash_final(&st, out.data(), out.size());
  return out;
}

uint8_t choose_cipher(uint8_t mine, uint8_t theirs) {
  const uint8_t both = mine & theirs;
  if (both & kCipherAes256Gcm) return kCipherAes256Gcm;
  if (both & kCipherXChaCha20Poly1305) return kCipherXChaCha20Poly1305;
  return 0;
}

template <size_t N>
void put(std::vector<uint8_t>* v, const std::array<uint8_t, N>& a) {
  v->insert(v->end(), a.begin(), a.end());
}

template <size_t N>
bool take(protocol::Reader& r, std::array<uint8_t, N>* a) {
  for (auto& b : *a)
    if (!r.u8(&b)) return false;
  return true;
}

template <size_t N>
std::array<uint8_t, N> to_array(const std::vector<uint8_t>& v) {
  std::array<uint8_t, N> out{};
  std::copy(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(N, v.size())), out.begin());
  return out;
}

}  // namespace

const char* auth_status_name(AuthStatus s) {
  switch (s) {
    case AuthStatus::kOk: return "authenticated";
    case AuthStatus::kBadProof: return "the peer could not prove the group secret (another GEOCCL_SECRET, or a stranger)";
    case AuthStatus::kPeerRejected: return "the peer rejected our proof of the group secret (another GEOCCL_SECRET?)";
    case AuthStatus::kMalformed: return "malformed authentication message";
    case AuthStatus::kNoCommonCipher: return "no cipher both sides allow (GEOCCL_CIPHER)";
    case AuthStatus::kBadKey: return "invalid ephemeral key";
  }
  return "unknown";
}

AuthStatus decode_auth_init(std::span<const uint8_t, kAuthInitSize> in, AuthInit* out) {
  protocol::Reader r(in);
  uint64_t magic = 0;
  AuthInit m;
  if (!r.u64(&magic) || magic != kAuthInitMagic) return AuthStatus::kMalformed;
  if (!r.u8(&m.ciphers) || !take(r, &m.ephemeral) || r.remaining() != 0) return AuthStatus::kMalformed;
  *out = m;
  return AuthStatus::kOk;
}

AuthStatus decode_auth_resp(std::span<const uint8_t, kAuthRespSize> in, AuthResp* out) {
  protocol::Reader r(in);
  uint64_t magic = 0;
  AuthResp m;
  if (!r.u64(&magic) || magic != kAuthRespMagic) return AuthStatus::kMalformed;
  if (!r.u8(&m.cipher) || !take(r, &m.ephemeral) || !take(r, &m.mac) || r.remaining() != 0)
    return AuthStatus::kMalformed;
  if (m.cipher != kCipherAes256Gcm && m.cipher != kCipherXChaCha20Poly1305) return AuthStatus::kMalformed;
  *out = m;
  return AuthStatus::kOk;
}

AuthStatus decode_auth_fin(std::span<const uint8_t, kAuthFinSize> in, AuthFin* out) {
  protocol::Reader r(in);
  uint64_t magic = 0;
  AuthFin m;
  if (!r.u64(&magic) || magic != kAuthFinMagic) return AuthStatus::kMalformed;
  if (!r.u8(&m.status) || !take(r, &m.mac) || r.remaining() != 0) return AuthStatus::kMalformed;
  if (m.status != static_cast<uint8_t>(AuthStatus::kOk) && m.status != static_cast<uint8_t>(AuthStatus::kBadProof))
    return AuthStatus::kMalformed;
  *out = m;
  return AuthStatus::kOk;
}

AuthDialler::AuthDialler(const GroupKey& key) : key_(key) {
  init_sodium();
  std::array<uint8_t, 32> pub{};
  crypto_box_keypair(pub.data(), secret_.data());
  std::vector<uint8_t> v;
  protocol::Writer w(&v);
  w.u64(kAuthInitMagic);
  w.u8(key_.ciphers);
  put(&v, pub);
  init_ = to_array<kAuthInitSize>(v);
}

AuthDialler::~AuthDialler() {
  sodium_memzero(secret_.data(), secret_.size());
  sodium_memzero(key_.job_key.data(), key_.job_key.size());
}

AuthStatus AuthDialler::on_resp(std::span<const uint8_t> hello, std::span<const uint8_t> reply,
                                std::span<const uint8_t, kAuthRespSize> resp, std::array<uint8_t, kAuthFinSize>* fin,
                                ConnectionKeys* keys) {
  AuthResp m;
  if (decode_auth_resp(resp, &m) != AuthStatus::kOk) return AuthStatus::kMalformed;
  Derived d;
  std::vector<uint8_t> v;
  protocol::Writer w(&v);
  w.u64(kAuthFinMagic);
  const bool chosen_ok = (m.cipher & key_.ciphers) != 0;
  if (!derive(key_, secret_, m.ephemeral, hello, reply, init_, resp.first(kAuthRespSize - 32), &d)) {
    w.u8(static_cast<uint8_t>(AuthStatus::kBadProof));
    put(&v, Key{});
    *fin = to_array<kAuthFinSize>(v);
    return AuthStatus::kBadKey;
  }
  const Key want = mac(d.mac_a_key, d.th);
  if (crypto_verify_32(want.data(), m.mac.data()) != 0) {
    w.u8(static_cast<uint8_t>(AuthStatus::kBadProof));
    put(&v, Key{});
    *fin = to_array<kAuthFinSize>(v);
    return AuthStatus::kBadProof;
  }
  // The choice is authenticated (it is in th): only a cipher we offered is accepted.
  if (!chosen_ok) return AuthStatus::kNoCommonCipher;
  w.u8(static_cast<uint8_t>(AuthStatus::kOk));
  put(&v, mac(d.mac_d_key, d.th, m.mac));
  *fin = to_array<kAuthFinSize>(v);
  keys->cipher = m.cipher;
  keys->send = d.d2a;
  keys->recv = d.a2d;
  return AuthStatus::kOk;
}

AuthAcceptor::AuthAcceptor(const GroupKey& key) : key_(key) { init_sodium(); }

AuthAcceptor::~AuthAcceptor() {
  sodium_memzero(secret_.data(), secret_.size());
  sodium_memzero(key_.job_key.data(), key_.job_key.size());
  sodium_memzero(d2a_.data(), d2a_.size());
  sodium_memzero(a2d_.data(), a2d_.size());
  sodium_memzero(mac_d_key_.data(), mac_d_key_.size());
}

AuthStatus AuthAcceptor::on_init(std::span<const uint8_t> hello, std::span<const uint8_t> reply,
                                 std::span<const uint8_t, kAuthInitSize> init, std::array<uint8_t, kAuthRespSize>* resp) {
  AuthInit m;
  if (decode_auth_init(init, &m) != AuthStatus::kOk) return AuthStatus::kMalformed;
  cipher_ = choose_cipher(key_.ciphers, m.ciphers);
  if (!cipher_) return AuthStatus::kNoCommonCipher;
  std::array<uint8_t, 32> pub{};
  crypto_box_keypair(pub.data(), secret_.data());
  std::vector<uint8_t> v;
  protocol::Writer w(&v);
  w.u64(kAuthRespMagic);
  w.u8(cipher_);
  put(&v, pub);
  Derived d;
  if (!derive(key_, secret_, m.ephemeral, hello, reply, init, v, &d)) return AuthStatus::kBadKey;
  mac_a_ = mac(d.mac_a_key, d.th);
  put(&v, mac_a_);
  *resp = to_array<kAuthRespSize>(v);
  th_ = d.th;
  d2a_ = d.d2a;
  a2d_ = d.a2d;
  mac_d_key_ = d.mac_d_key;
  ready_ = true;
  return AuthStatus::kOk;
}

AuthStatus AuthAcceptor::on_fin(std::span<const uint8_t, kAuthFinSize> fin, ConnectionKeys* keys) {
  AuthFin m;
  if (!ready_ || decode_auth_fin(fin, &m) != AuthStatus::kOk) return AuthStatus::kMalformed;
  if (m.status == static_cast<uint8_t>(AuthStatus::kBadProof)) return AuthStatus::kPeerRejected;
  const Key want = mac(mac_d_key_, th_, mac_a_);
  if (crypto_verify_32(want.data(), m.mac.data()) != 0) return AuthStatus::kBadProof;
  keys->cipher = cipher_;
  keys->send = a2d_;
  keys->recv = d2a_;
  ready_ = false;
  return AuthStatus::kOk;
}

}  // namespace geoccl::security
