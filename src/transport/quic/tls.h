// TLS 1.3 for the QUIC device, through GnuTLS (ngtcp2's crypto backend on Debian).
//
// Every rank makes a fresh ECDSA P-256 key and a self-signed certificate for it when its device
// is built, and publishes the certificate's SHA-256 fingerprint with its address (address.h).
// Both ends present their certificate (the server requires the client's); neither trusts a CA.
// Instead each side compares the fingerprint of the certificate it was shown with the one the
// peer's rank published: a stranger who read the store still lacks the private key. (The
// security issue replaces the store's role with the group's own authentication.)
#pragma once

#include <gnutls/gnutls.h>

#include <string>

#include "transport/quic/address.h"

namespace geoccl::transport::quic {

inline constexpr char kAlpn[] = "geoccl/1";

class Credentials {
 public:
  // A fresh key and self-signed certificate. Throws Error(kIo) when GnuTLS fails.
  Credentials();
  ~Credentials();
  Credentials(const Credentials&) = delete;
  Credentials& operator=(const Credentials&) = delete;

  const Fingerprint& fingerprint() const { return fingerprint_; }
  gnutls_certificate_credentials_t get() const { return cred_; }

 private:
  gnutls_certificate_credentials_t cred_ = nullptr;
  Fingerprint fingerprint_{};
};

// A GnuTLS session for one QUIC connection, set up for ngtcp2 (client or server side, ALPN
// kAlpn, TLS 1.3 only, this rank's certificate). `conn_ref` is the ngtcp2_crypto_conn_ref the
// crypto callbacks find the connection by. Throws Error(kIo).
gnutls_session_t make_session(bool server, const Credentials& cred, void* conn_ref);

// The SHA-256 fingerprint of the certificate the peer presented; false when it presented none.
bool peer_fingerprint(gnutls_session_t s, Fingerprint* out);

// "ab:cd:..." (the first 8 bytes), for logs.
std::string short_fingerprint(const Fingerprint& f);

}  // namespace geoccl::transport::quic
