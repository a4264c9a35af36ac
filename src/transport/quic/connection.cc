#include "transport/quic/connection.h"

#include <gnutls/crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>

#include <algorithm>
#include <cstring>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/quic/device.h"

namespace geoccl::transport::quic {

namespace {

using Clock = std::chrono::steady_clock;
// The largest packet this side sends (a GSO batch holds 64 KiB in all).
constexpr size_t kMaxPacket = 16384;
constexpr size_t kMaxBatchBytes = 65000;
// Data streams a peer may have open at once (one per frame in flight).
constexpr uint64_t kMaxStreams = 4096;
// Application error code of a CONNECTION_CLOSE that refuses or ends a pair on error.
constexpr uint64_t kAppError = 0x67;

std::string cid_key(const uint8_t* data, size_t len) { return std::string(reinterpret_cast<const char*>(data), len); }

QuicConnection* self(void* user_data) { return static_cast<QuicConnection*>(user_data); }

ngtcp2_conn* get_conn(ngtcp2_crypto_conn_ref* ref) { return static_cast<QuicConnection*>(ref->user_data)->conn(); }

void rand_cb(uint8_t* dest, size_t len, const ngtcp2_rand_ctx*) { (void)gnutls_rnd(GNUTLS_RND_RANDOM, dest, len); }

int recv_stream_data_cb(ngtcp2_conn*, uint32_t flags, int64_t stream_id, uint64_t offset, const uint8_t* data,
                        size_t len, void* ud, void*) {
  return self(ud)->on_stream_data(flags, stream_id, offset, data, len);
}
int acked_cb(ngtcp2_conn*, int64_t stream_id, uint64_t offset, uint64_t len, void* ud, void*) {
  return self(ud)->on_acked(stream_id, offset, len);
}
int stream_close_cb(ngtcp2_conn*, uint32_t, int64_t stream_id, uint64_t, void* ud, void*) {
  return self(ud)->on_stream_close(stream_id);
}
int handshake_completed_cb(ngtcp2_conn*, void* ud) { return self(ud)->on_handshake_completed(); }
int new_cid_cb(ngtcp2_conn*, ngtcp2_cid* cid, uint8_t* token, size_t cidlen, void* ud) {
  return self(ud)->on_new_cid(cid, token, cidlen);
}
int remove_cid_cb(ngtcp2_conn*, const ngtcp2_cid* cid, void* ud) { return self(ud)->on_remove_cid(cid); }
int streams_cb(ngtcp2_conn*, uint64_t, void* ud) {
  self(ud)->on_streams_available();
  return 0;
}
// GnuTLS: a NewSessionTicket arrived (dialler).
int ticket_hook(gnutls_session_t s, unsigned, unsigned, unsigned incoming, const gnutls_datum_t*) {
  if (!incoming) return 0;
  auto* ref = static_cast<ngtcp2_crypto_conn_ref*>(gnutls_session_get_ptr(s));
  static_cast<QuicConnection*>(ref->user_data)->on_ticket();
  return 0;
}
int stream_data_cb(ngtcp2_conn*, int64_t stream_id, uint64_t, void* ud, void*) {
  self(ud)->on_stream_credit(stream_id);
  return 0;
}

ngtcp2_callbacks callbacks(bool server) {
  ngtcp2_callbacks cb{};
  if (server) cb.recv_client_initial = ngtcp2_crypto_recv_client_initial_cb;
  else cb.client_initial = ngtcp2_crypto_client_initial_cb;
  cb.recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb;
  cb.encrypt = ngtcp2_crypto_encrypt_cb;
  cb.decrypt = ngtcp2_crypto_decrypt_cb;
  cb.hp_mask = ngtcp2_crypto_hp_mask_cb;
  cb.recv_retry = ngtcp2_crypto_recv_retry_cb;
  cb.update_key = ngtcp2_crypto_update_key_cb;
  cb.delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb;
  cb.delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb;
  cb.get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb;
  cb.version_negotiation = ngtcp2_crypto_version_negotiation_cb;
  cb.rand = rand_cb;
  cb.get_new_connection_id = new_cid_cb;
  cb.remove_connection_id = remove_cid_cb;
  cb.recv_stream_data = recv_stream_data_cb;
  cb.acked_stream_data_offset = acked_cb;
  cb.stream_close = stream_close_cb;
  cb.handshake_completed = handshake_completed_cb;
  cb.extend_max_local_streams_uni = streams_cb;
  cb.extend_max_local_streams_bidi = streams_cb;
  cb.extend_max_stream_data = stream_data_cb;
  return cb;
}

ngtcp2_cc_algo cc_algo(const std::string& name) {
  if (name == "bbr") return NGTCP2_CC_ALGO_BBR;
  if (name == "bbr2") return NGTCP2_CC_ALGO_BBR2;
  if (name == "reno") return NGTCP2_CC_ALGO_RENO;
  return NGTCP2_CC_ALGO_CUBIC;
}

void random_cid(ngtcp2_cid* cid, size_t len) {
  cid->datalen = len;
  (void)gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, len);
}

ngtcp2_path make_path(const Endpoint& local, const Endpoint& remote) {
  ngtcp2_path p{};
  p.local.addr = const_cast<sockaddr*>(reinterpret_cast<const sockaddr*>(&local.addr));
  p.local.addrlen = local.len;
  p.remote.addr = const_cast<sockaddr*>(reinterpret_cast<const sockaddr*>(&remote.addr));
  p.remote.addrlen = remote.len;
  return p;
}

void fill_settings(ngtcp2_settings* s, ngtcp2_transport_params* tp, const QuicOptions& o, const Endpoint& remote,
                   std::chrono::milliseconds handshake_timeout, const FlowWindows& w, uint64_t now) {
  ngtcp2_settings_default(s);
  // Packets as large as the route's MTU from the start (QUIC's default keeps them at 1200-1452
  // bytes: on a 9000-byte WAN path that is 6x the packets, and the CPU per byte with them).
  s->max_tx_udp_payload_size = max_udp_payload(remote, kMaxPacket);
  s->no_tx_udp_payload_size_shaping = 1;
  s->no_pmtud = 1;
  s->initial_ts = now;
  s->cc_algo = cc_algo(o.congestion_control);
  // Flow control sized from the path (flow_window.h); ngtcp2 auto-tunes up to the ceilings.
  s->max_window = w.max_connection;
  s->max_stream_window = w.max_stream;
  const auto hs = handshake_timeout.count() > 0 ? handshake_timeout : o.handshake_timeout;
  s->handshake_timeout = static_cast<uint64_t>(hs.count()) * NGTCP2_MILLISECONDS;
  ngtcp2_transport_params_default(tp);
  tp->initial_max_data = w.connection;
  tp->initial_max_stream_data_uni = w.stream;
  // Bidirectional streams this side opens carry the peer's empty FIN (and, on the control
  // stream, its Reply and control frames); those the peer opens carry its data frames.
  tp->initial_max_stream_data_bidi_local = 4u << 20;
  tp->initial_max_stream_data_bidi_remote = w.stream;
  // Data frames ride bidirectional streams: ngtcp2 0.12 never closes a unidirectional stream the
  // peer opened (fixed upstream in 0.14), so their stream credit would run out. The receiver
  // ends its side of each with an empty FIN once the frame is in; then both ends close it.
  tp->initial_max_streams_uni = 0;
  tp->initial_max_streams_bidi = kMaxStreams + 1;  // and the control stream
  tp->max_idle_timeout = static_cast<uint64_t>(o.idle_timeout.count()) * NGTCP2_MILLISECONDS;
  tp->active_connection_id_limit = 4;
}

}  // namespace

