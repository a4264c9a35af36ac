#include "transport/quic/tls.h"

#include <gnutls/crypto.h>
#include <gnutls/x509.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "geoccl/error.h"

namespace geoccl::transport::quic {

namespace {

void check(int rv, const char* what) {
  if (rv < 0) throw Error(ErrorCode::kIo, std::string("GnuTLS ") + what + ": " + gnutls_strerror(rv));
}

// TLS 1.3 only, AES-GCM first (AES-NI), ChaCha20 for CPUs without it; X25519 key exchange.
constexpr char kPriority[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"
    "-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:%DISABLE_TLS13_COMPAT_MODE";

constexpr unsigned kTicketWindowMs = 6u * 3600 * 1000;

}  // namespace

Credentials::Credentials() {
  gnutls_x509_privkey_t key = nullptr;
  gnutls_x509_crt_t crt = nullptr;
  try {
    check(gnutls_x509_privkey_init(&key), "privkey_init");
    check(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                       GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0),
          "key generation");
    check(gnutls_x509_crt_init(&crt), "crt_init");
    check(gnutls_x509_crt_set_version(crt, 3), "crt version");
    uint8_t serial[16];
    check(gnutls_rnd(GNUTLS_RND_NONCE, serial, sizeof serial), "rnd");
    serial[0] &= 0x7f;
    check(gnutls_x509_crt_set_serial(crt, serial, sizeof serial), "crt serial");
    const time_t now = std::time(nullptr);
    check(gnutls_x509_crt_set_activation_time(crt, now - 3600), "crt activation");
    check(gnutls_x509_crt_set_expiration_time(crt, now + 30L * 24 * 3600), "crt expiration");
    static const char kName[] = "geoccl rank";
    check(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, kName, sizeof kName - 1), "crt dn");
    check(gnutls_x509_crt_set_key(crt, key), "crt key");
    check(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0), "crt sign");
    size_t n = fingerprint_.size();
    check(gnutls_x509_crt_get_fingerprint(crt, GNUTLS_DIG_SHA256, fingerprint_.data(), &n), "fingerprint");
    check(gnutls_certificate_allocate_credentials(&cred_), "credentials");
    check(gnutls_certificate_set_x509_key(cred_, &crt, 1, key), "set key");
  } catch (...) {
    if (crt) gnutls_x509_crt_deinit(crt);
    if (key) gnutls_x509_privkey_deinit(key);
    if (cred_) gnutls_certificate_free_credentials(cred_);
    throw;
  }
  // The credentials hold their own copies.
  gnutls_x509_crt_deinit(crt);
  gnutls_x509_privkey_deinit(key);
}

Credentials::~Credentials() {
  if (cred_) gnutls_certificate_free_credentials(cred_);
}

TicketIssuer::TicketIssuer() {
  check(gnutls_session_ticket_key_generate(&key_), "ticket key");
  if (const int rv = gnutls_anti_replay_init(&anti_replay_); rv < 0) {
    gnutls_memset(key_.data, 0, key_.size);
    gnutls_free(key_.data);
    check(rv, "anti-replay");
  }
  gnutls_anti_replay_set_add_function(anti_replay_, &TicketIssuer::add);
  gnutls_anti_replay_set_ptr(anti_replay_, this);
  // GnuTLS starts a new recording period when a ClientHello comes more than a window after the
  // period began, and refuses the early data of every ticket issued before the period: with its
  // default of 10 s, the second peer re-dialling after an outage would lose its 0-RTT to the
  // first one's (measured on outage-5s). The window is therefore the tickets' lifetime (GnuTLS's
  // default, 6 h): a re-dial within it takes 0-RTT; the database keeps a ClientHello that long.
  gnutls_anti_replay_set_window(anti_replay_, kTicketWindowMs);
}

TicketIssuer::~TicketIssuer() {
  gnutls_anti_replay_deinit(anti_replay_);
  gnutls_memset(key_.data, 0, key_.size);
  gnutls_free(key_.data);
}

