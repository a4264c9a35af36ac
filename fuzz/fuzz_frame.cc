// Frame header, abort and heartbeat payload decoders: never crash, and what decodes re-encodes
// identically (including the data frame number at offset 40; control frames must carry zero there;
// an abort payload's ranks, within their bound and non-negative). A control frame of a newer minor
// (kUnknownControl) is bounded in length; its reserved bytes are not kept, so it re-encodes
// identically but for them.
#include <cstdlib>
#include <cstring>

#include "protocol/frame.h"
#include "protocol/liveness.h"

using namespace geoccl::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kFrameHeaderSize) {
    std::span<const uint8_t, kFrameHeaderSize> in(data, kFrameHeaderSize);
    FrameHeader h;
    const DecodeStatus st = decode_frame_header(in, &h);
    if (st == DecodeStatus::kOk) {
      const auto again = encode_frame_header(h);
      if (std::memcmp(again.data(), data, kFrameHeaderSize) != 0) std::abort();
      (void)describe_mismatch(h, FrameHeader{});
    } else if (st == DecodeStatus::kUnknownControl) {
      const auto t = static_cast<uint8_t>(h.type);
      if (t < kFirstUnknownControlType || t > kLastUnknownControlType) std::abort();
      if (h.payload_len > kMaxUnknownControlPayload) std::abort();
      FrameHeaderBytes expect{};
      std::memcpy(expect.data(), data, kFrameHeaderSize);
      for (size_t i : {50, 51, 56, 57, 58, 59, 60, 61, 62, 63}) expect[i] = 0;
      if (encode_frame_header(h) != expect) std::abort();
    }
  }
  // Heartbeat payload: what decodes re-encodes identically.
  std::vector<SilentPeer> silent;
  if (decode_heartbeat({data, size}, 1u << 20, &silent)) {
    const auto again = encode_heartbeat(silent);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  uint8_t code = 0;
  std::string msg;
  std::vector<int> ranks;
  if (decode_abort({data, size}, &code, &msg, &ranks)) {
    if (size > kMaxAbortPayload || ranks.size() > kMaxAbortRanks) std::abort();
    for (int r : ranks)
      if (r < 0) std::abort();
    const auto again = encode_abort(code, msg, ranks);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