QuicConnection::QuicConnection(QuicDevice& dev, QuicPeer* peer, const Endpoint& to, uint64_t now,
                               std::chrono::milliseconds handshake_timeout)
    : dev_(dev), peer_(peer), server_(false), remote_(to), now_(now) {
  ngtcp2_cid dcid;
  random_cid(&dcid, NGTCP2_MIN_INITIAL_DCIDLEN);
  random_cid(&scid_, kCidLen);
  ngtcp2_settings s;
  ngtcp2_transport_params tp;
  size_from(*peer_);
  fill_settings(&s, &tp, dev_.options(), remote_, handshake_timeout, windows_, now);
  const auto cb = callbacks(false);
  const ngtcp2_path path = make_path(dev_.local(), remote_);
  if (const int rv = ngtcp2_conn_client_new(&conn_, &dcid, &scid_, &path, NGTCP2_PROTO_VER_V1, &cb, &s, &tp,
                                            nullptr, this);
      rv != 0)
    throw Error(ErrorCode::kIo, std::string("ngtcp2_conn_client_new: ") + ngtcp2_strerror(rv));
  init_common();
  if (resuming_) {
    // 0-RTT: the acceptor's transport parameters as the ticket's connection saw them. Its new
    // connection's windows are sized afresh (flow_window.h) and may be smaller than those, and
    // a server must not announce less than what 0-RTT used (RFC 9000 §7.4.1): early data keeps
    // within the floors every sized window respects; the rest goes once the handshake is done.
    ngtcp2_transport_params ep = peer_->ticket_params;
    const WindowLimits lim = dev_.options().window_limits();
    const uint64_t cap = std::min(lim.floor, lim.stream_floor);
    ep.initial_max_data = std::min(ep.initial_max_data, cap);
    ep.initial_max_stream_data_bidi_local = std::min(ep.initial_max_stream_data_bidi_local, cap);
    ep.initial_max_stream_data_bidi_remote = std::min(ep.initial_max_stream_data_bidi_remote, cap);
    ep.initial_max_stream_data_uni = std::min(ep.initial_max_stream_data_uni, cap);
    ngtcp2_conn_set_early_remote_transport_params(conn_, &ep);
    early_ = start_control();
  }
}

QuicConnection::QuicConnection(QuicDevice& dev, const Endpoint& from, const ngtcp2_pkt_hd& hd, uint64_t now)
    : dev_(dev), server_(true), remote_(from), now_(now) {
  random_cid(&scid_, kCidLen);
  client_dcid_ = hd.dcid;
  ngtcp2_settings s;
  ngtcp2_transport_params tp;
  // The Hello that names the dialler comes after our transport parameters: the peer whose
  // published address this packet came from is the likely one (its figures only size windows,
  // within their bounds; the Hello and the certificate still decide who it is).
  QuicPeer* likely = dev_.peer_at(from);
  if (likely) size_from(*likely);
  else windows_ = size_windows(0, 0, dev_.options().window_limits());
  announced_stream_ = windows_.stream;
  fill_settings(&s, &tp, dev_.options(), remote_, std::chrono::milliseconds(0), windows_, now);
  tp.original_dcid = hd.dcid;
  const auto cb = callbacks(true);
  const ngtcp2_path path = make_path(dev_.local(), remote_);
  if (const int rv = ngtcp2_conn_server_new(&conn_, &hd.scid, &scid_, &path, hd.version, &cb, &s, &tp, nullptr,
                                            this);
      rv != 0)
    throw Error(ErrorCode::kIo, std::string("ngtcp2_conn_server_new: ") + ngtcp2_strerror(rv));
  init_common();
  const std::string k = cid_key(client_dcid_.data, client_dcid_.datalen);
  cids_.push_back(k);
  dev_.route(k, this);
}

