// Sealing as a layer of a stream of frames (TCP's connections; any byte-stream transport uses it
// the same way): the connection reads and writes bytes, and this turns a frame into its sealed
// wire bytes and the wire bytes it reads back into verified frames. I/O-free: the connection says
// how many bytes arrived where this told it to put them.
//
// On the wire (sealer.h): the 64-byte header in clear and its tag, then the payload in records of
// at most kRecordBytes, each followed by its tag. A record's wire bytes are staged here and
// decrypted straight to the frame's destination (no copy after), where a wrong tag leaves zeros
// (AES-GCM, which decrypts before it verifies) or nothing (XChaCha20-Poly1305): no unverified
// byte stays there.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "security/sealer.h"

namespace geoccl::security {

class SealedStream {
 public:
  static constexpr size_t kHeaderWireBytes = protocol::kFrameHeaderSize + kTagBytes;

  // `send` / `recv`: this connection's keys of each direction (its handshake's); `pair_send` /
  // `pair_recv`: the pair's data-frame keys of each direction (pair_frame_key).
  SealedStream(uint8_t cipher, const Key& send, const Key& recv, const Key& pair_send, const Key& pair_recv)
      : sealer_(cipher, send, pair_send), opener_(cipher, recv, pair_recv) {}

  // ---- Sending, in the order frames go on the wire.
  static size_t wire_size(size_t payload) { return protocol::kFrameHeaderSize + sealed_payload_size(payload); }
  // Writes wire_size(payload.size()) - kFrameHeaderSize bytes after the header: its tag, then the
  // records.
  void seal(std::span<const uint8_t, protocol::kFrameHeaderSize> header, std::span<const uint8_t> payload,
            uint8_t* out) {
    sealer_.seal(header, payload, out);
  }

  // ---- Receiving. A frame: open_header, then (for a payload) record_space / record_got until
  // the payload is in, then end_frame.
  // The header's wire bytes (header || tag): nullptr when it opened, else what failed (for the
  // error). Opens nothing out of order: a data frame numbered at or below the last one opened on
  // this stream fails.
  const char* open_header(std::span<const uint8_t, kHeaderWireBytes> wire);
  // Where the next wire bytes of the payload (of `payload_bytes`, the opened header's) go: the
  // rest of the current record.
  std::span<uint8_t> record_space(size_t payload_bytes);
  // `n` bytes arrived in record_space(). kOpened: a whole record verified, its plaintext (`*plain`
  // bytes) at `dst` (nullptr: in the staging, at `*at`, valid until the next call); kMore: the
  // record is not complete; kFailed: its tag is wrong. `dst` has room for the whole record
  // (record_plain_size of the payload).
  enum class Record { kMore, kOpened, kFailed };
  Record record_got(size_t n, uint8_t* dst, size_t* plain, const uint8_t** at = nullptr);
  // The frame is in: the next header comes.
  void end_frame();
  // The counts of what this stream opened, for the log of a failure.
  std::string describe() const;

 private:
  FrameSealer sealer_;
  FrameOpener opener_;
  std::array<uint8_t, protocol::kFrameHeaderSize> header_{};
  std::vector<uint8_t> record_;
  size_t payload_bytes_ = 0, record_got_ = 0;
  uint32_t record_index_ = 0;
};

}  // namespace geoccl::security
