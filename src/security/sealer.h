// Per-frame authenticated encryption. A frame is sealed under one of two keys, picked by its
// type (header byte kFrameTypeOffset):
//
//   data frame     key = the pair's key of this direction and channel for the session
//                  (pair_frame_key: every connection of the pair, striped or resumed, has it)
//                  nonce = the frame's pair-level frame number (header bytes 40..47, the number
//                  stream resume uses for exactly-once delivery) (u64 LE) || record index (u32 LE) || 0
//   control frame  key = this connection's key of this direction (security/auth.h, fresh per
//   (ack, abort,   handshake)
//   goodbye, ...)  nonce = count of control frames sealed on this connection (u64 LE) || record || 0
//
// So a data frame re-sent after a stream broke is sealed to the same bytes as its first copy, and
// no nonce is used twice with a key: the pair-level number is given once per frame (and a re-sent
// frame is the same header and payload again), and a control frame's counter starts at zero only
// under a new connection key.
//
// A sealed frame on the wire: the 64-byte frame header in clear, a 16-byte tag authenticating
// it (record index 0xffffffff, empty plaintext, header as associated data), then the payload in
// records of at most kRecordBytes, each ciphertext || 16-byte tag with the header as associated
// data. The receiver opens the header tag before it acts on any field (type and frame number only
// choose the key and nonce, and are authenticated by it), and each record in a staging buffer
// before a byte reaches the destination. On one connection a control frame must carry the next
// control count, and a data frame a number above the last data frame opened there (a sender writes
// a stream's data frames in number order, re-sent ones too); anything else fails to open:
// replayed, reordered, dropped, injected or modified frames. A data frame replayed from another
// connection of the pair opens (it is a frame the peer sealed), and the receive window's
// exactly-once numbering then drops it: its number was delivered already, or it is delivered once.
//
// AES-256-GCM (AES-NI; OpenSSL's libcrypto) or XChaCha20-Poly1305 (libsodium's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "protocol/frame.h"
#include "security/secret.h"

namespace geoccl::security {

inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kRecordBytes = 256 << 10;
inline constexpr uint32_t kHeaderRecord = 0xffffffffu;
// A frame's type and frame number (protocol::kFrameTypeOffset, kFrameNumberOffset) pick its key
// and nonce before any field is trusted (the tag then covers them).
using protocol::kFrameNumberOffset;
using protocol::kFrameTypeOffset;

// Bytes a payload of `plain` bytes takes on the wire, header tag included.
constexpr size_t sealed_payload_size(size_t plain) {
  return kTagBytes + plain + kTagBytes * ((plain + kRecordBytes - 1) / kRecordBytes);
}
// Plaintext bytes of record `index` of a payload of `plain` bytes.
constexpr size_t record_plain_size(size_t plain, size_t index) {
  const size_t start = index * kRecordBytes;
  return plain - start < kRecordBytes ? plain - start : kRecordBytes;
}
// Records of a payload of `plain` bytes.
constexpr size_t record_count(size_t plain) { return (plain + kRecordBytes - 1) / kRecordBytes; }
// Where record `index` starts in a sealed payload's wire bytes (after the header tag).
constexpr size_t record_wire_offset(size_t index) { return kTagBytes + index * (kRecordBytes + kTagBytes); }

class Aead {
 public:
  // `cipher`: one CipherBits value.
  Aead(uint8_t cipher, const Key& key);
  ~Aead();
  Aead(const Aead&) = delete;
  Aead& operator=(const Aead&) = delete;
  uint8_t cipher() const { return cipher_; }

  // out = ciphertext (plain.size() bytes, may equal plain) || tag.
  void seal(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
            uint8_t* out) const;
  // in = ciphertext || tag; writes the plaintext (in.size() - kTagBytes bytes, may equal in) only
  // when the tag is right. False otherwise (out untouched where the cipher verifies first;
  // zeroed otherwise: nothing unverified is left there either way).
  bool open(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<const uint8_t> in,
            uint8_t* out) const;
  // The same with the tag apart: `data` (ciphertext) is decrypted in place when the tag is
  // right, and zeroed otherwise.
  bool open_detached(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, std::span<uint8_t> data,
                     std::span<const uint8_t, kTagBytes> tag) const;

