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

#include <ctime>
#include <map>
#include <string>
#include <vector>

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

// Session resumption with 0-RTT early data, for re-dialled connections (TLS 1.3, RFC 8446 §2.3).
// The acceptor's side: one per device. Its tickets are sealed with a key made here (it never
// leaves the process), so only this device can resume them; a ticket carries the certificate
// the client presented in the full handshake it was issued on, and a resumed session reports
// that certificate (gnutls_certificate_get_peers), which the Hello is checked against exactly as
// after a full handshake (QuicDevice::judge_hello). Holding the ticket's secret is what binds a
// resuming client to that certificate: it was handed out only inside the TLS channel of the
// connection that authenticated with it. Early data is accepted at most once per ClientHello
// (GnuTLS's anti-replay, with the database below), and the connection still holds 0-RTT bytes
// until the handshake has completed (the client's Finished proves the ticket's secret), so a
// replayed or forged first flight never reaches a frame.
class TicketIssuer {
 public:
  // A fresh ticket key and anti-replay context. Throws Error(kIo).
  TicketIssuer();
  ~TicketIssuer();
  TicketIssuer(const TicketIssuer&) = delete;
  TicketIssuer& operator=(const TicketIssuer&) = delete;
  // Server session `s`: issues tickets, and with `early_data` accepts early data (QUIC requires
  // max_early_data_size 0xffffffff, RFC 9001 §4.6.1). Throws Error(kIo).
  void enable(gnutls_session_t s, bool early_data);
  size_t replay_entries() const { return seen_.size(); }

 private:
  // GnuTLS's anti-replay database: 0 for a ClientHello not seen before (recorded until `exp`),
  // GNUTLS_E_DB_ENTRY_EXISTS for one seen already (its early data is refused).
  static int add(void* self, time_t exp, const gnutls_datum_t* key, const gnutls_datum_t* data);
  gnutls_datum_t key_{};
  gnutls_anti_replay_t anti_replay_ = nullptr;
  std::map<std::string, time_t> seen_;
};

// A GnuTLS session for one QUIC connection, set up for ngtcp2 (client or server side, ALPN
// kAlpn, TLS 1.3 only, this rank's certificate). `conn_ref` is the ngtcp2_crypto_conn_ref the
// crypto callbacks find the connection by. A server session with `issuer` issues tickets, and
// takes early data with `early_data`; a client session with a non-empty `ticket` (gnutls_session_get_data2 of an
// earlier session with the same peer) offers to resume it with early data: *resuming says
// whether GnuTLS took the ticket (one it cannot parse means a full handshake). Throws Error(kIo).
gnutls_session_t make_session(bool server, const Credentials& cred, void* conn_ref, TicketIssuer* issuer = nullptr,
                              bool early_data = false, const std::vector<uint8_t>& ticket = {},
                              bool* resuming = nullptr);

// Whether the early data of session `s` was accepted (the server's EncryptedExtensions said so,
// or the server took it).
bool early_data_accepted(gnutls_session_t s);

// The SHA-256 fingerprint of the certificate the peer presented; false when it presented none.
bool peer_fingerprint(gnutls_session_t s, Fingerprint* out);

// "ab:cd:..." (the first 8 bytes), for logs.
std::string short_fingerprint(const Fingerprint& f);

}  // namespace geoccl::transport::quic
