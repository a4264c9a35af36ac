// Sealed frames (security/sealer.h, and through the sealed-stream layer) and sealed store values: opening fuzzed bytes never crashes and never succeeds
// without the key; what the sealer seals opens to the same bytes.
//
// The round trips seal under other keys than the ones fuzzed bytes are opened with, and compare
// sealed bytes with sodium_memcmp: libFuzzer reads the operands of memcmp and of comparisons in
// instrumented code, and feeds them back as input, so a tag compared that way comes back as a
// "fuzzed" input that opens (corpus/fuzz_sealed_frame/harness-leaked-tag is one).
#include <sodium.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "protocol/frame.h"
#include "security/sealed_stream.h"
#include "security/sealer.h"
#include "security/store_seal.h"

using namespace geoccl;
using namespace geoccl::security;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Key key{};
  key.fill(11);
  Key trip{};  // the round trips' key
  trip.fill(3);
  const uint8_t cipher = kCipherXChaCha20Poly1305;
  // A store value (security/store_seal.h) read back: never opens without the key; one sealed
  // opens to the same bytes.
  {
    const std::span<const uint8_t> in(data, size);
    if (open_store_value(key, "name", in)) std::abort();
    const auto sealed = seal_store_value(trip, "name", in);
    const auto back = open_store_value(trip, "name", sealed);
    if (!back || back->size() != size || (size && std::memcmp(back->data(), data, size) != 0)) std::abort();
  }
  // An authenticated store request (security/store_seal.h) made of fuzzed bytes: its MAC is
  // never right without the key; the right one is, once per counter.
  if (size >= 16 + 8 + 32) {
    StoreClientId client{};
    StoreMac mac{};
    std::memcpy(client.data(), data, client.size());
    uint64_t counter = 0;
    std::memcpy(&counter, data + 16, 8);
    std::memcpy(mac.data(), data + 24, mac.size());
    const std::span<const uint8_t> body(data + 56, size - 56);
    const Key rk = store_request_key(key);
    if (store_request_mac_ok(rk, client, counter, body, mac)) std::abort();
    if (!store_request_mac_ok(rk, client, counter, body, store_request_mac(rk, client, counter, body))) std::abort();
    StoreReplayGuard guard;
    if (guard.fresh(client, counter) != (counter > 0) || guard.fresh(client, counter)) std::abort();
  }
  if (size < protocol::kFrameHeaderSize + kTagBytes) return 0;
  const std::span<const uint8_t, protocol::kFrameHeaderSize> header(data, protocol::kFrameHeaderSize);
  Key pair{};
  pair.fill(13);
  Key trip_pair{};
  trip_pair.fill(5);
  // As a receiver gets it: header, header tag, then one record.
  {
    FrameOpener opener(cipher, key, pair);
    if (opener.open_header(header, std::span<const uint8_t, kTagBytes>(data + protocol::kFrameHeaderSize, kTagBytes)))
      std::abort();
    std::vector<uint8_t> rec(data + protocol::kFrameHeaderSize + kTagBytes, data + size);
    if (rec.size() > kRecordBytes + kTagBytes) rec.resize(kRecordBytes + kTagBytes);
    if (opener.open_record(header, 0, rec, rec.data())) std::abort();
    protocol::FrameHeader h;
    (void)protocol::decode_frame_header(std::span<const uint8_t, protocol::kFrameHeaderSize>(data, protocol::kFrameHeaderSize), &h);
  }
  // As the sealed-stream layer reads a connection (security/sealed_stream.h): the header never
  // opens without the key; a frame sealed by the layer opens through it in chunks of any size.
  {
    SealedStream rx(cipher, key, key, pair, pair);
    if (!rx.open_header(std::span<const uint8_t, SealedStream::kHeaderWireBytes>(data, SealedStream::kHeaderWireBytes)))
      std::abort();
    const std::span<const uint8_t> payload(data + protocol::kFrameHeaderSize, size - protocol::kFrameHeaderSize);
    SealedStream tx(cipher, trip, trip, trip_pair, trip_pair), back(cipher, trip, trip, trip_pair, trip_pair);
    std::vector<uint8_t> wire(SealedStream::wire_size(payload.size()));
    std::memcpy(wire.data(), data, protocol::kFrameHeaderSize);
    tx.seal(header, payload, wire.data() + protocol::kFrameHeaderSize);
    if (back.open_header(std::span<const uint8_t, SealedStream::kHeaderWireBytes>(wire.data(), SealedStream::kHeaderWireBytes)))
      std::abort();
    const size_t chunk = 1 + data[size - 1] % 97u;
    size_t at = SealedStream::kHeaderWireBytes;
    std::vector<uint8_t> got;
    while (got.size() < payload.size()) {
      const std::span<uint8_t> space = back.record_space(payload.size());
      const size_t n = std::min({chunk, space.size(), wire.size() - at});
      std::memcpy(space.data(), wire.data() + at, n);
      at += n;
      // Opened in the staging, as a discarded frame's records are.
      size_t plain = 0;
      const uint8_t* opened = nullptr;
      const auto r = back.record_got(n, nullptr, &plain, &opened);
      if (r == SealedStream::Record::kFailed) std::abort();
      if (r == SealedStream::Record::kOpened) got.insert(got.end(), opened, opened + plain);
    }
    if (got.size() != payload.size() || (!got.empty() && std::memcmp(got.data(), payload.data(), got.size()) != 0))
      std::abort();
  }
  // Round trip of the rest as a payload.
  {
    const std::span<const uint8_t> payload(data + protocol::kFrameHeaderSize, size - protocol::kFrameHeaderSize);
    FrameSealer sealer(cipher, trip, trip_pair);
    FrameOpener opener(cipher, trip, trip_pair);
    std::vector<uint8_t> wire(sealed_payload_size(payload.size()));
    sealer.seal(header, payload, wire.data());
    // A data frame seals to the same bytes on another connection (a re-sent frame); a control
    // frame under another connection key does not.
    {
      Key other = trip;
      other[0] ^= 1;
      FrameSealer resumed(cipher, other, trip_pair);
      std::vector<uint8_t> again(wire.size());
      resumed.seal(header, payload, again.data());
      const bool data_frame = header[kFrameTypeOffset] == static_cast<uint8_t>(protocol::FrameType::kData);
      if ((sodium_memcmp(again.data(), wire.data(), wire.size()) == 0) != data_frame) std::abort();
    }
    if (!opener.open_header(header, std::span<const uint8_t, kTagBytes>(wire.data(), kTagBytes))) std::abort();
    size_t at = kTagBytes, plain_at = 0;
    for (uint32_t i = 0; plain_at < payload.size(); ++i) {
      const size_t n = record_plain_size(payload.size(), i);
      // Out of place, as a connection opens into a frame's destination.
      std::vector<uint8_t> out(n + 1);
      if (!opener.open_record(header, i, std::span<const uint8_t>(wire.data() + at, n + kTagBytes), out.data()))
        std::abort();
      if (n > 0 && std::memcmp(out.data(), payload.data() + plain_at, n) != 0) std::abort();
      at += n + kTagBytes;
      plain_at += n;
    }
  }
  return 0;
}