 private:
  // `tag`: kTagBytes, not overlapping `out`.
  bool open_into(uint64_t counter, uint32_t record, std::span<const uint8_t> ad, const uint8_t* in, size_t n_plain,
                 const uint8_t* tag, uint8_t* out) const;
  uint8_t cipher_;
  Key key_;
  // AES-256-GCM: OpenSSL's (libcrypto picks VAES/AVX-512, AVX or AES-NI code for the CPU: 4.7
  // GB/s per core here against libsodium's 2.0). One context per direction, keyed once; an Aead
  // is used by one thread at a time (its connection's), so the contexts are not shared.
  void* seal_ctx_ = nullptr;  // EVP_CIPHER_CTX
  void* open_ctx_ = nullptr;
};

// The key of data frames of channel (priority class) `channel` from rank `sender` to rank
// `receiver` for the job whose handshake key is `job_key` (security/secret.h: the group secret
// bound to the session id) and for `cipher`: BLAKE2b keyed with the job key over cipher and
// channel (each channel's device numbers its frames from 0), then crypto_kdf with subkey id
// sender << 32 | receiver, so another job, channel, pair or direction has another key.
Key pair_frame_key(const Key& job_key, uint8_t channel, uint32_t sender, uint32_t receiver, uint8_t cipher);

// A data frame's number: its nonce's counter (header bytes kFrameNumberOffset.., u64 LE).
uint64_t frame_number(std::span<const uint8_t, protocol::kFrameHeaderSize> header);
// Record `index` of a frame sealed under `aead` with `counter` (kHeaderRecord: the header tag) at
// its place in `wire` (sealed_payload_size(payload.size()) bytes). Any thread, given an Aead of
// its own: a data frame's records depend only on its key, header and payload.
void seal_record(const Aead& aead, uint64_t counter, std::span<const uint8_t, protocol::kFrameHeaderSize> header,
                 std::span<const uint8_t> payload, uint32_t index, uint8_t* wire);

// Seals whole frames for one direction of one connection.
class FrameSealer {
 public:
  // `connection`: this connection's key of this direction; `pair`: pair_frame_key() of it.
  FrameSealer(uint8_t cipher, const Key& connection, const Key& pair) : control_(cipher, connection), data_(cipher, pair) {}
  // Writes sealed_payload_size(payload.size()) bytes to `out`: header tag, then the records. A data
  // frame's bytes depend only on its header and payload.
  void seal(std::span<const uint8_t, protocol::kFrameHeaderSize> header, std::span<const uint8_t> payload,
            uint8_t* out);
  uint64_t control_frames() const { return control_count_; }
  uint8_t cipher() const { return data_.cipher(); }

 private:
  Aead control_, data_;
  uint64_t control_count_ = 0;
};

// Opens frames of the other direction of one connection, in order.
class FrameOpener {
 public:
  FrameOpener(uint8_t cipher, const Key& connection, const Key& pair) : control_(cipher, connection), data_(cipher, pair) {}
  // The header tag of the next frame. False when it is wrong, or for a data frame whose number is
  // not above the last data frame opened here (replayed or reordered on this connection).
  bool open_header(std::span<const uint8_t, protocol::kFrameHeaderSize> header,
                   std::span<const uint8_t, kTagBytes> tag);
  // Record `index` of the frame whose header opened last (ciphertext || tag), decrypted to its
  // in.size() - kTagBytes bytes at `out` (may equal in.data()); a wrong tag leaves none of them
  // behind (Aead::open).
  bool open_record(std::span<const uint8_t, protocol::kFrameHeaderSize> header, uint32_t index,
                   std::span<const uint8_t> in, uint8_t* out) const;
  // A data frame header whose number is below what this connection expects (open_header refuses it
  // whatever its tag): for the log.
  bool repeated(std::span<const uint8_t, protocol::kFrameHeaderSize> header) const;
  // That frame is done: the next one is expected.
  void next();
  uint64_t control_frames() const { return control_count_; }
  // Data frames opened here and the number the next one must reach at least.
  uint64_t data_frames() const { return data_count_; }
  uint64_t next_data_frame() const { return data_min_; }

 private:
  Aead control_, data_;
  uint64_t control_count_ = 0, data_count_ = 0, data_min_ = 0;
  bool current_data_ = false;  // the frame whose header opened last
  uint64_t current_frame_ = 0;
};

}  // namespace geoccl::security
