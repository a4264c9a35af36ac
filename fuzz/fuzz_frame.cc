// Frame header and abort payload decoders: never crash, and what decodes re-encodes identically
// (including the data frame number at offset 40; control frames must carry zero there).
#include <cstdlib>
#include <cstring>

#include "protocol/frame.h"

using namespace geoccl::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kFrameHeaderSize) {
    std::span<const uint8_t, kFrameHeaderSize> in(data, kFrameHeaderSize);
    FrameHeader h;
    if (decode_frame_header(in, &h) == DecodeStatus::kOk) {
      const auto again = encode_frame_header(h);
      if (std::memcmp(again.data(), data, kFrameHeaderSize) != 0) std::abort();
      (void)describe_mismatch(h, FrameHeader{});
    }
  }
  uint8_t code = 0;
  std::string msg;
  if (decode_abort({data, size}, &code, &msg)) {
    const auto again = encode_abort(code, msg);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  }
  return 0;
}