void QuicConnection::size_from(const QuicPeer& p) {
  windows_rtt_ns_ = p.path_rtt_ns;
  windows_rate_bps_ = p.path_rate_bps;
  windows_ = size_windows(windows_rtt_ns_, windows_rate_bps_, dev_.options().window_limits());
  announced_stream_ = windows_.stream;
}

bool QuicConnection::widen(const FlowWindows& w, uint64_t rtt_ns, uint64_t rate_bps, uint64_t now) {
  if (state_ == State::kClosed || in_read_) return false;
  if (w.connection < windows_.connection || w.stream < windows_.stream) return false;
  if (w.connection == windows_.connection && w.stream == windows_.stream) return false;
  ngtcp2_conn_extend_max_offset(conn_, w.connection - windows_.connection);
  windows_.measured = w.measured;
  windows_.bdp = w.bdp;
  windows_.connection = w.connection;
  windows_.stream = w.stream;  // new frame streams (on_stream_data)
  windows_rtt_ns_ = rtt_ns;
  windows_rate_bps_ = rate_bps;
  write(now);  // MAX_DATA
  return true;
}

void QuicConnection::init_common() {
  conn_ref_.get_conn = get_conn;
  conn_ref_.user_data = this;
  const bool zero_rtt = dev_.options().zero_rtt;
  static const std::vector<uint8_t> kNoTicket;
  const std::vector<uint8_t>& ticket = !server_ && zero_rtt && peer_ ? peer_->ticket : kNoTicket;
  try {
    tls_ = make_session(server_, dev_.credentials(), &conn_ref_, server_ ? &dev_.tickets() : nullptr, zero_rtt,
                        ticket, &resuming_);
  } catch (...) {
    ngtcp2_conn_del(conn_);
    throw;
  }
  if (!server_) gnutls_handshake_set_hook_function(tls_, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET, GNUTLS_HOOK_POST, ticket_hook);
  ngtcp2_conn_set_tls_native_handle(conn_, tls_);
  // Idle peers still send keep-alive pings, so only a silent path reaches the idle timeout.
  ngtcp2_conn_set_keep_alive_timeout(conn_, 5 * NGTCP2_SECONDS);
  const std::string k = cid_key(scid_.data, scid_.datalen);
  cids_.push_back(k);
  dev_.route(k, this);
  gso_ = dev_.gso();
}

QuicConnection::~QuicConnection() {
  for (const auto& k : cids_) dev_.unroute(k);
  if (conn_) ngtcp2_conn_del(conn_);
  if (tls_) gnutls_deinit(tls_);
}

ngtcp2_conn_stat QuicConnection::conn_stat() const {
  ngtcp2_conn_stat st{};
  ngtcp2_conn_get_conn_stat(conn_, &st);
  return st;
}

uint64_t QuicConnection::bytes_in_flight() const { return conn_stat().bytes_in_flight; }

void QuicConnection::fail(ErrorCode code, const std::string& why) {
  if (state_ == State::kClosed || close_pending_) return;
  const bool known = state_ == State::kEstablished;
  if (in_read_) {
    // Inside ngtcp2_conn_read_pkt (a callback): ngtcp2 may not be re-entered; on_packet closes
    // once it returns.
    defer_close(why, true);
    pending_lost_ = known && peer_;
    pending_code_ = code;
    return;
  }
  close(why, true);
  if (known && peer_) dev_.connection_lost(*peer_, code, why);
}

void QuicConnection::defer_close(const std::string& reason, bool error) {
  if (close_pending_) return;
  close_pending_ = true;
  close_reason_ = reason;
  pending_error_ = error;
}

void QuicConnection::drop(const std::string& reason) {
  closing_sent_ = true;
  close(reason, false, now_);
}

void QuicConnection::send_failed() { fail(ErrorCode::kIo, "QUIC: sending to " + endpoint_string(remote_) + " failed"); }

void QuicConnection::close(const std::string& reason, bool error, uint64_t now) {
  if (state_ == State::kClosed) return;
  now_ = now;
  if (in_read_) return defer_close(reason, error);
  close_reason_ = reason;
  if (!closing_sent_ && conn_ && !ngtcp2_conn_is_in_closing_period(conn_) && !ngtcp2_conn_is_in_draining_period(conn_)) {
    closing_sent_ = true;
    ngtcp2_connection_close_error ccerr;
    ngtcp2_connection_close_error_default(&ccerr);
    const std::string r = reason.substr(0, 200);  // ccerr points into it until the write below
    if (error)
      ngtcp2_connection_close_error_set_application_error(&ccerr, kAppError,
                                                          reinterpret_cast<const uint8_t*>(r.data()), r.size());
    std::vector<uint8_t> buf(NGTCP2_MAX_UDP_PAYLOAD_SIZE);
    ngtcp2_path_storage ps;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_pkt_info pi{};
    const ngtcp2_ssize n =
        ngtcp2_conn_write_connection_close(conn_, &ps.path, &pi, buf.data(), buf.size(), &ccerr, now_);
    if (n > 0) outbox_.push_back({std::vector<uint8_t>(buf.begin(), buf.begin() + n), static_cast<size_t>(n), 1});
  }
  state_ = State::kClosed;
  wants_write_ = false;
  dev_.flush(*this);  // the CONNECTION_CLOSE leaves; its timers stop
  dev_.retire(this);
}