int TicketIssuer::add(void* self, time_t exp, const gnutls_datum_t* key, const gnutls_datum_t*) {
  auto* t = static_cast<TicketIssuer*>(self);
  const time_t now = std::time(nullptr);
  for (auto it = t->seen_.begin(); it != t->seen_.end();) it = it->second < now ? t->seen_.erase(it) : std::next(it);
  std::string k(reinterpret_cast<const char*>(key->data), key->size);
  if (!t->seen_.emplace(std::move(k), exp).second) return GNUTLS_E_DB_ENTRY_EXISTS;
  return 0;
}

void TicketIssuer::enable(gnutls_session_t s, bool early_data) {
  check(gnutls_session_ticket_enable_server(s, &key_), "tickets");
  if (!early_data) return;
  gnutls_anti_replay_enable(s, anti_replay_);
  check(gnutls_record_set_max_early_data_size(s, 0xffffffffu), "early data size");
}

bool early_data_accepted(gnutls_session_t s) { return (gnutls_session_get_flags(s) & GNUTLS_SFLAGS_EARLY_DATA) != 0; }

gnutls_session_t make_session(bool server, const Credentials& cred, void* conn_ref, TicketIssuer* issuer,
                              bool early_data, const std::vector<uint8_t>& ticket, bool* resuming) {
  if (resuming) *resuming = false;
  gnutls_session_t s = nullptr;
  const bool early = server ? issuer != nullptr && early_data : !ticket.empty();
  check(gnutls_init(&s, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_END_OF_EARLY_DATA |
                            (early ? GNUTLS_ENABLE_EARLY_DATA : 0)),
        "init");
  try {
    if ((server ? ngtcp2_crypto_gnutls_configure_server_session(s)
                : ngtcp2_crypto_gnutls_configure_client_session(s)) != 0)
      throw Error(ErrorCode::kIo, "ngtcp2 could not configure the GnuTLS session");
    check(gnutls_priority_set_direct(s, kPriority, nullptr), "priority");
    check(gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, cred.get()), "credentials");
    gnutls_datum_t alpn{reinterpret_cast<unsigned char*>(const_cast<char*>(kAlpn)),
                        static_cast<unsigned>(sizeof kAlpn - 1)};
    check(gnutls_alpn_set_protocols(s, &alpn, 1, GNUTLS_ALPN_MANDATORY), "alpn");
    if (server) gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
    else check(gnutls_server_name_set(s, GNUTLS_NAME_DNS, "geoccl", 6), "server name");
    if (server && issuer) issuer->enable(s, early_data);
    if (!server && !ticket.empty()) {
      // Our own bytes from an earlier session with this peer; GnuTLS parses them (one it
      // refuses means a full handshake, not an error).
      gnutls_datum_t d{const_cast<unsigned char*>(ticket.data()), static_cast<unsigned>(ticket.size())};
      if (gnutls_session_set_data(s, d.data, d.size) == 0 && resuming) *resuming = true;
    }
    gnutls_session_set_ptr(s, conn_ref);
  } catch (...) {
    gnutls_deinit(s);
    throw;
  }
  return s;
}

bool peer_fingerprint(gnutls_session_t s, Fingerprint* out) {
  unsigned n = 0;
  const gnutls_datum_t* certs = gnutls_certificate_get_peers(s, &n);
  if (!certs || n == 0) return false;
  size_t len = out->size();
  return gnutls_fingerprint(GNUTLS_DIG_SHA256, &certs[0], out->data(), &len) == 0 && len == out->size();
}

std::string short_fingerprint(const Fingerprint& f) {
  std::string s;
  char b[4];
  for (size_t i = 0; i < 8; ++i) {
    std::snprintf(b, sizeof b, i ? ":%02x" : "%02x", f[i]);
    s += b;
  }
  return s;
}

}  // namespace geoccl::transport::quic