// ---- Receiving.

void QuicConnection::on_packet(const Endpoint& from, std::span<const uint8_t> pkt, uint64_t now) {
  if (state_ == State::kClosed || deaf_) return;
  now_ = now;
  ngtcp2_path path = make_path(dev_.local(), from);
  ngtcp2_pkt_info pi{};
  in_read_ = true;
  const int rv = ngtcp2_conn_read_pkt(conn_, &path, &pi, pkt.data(), pkt.size(), now_);
  in_read_ = false;
  if (state_ == State::kClosed) return;
  if (close_pending_) {
    // A callback decided to close: what it queued (a Reply with the reason) leaves first.
    close_pending_ = false;
    const std::string why = close_reason_;
    if (flush_before_close_) write(now_);
    close(why, pending_error_);
    if (pending_lost_ && peer_) dev_.connection_lost(*peer_, pending_code_, why);
    return;
  }
  if (rv != 0) {
    if (rv == NGTCP2_ERR_DRAINING || rv == NGTCP2_ERR_CLOSING) {
      // The peer closed the connection.
      ngtcp2_connection_close_error cc{};
      ngtcp2_conn_get_connection_close_error(conn_, &cc);
      const ngtcp2_connection_close_error* e = &cc;
      std::string why = "rank " + std::to_string(peer_ ? peer_->rank : -1) + " closed the QUIC connection";
      if (e && e->reasonlen > 0) why += ": " + std::string(reinterpret_cast<const char*>(e->reason), e->reasonlen);
      if (e && e->type == NGTCP2_CONNECTION_CLOSE_ERROR_CODE_TYPE_APPLICATION && e->error_code == kAppError &&
          state_ != State::kEstablished)
        rejected_ = true;
      closing_sent_ = true;  // nothing more to say
      fail(ErrorCode::kPeerLost, why);
      return;
    }
    if (rv == NGTCP2_ERR_DROP_CONN) {
      closing_sent_ = true;
      fail(ErrorCode::kPeerLost, "QUIC connection dropped");
      return;
    }
    std::string why = std::string("QUIC: ") + ngtcp2_strerror(rv);
    if (rv == NGTCP2_ERR_CRYPTO) why += " (TLS alert " + std::to_string(ngtcp2_conn_get_tls_alert(conn_)) + ")";
    fail(ErrorCode::kProtocol, why);
    return;
  }
  last_rx_ = Clock::time_point(std::chrono::nanoseconds(now_));
  if (first_rx_ == Clock::time_point{}) first_rx_ = last_rx_;
  if (peer_ && state_ == State::kEstablished) dev_.group().heard(peer_->rank);
  write(now_);
}

int QuicConnection::on_stream_data(uint32_t flags, int64_t stream_id, uint64_t offset, const uint8_t* data,
                                   size_t len) {
  (void)offset;  // ngtcp2 delivers each stream's bytes in order
  // Acceptor: 0-RTT bytes wait for the handshake to complete (the client's Finished proves it
  // holds the ticket's secret; until then they may be a replay), and data frames (0-RTT ones come
  // beside the Hello, and may overtake it) for the Hello's verdict.
  if (server_ && (!ngtcp2_conn_get_handshake_completed(conn_) || (stream_id != 0 && state_ != State::kEstablished))) {
    held_.push_back({stream_id, flags, std::vector<uint8_t>(data, data + len)});
    return 0;
  }
  return take_stream_data(flags, stream_id, data, len);
}

void QuicConnection::release_held() {
  while (state_ != State::kClosed && !close_pending_) {
    auto it = std::find_if(held_.begin(), held_.end(),
                           [&](const Held& h) { return h.id == 0 || state_ == State::kEstablished; });
    if (it == held_.end()) return;
    Held h = std::move(*it);
    held_.erase(it);
    if (take_stream_data(h.flags, h.id, h.bytes.data(), h.bytes.size()) != 0) return;  // it failed the connection
  }
}

int QuicConnection::take_stream_data(uint32_t flags, int64_t stream_id, const uint8_t* data, size_t len) {
  ngtcp2_conn_extend_max_stream_offset(conn_, stream_id, len);
  ngtcp2_conn_extend_max_offset(conn_, len);
  // The control stream is the dialler's first bidirectional stream (it opens it before any frame,
  // in 0-RTT too; a refused 0-RTT discards its stream IDs, so the full handshake's is 0 again).
  if (stream_id == ctrl_id_ || (server_ && stream_id == 0)) {
    ctrl_id_ = stream_id;
    on_control_bytes(std::span<const uint8_t>(data, len));
    return 0;  // a decision to close is carried out once ngtcp2 returns
  }
  // The receiver's empty FIN on a data stream this side opened: nothing to read.
  if (ngtcp2_conn_is_local_stream(conn_, stream_id)) return 0;
  if (state_ == State::kHandshake && !server_ && peer_ && ctrl_id_ >= 0) {
    // The acceptor sends data only on a connection it accepted: its Reply is on the way.
    state_ = State::kEstablished;
    dev_.established(*this);
  }
  if (state_ != State::kEstablished || !peer_) {
    fail(ErrorCode::kProtocol, "data stream before the handshake");
    return NGTCP2_ERR_CALLBACK_FAILURE;
  }
  auto [it, fresh] = in_.try_emplace(stream_id);
  // A new frame stream: the window widen() chose since the transport parameters went out.
  if (fresh && windows_.stream > announced_stream_)
    ngtcp2_conn_extend_max_stream_offset(conn_, stream_id, windows_.stream - announced_stream_);
  InStream& s = it->second;
  const int rv = on_data_bytes(stream_id, s, data, len, flags & NGTCP2_STREAM_DATA_FLAG_FIN);
  return rv;
}

int QuicConnection::on_data_bytes(int64_t stream_id, InStream& s, const uint8_t* data, size_t len, bool fin) {
  QuicPeer& p = *peer_;
  while (len > 0 && s.hdr_got < s.hdr.size()) {
    const size_t n = std::min(len, s.hdr.size() - s.hdr_got);
    std::memcpy(s.hdr.data() + s.hdr_got, data, n);
    s.hdr_got += n;
    data += n;
    len -= n;
    if (s.hdr_got < s.hdr.size()) break;
    const auto st = protocol::decode_frame_header(s.hdr, &s.h);
    if (st != protocol::DecodeStatus::kOk || s.h.type != protocol::FrameType::kData) {
      fail(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " sent a bad data frame header (" +
                                     protocol::decode_status_name(st) + ")");
      return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    int target = 0;
    dev_.frame_header(p, s.h, &target);
    if (dev_.group().failed()) return 0;
    s.target = static_cast<InStream::Target>(target);
    if (s.h.payload_len == 0) dev_.frame_complete(p, s.h, target);
  }
  if (s.hdr_got < s.hdr.size()) {
    if (fin) in_.erase(stream_id);
    return 0;
  }
  if (len > 0) {
    if (s.got + len > s.h.payload_len) {
      fail(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " sent more bytes than its frame header said");
      return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    dev_.frame_bytes(p, s.h, static_cast<int>(s.target), s.got, std::span<const uint8_t>(data, len));
    s.got += len;
    if (s.got == s.h.payload_len) dev_.frame_complete(p, s.h, static_cast<int>(s.target));
  }
  if (fin) {
    if (s.got != s.h.payload_len) {
      fail(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " ended a frame early");
      return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    in_.erase(stream_id);
    fin_out_.push_back(stream_id);  // our side of the stream ends too (written by write())
  }
  return 0;
}

void QuicConnection::on_control_bytes(std::span<const uint8_t> data) {
  ctrl_in_.insert(ctrl_in_.end(), data.begin(), data.end());
  size_t pos = 0;
  while (state_ != State::kClosed && !close_pending_) {
    if (!handshake_done_) {
      const std::span<const uint8_t> rest(ctrl_in_.data() + pos, ctrl_in_.size() - pos);
      if (server_) {
        if (!accepting_)
          accepting_ = std::make_unique<protocol::HandshakeAcceptor>(
              dev_.group().handshake_setup(protocol::Transport::kQuic, 1, false));
        if (accepting_->state() == protocol::HandshakeState::kJudge) break;  // awaits the fingerprint
        pos += accepting_->feed(rest);
        if (accepting_->state() == protocol::HandshakeState::kRunning) break;
        on_hello();
      } else {
        pos += dialling_->feed(rest);
        if (dialling_->state() == protocol::HandshakeState::kRunning) break;
        if (dialling_->state() == protocol::HandshakeState::kRefused) {
          rejected_ = true;
          close(std::string("rank ") + std::to_string(peer_->rank) + " refused us: " + dialling_->why(), true);
          break;
        }
        handshake_done_ = true;
        if (state_ != State::kEstablished) {  // else its data came first
          state_ = State::kEstablished;
          dev_.established(*this);
        }
      }
      continue;
    }
    if (ctrl_in_.size() - pos < protocol::kFrameHeaderSize) break;
    protocol::FrameHeader h;
    const auto st = protocol::decode_frame_header(
        std::span<const uint8_t, protocol::kFrameHeaderSize>(ctrl_in_.data() + pos, protocol::kFrameHeaderSize), &h);
    if (st != protocol::DecodeStatus::kOk && st != protocol::DecodeStatus::kUnknownControl) {
      fail(ErrorCode::kProtocol, std::string("bad control frame from rank ") + std::to_string(peer_->rank) + " (" +
                                     protocol::decode_status_name(st) + ")");
      break;
    }
    if (ctrl_in_.size() - pos < protocol::kFrameHeaderSize + h.payload_len) break;
    std::span<const uint8_t> payload(ctrl_in_.data() + pos + protocol::kFrameHeaderSize, h.payload_len);
    pos += protocol::kFrameHeaderSize + h.payload_len;
    if (st == protocol::DecodeStatus::kOk) on_control_frame(h, payload);
  }
  ctrl_in_.erase(ctrl_in_.begin(), ctrl_in_.begin() + static_cast<std::ptrdiff_t>(std::min(pos, ctrl_in_.size())));
}

void QuicConnection::on_hello() {
  protocol::HandshakeAcceptor& hs = *accepting_;
  bool wait = false;
  dev_.judge_hello(hs, *this, &wait);
  if (wait) return;  // the dialler's published address is not read yet
  write_control_bytes(hs.take_output());
  if (hs.state() != protocol::HandshakeState::kDone) {
    GEOCCL_LOG(kWarn, "QUIC: rejected a connection from " << endpoint_string(remote_) << ": " << hs.why());
    flush_before_close_ = true;  // the Reply goes out before the CONNECTION_CLOSE
    if (!in_read_) write(now_);
    close(hs.why(), true);
    return;
  }
  handshake_done_ = true;
  state_ = State::kEstablished;
  dev_.established(*this);
  release_held();  // frames that came with the Hello
}

void QuicConnection::recheck_hello(uint64_t now) {
  if (!awaiting_fingerprint()) return;
  now_ = now;
  on_hello();
  write(now_);
  // Control frames may have come right behind the Hello.
  if (!awaiting_fingerprint()) on_control_bytes({});
}

void QuicConnection::on_control_frame(const protocol::FrameHeader& h, std::span<const uint8_t> payload) {
  QuicPeer& p = *peer_;
  switch (h.type) {
    case protocol::FrameType::kAbort: dev_.group().peer_aborted(p.rank, payload); break;
    case protocol::FrameType::kGoodbye: p.goodbye = true; break;
    case protocol::FrameType::kHeartbeat: dev_.group().heartbeat(p.rank, payload); break;
    default:
      fail(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " sent a data frame on the control stream");
  }
}

int QuicConnection::on_handshake_completed() {
  if (server_) {
    state_ = State::kAwaitHello;
    zero_rtt_ = early_data_accepted(tls_);
    release_held();  // the Hello, and what follows it, if it came as 0-RTT
    return 0;
  }
  Fingerprint got{};
  if (!peer_fingerprint(tls_, &got) || got != peer_->address.fingerprint) {
    rejected_ = true;
    defer_close("rank " + std::to_string(peer_->rank) + " presented a certificate (" + short_fingerprint(got) +
                    ") that is not the one it published (" + short_fingerprint(peer_->address.fingerprint) + ")",
                true);
    return 0;
  }
  if (early_) {
    early_ = false;
    if (early_data_accepted(tls_)) {
      // The Hello and the frames are out already; frames go on without waiting for the Reply
      // (the acceptor holds them until it has judged the Hello).
      zero_rtt_ = true;
      // The acceptor's own transport parameters apply now, above the capped early ones: streams
      // that waited for stream credit may go on.
      for (auto& os : out_queue_) os->blocked = false;
      streams_blocked_ = false;
      return 0;
    }
    // Refused (the acceptor does not take early data, or not this ticket): a full handshake it
    // was; everything sent as 0-RTT goes again.
    zero_rtt_refused_ = true;
    if (ngtcp2_conn_early_data_rejected(conn_) != 0) return NGTCP2_ERR_CALLBACK_FAILURE;
    restart_streams();
    GEOCCL_LOG(kInfo, "QUIC: rank " << peer_->rank << " refused 0-RTT; its frames go after the full handshake");
  }
  if (!start_control()) return NGTCP2_ERR_CALLBACK_FAILURE;
  return 0;
}

bool QuicConnection::start_control() {
  if (ngtcp2_conn_open_bidi_stream(conn_, &ctrl_id_, nullptr) != 0) return false;
  // TLS authenticates (the certificate each rank published): no group secret rides in the Hello.
  dialling_ = std::make_unique<protocol::HandshakeDialler>(
      dev_.group().handshake_setup(protocol::Transport::kQuic, 1, false), static_cast<uint32_t>(peer_->rank), 0);
  write_control_bytes(dialling_->take_output());
  return true;
}

void QuicConnection::restart_streams() {
  ctrl_id_ = -1;
  ctrl_out_.clear();
  ctrl_base_ = ctrl_written_ = ctrl_sent_ = ctrl_acked_ = 0;
  std::deque<std::unique_ptr<OutStream>> q;
  for (auto& [id, s] : out_open_) q.push_back(std::move(s));
  for (auto& s : out_queue_) q.push_back(std::move(s));
  out_open_.clear();
  out_queue_.clear();
  opened_.clear();
  fin_out_.clear();
  std::stable_sort(q.begin(), q.end(), [](const auto& a, const auto& b) { return a->f->frame < b->f->frame; });
  for (auto& s : q) {
    s->id = -1;
    s->sent = s->acked = 0;
    s->blocked = false;
  }
  out_queue_ = std::move(q);
  streams_blocked_ = false;
}

bool QuicConnection::carries(uint64_t frame) const {
  for (const auto& s : out_queue_)
    if (s->f->frame == frame) return true;
  for (const auto& [id, s] : out_open_)
    if (s->f->frame == frame) return true;
  return false;
}

void QuicConnection::on_ticket() {
  // Only a connection whose peer proved the published certificate keeps its ticket.
  if (server_ || !peer_ || rejected_ || close_pending_ || state_ == State::kClosed) return;
  const ngtcp2_transport_params* tp = ngtcp2_conn_get_remote_transport_params(conn_);
  gnutls_datum_t d{};
  if (!tp || gnutls_session_get_data2(tls_, &d) != 0) return;
  peer_->ticket.assign(d.data, d.data + d.size);
  gnutls_free(d.data);
  peer_->ticket_params = *tp;
  peer_->ticket_params.version_info = {};  // points into ngtcp2's memory; not needed for 0-RTT
  peer_->ticket_params.version_info_present = 0;
}

int QuicConnection::on_new_cid(ngtcp2_cid* cid, uint8_t* token, size_t cidlen) {
  random_cid(cid, cidlen);
  (void)gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN);
  const std::string k = cid_key(cid->data, cid->datalen);
  cids_.push_back(k);
  dev_.route(k, this);
  return 0;
}

int QuicConnection::on_remove_cid(const ngtcp2_cid* cid) {
  const std::string k = cid_key(cid->data, cid->datalen);
  cids_.erase(std::remove(cids_.begin(), cids_.end(), k), cids_.end());
  dev_.unroute(k);
  return 0;
}

int QuicConnection::on_acked(int64_t stream_id, uint64_t /*offset*/, uint64_t len) {
  if (stream_id == ctrl_id_) {
    ctrl_acked_ += len;
    while (!ctrl_out_.empty() && ctrl_base_ + ctrl_out_.front().size() <= ctrl_acked_) {
      ctrl_base_ += ctrl_out_.front().size();
      ctrl_out_.pop_front();
    }
    return 0;
  }
  // Acknowledgements may come while the rest of a large frame still waits to be handed over.
  auto o = opened_.find(stream_id);
  if (o == opened_.end()) return 0;
  OutStream& s = *o->second;
  s.acked += len;
  if (s.acked >= s.f->size()) {
    if (s.f->delivery) s.f->delivery->delivered.store(true, std::memory_order_release);
    const uint64_t frame = s.f->frame;
    opened_.erase(o);
    out_open_.erase(stream_id);  // it was handed over in full before its last byte was acked
    dev_.frame_delivered(*peer_, frame);
  }
  return 0;
}

int QuicConnection::on_stream_close(int64_t stream_id) {
  // A data stream the peer opened has ended: it may open one more.
  const bool local = ngtcp2_conn_is_local_stream(conn_, stream_id);
  if (!local && stream_id != ctrl_id_) {
    ngtcp2_conn_extend_max_streams_bidi(conn_, 1);
    in_.erase(stream_id);
  }
  return 0;
}

void QuicConnection::on_stream_credit(int64_t stream_id) {
  auto it = opened_.find(stream_id);
  if (it != opened_.end()) it->second->blocked = false;
}

// ---- Sending.

void QuicConnection::post_frame(std::shared_ptr<OutFrame> f, uint64_t now) {
  auto s = std::make_unique<OutStream>();
  s->f = std::move(f);
  out_queue_.push_back(std::move(s));
  write(now);
}

void QuicConnection::write_control_bytes(std::span<const uint8_t> b) {
  ctrl_out_.emplace_back(b.begin(), b.end());
  ctrl_written_ += b.size();
}

void QuicConnection::post_control(protocol::FrameType type, std::span<const uint8_t> payload, uint64_t now) {
  if (state_ != State::kEstablished) return;
  protocol::FrameHeader h;
  h.type = type;
  h.payload_len = static_cast<uint32_t>(payload.size());
  const auto hb = protocol::encode_frame_header(h);
  std::vector<uint8_t> bytes(hb.begin(), hb.end());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  write_control_bytes(bytes);
  write(now);
}

QuicConnection::OutStream* QuicConnection::next_stream() {
  for (auto& s : out_queue_) {
    if (s->blocked) continue;
    if (s->id < 0) {
      if (streams_blocked_) return nullptr;
      const int rv = ngtcp2_conn_open_bidi_stream(conn_, &s->id, nullptr);
      if (rv == NGTCP2_ERR_STREAM_ID_BLOCKED) {
        streams_blocked_ = true;
        return nullptr;
      }
      if (rv != 0) {
        fail(ErrorCode::kIo, std::string("QUIC: cannot open a stream: ") + ngtcp2_strerror(rv));
        return nullptr;
      }
      ++streams_opened_;
      opened_[s->id] = s.get();
    }
    return s.get();
  }
  return nullptr;
}

void QuicConnection::write(uint64_t now) {
  if (state_ == State::kClosed || !conn_) return;
  if (in_read_) return;  // on_packet writes once ngtcp2_conn_read_pkt has returned
  now_ = now;
  wants_write_ = false;
  if (socket_full_) return;  // the device writes again once the socket drains
  const size_t max_payload = ngtcp2_conn_get_max_tx_udp_payload_size(conn_);
  const size_t quantum = std::max<size_t>(ngtcp2_conn_get_send_quantum(conn_), max_payload);
  const size_t max_packets = std::max<size_t>(1, quantum / max_payload);
  if (pkt_.size() < max_payload) pkt_.resize(max_payload);
  std::vector<uint8_t>& pkt = pkt_;
  ngtcp2_path_storage ps;
  ngtcp2_path_storage_zero(&ps);
  const uint64_t ts = now_;
  size_t packets = 0;
  while (packets < max_packets) {
    int64_t stream_id = -1;
    ngtcp2_vec vec[2];
    size_t vcnt = 0;
    uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE;
    OutStream* os = nullptr;
    bool ctrl = false, fin_only = false;
    if (!fin_out_.empty()) {
      stream_id = fin_out_.front();
      flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
      fin_only = true;
    } else if (ctrl_id_ >= 0 && ctrl_sent_ < ctrl_written_) {
      // The oldest chunk holding unsent bytes.
      uint64_t off = ctrl_base_;
      for (auto& c : ctrl_out_) {
        if (off + c.size() > ctrl_sent_) {
          const size_t skip = static_cast<size_t>(ctrl_sent_ - off);
          vec[0] = {c.data() + skip, c.size() - skip};
          vcnt = 1;
          break;
        }
        off += c.size();
      }
      stream_id = ctrl_id_;
      ctrl = true;
    } else if ((state_ == State::kEstablished || early_ || (zero_rtt_ && !server_)) &&
               ngtcp2_conn_get_max_data_left(conn_) > 0 && (os = next_stream())) {
      OutFrame& f = *os->f;
      const size_t hs = f.header.size();
      if (os->sent < hs) {
        vec[vcnt++] = {f.header.data() + os->sent, hs - os->sent};
        if (!f.payload->empty()) vec[vcnt++] = {f.payload->data(), f.payload->size()};
      } else {
        vec[vcnt++] = {f.payload->data() + (os->sent - hs), f.size() - os->sent};
      }
      flags |= NGTCP2_WRITE_STREAM_FLAG_FIN;
      stream_id = os->id;
    }
    if (state_ == State::kClosed) return;
    if (stream_id < 0) flags = 0;
    ngtcp2_ssize ndatalen = -1;
    ngtcp2_pkt_info pi{};
    const ngtcp2_ssize n = ngtcp2_conn_writev_stream(conn_, &ps.path, &pi, pkt.data(), max_payload, &ndatalen,
                                                     flags, stream_id, vcnt ? vec : nullptr, vcnt, ts);
    if (fin_only && (ndatalen >= 0 || n == NGTCP2_ERR_STREAM_SHUT_WR || n == NGTCP2_ERR_STREAM_NOT_FOUND)) {
      fin_out_.pop_front();
      if (n < 0 && n != NGTCP2_ERR_WRITE_MORE) continue;
    }
    if (ndatalen > 0) {
      if (ctrl) ctrl_sent_ += static_cast<uint64_t>(ndatalen);
      else if (os) {
        os->sent += static_cast<size_t>(ndatalen);
        if (os->sent == os->f->size()) {
          // Fully handed over: it waits for its acknowledgements.
          for (auto it = out_queue_.begin(); it != out_queue_.end(); ++it)
            if (it->get() == os) {
              const int64_t id = os->id;
              out_open_[id] = std::move(*it);
              out_queue_.erase(it);
              break;
            }
        }
      }
    }
    if (n < 0) {
      if (n == NGTCP2_ERR_WRITE_MORE) continue;
      if (n == NGTCP2_ERR_STREAM_DATA_BLOCKED) {
        if (os) os->blocked = true;
        if (fin_only) fin_out_.pop_front();
        continue;
      }
      if (n == NGTCP2_ERR_STREAM_SHUT_WR || n == NGTCP2_ERR_STREAM_NOT_FOUND) {
        fail(ErrorCode::kIo, std::string("QUIC stream: ") + ngtcp2_strerror(static_cast<int>(n)));
        return;
      }
      fail(ErrorCode::kIo, std::string("QUIC write: ") + ngtcp2_strerror(static_cast<int>(n)));
      return;
    }
    if (n == 0) break;  // nothing more now: congestion window, pacing, or nothing queued
    queue_packet(pkt.data(), static_cast<size_t>(n));
    ++packets;
  }
  ngtcp2_conn_update_pkt_tx_time(conn_, ts);
  // The quantum is used up: go on after the loop's other work (the pacer may allow more now).
  wants_write_ = packets >= max_packets;
  dev_.flush(*this);
}

void QuicConnection::queue_packet(const uint8_t* pkt, size_t n) {
  TxBatch* b = outbox_.empty() ? nullptr : &outbox_.back();
  // A GSO run: datagrams of one size, but for a shorter last one.
  const bool joins = b && gso_ && b->count < kMaxSegments && n <= b->segment && b->bytes.size() % b->segment == 0 &&
                     b->bytes.size() + n <= kMaxBatchBytes;
  if (!joins) {
    outbox_.push_back({{}, n, 0});
    b = &outbox_.back();
    if (!spare_batches_.empty()) {
      b->bytes = std::move(spare_batches_.back());
      spare_batches_.pop_back();
    }
    b->bytes.reserve(gso_ ? kMaxBatchBytes : kMaxPacket);
  }
  b->bytes.insert(b->bytes.end(), pkt, pkt + n);
  ++b->count;
}

void QuicConnection::batch_sent() {
  std::vector<uint8_t> b = std::move(outbox_.front().bytes);
  outbox_.pop_front();
  b.clear();
  if (spare_batches_.size() < 4) spare_batches_.push_back(std::move(b));
}

uint64_t QuicConnection::expiry() const {
  return state_ == State::kClosed || !conn_ ? UINT64_MAX : ngtcp2_conn_get_expiry(conn_);
}

void QuicConnection::on_expiry(uint64_t now) {
  if (state_ == State::kClosed) return;
  now_ = now;
  const int rv = ngtcp2_conn_handle_expiry(conn_, now_);
  if (rv != 0) {
    closing_sent_ = true;  // idle or handshake timeout: the peer does not hear us anyway
    if (rv == NGTCP2_ERR_IDLE_CLOSE)
      fail(ErrorCode::kPeerUnreachable,
           "no packet from rank " + std::to_string(peer_ ? peer_->rank : -1) + " for " +
               std::to_string(dev_.options().idle_timeout.count()) + " ms (QUIC idle timeout)");
    else if (rv == NGTCP2_ERR_HANDSHAKE_TIMEOUT)
      fail(ErrorCode::kTimeout, "QUIC handshake with " + endpoint_string(remote_) + " timed out");
    else
      fail(ErrorCode::kIo, std::string("QUIC timer: ") + ngtcp2_strerror(rv));
    return;
  }
  write(now_);
}

}  // namespace geoccl::transport::quic
