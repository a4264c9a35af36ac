#include "compression/format.h"

#include <string>
#include <vector>

#include "geoccl/error.h"
#include "protocol/wire.h"

namespace geoccl::compression {

void write_header(const Header& h, std::span<uint8_t> out) {
  std::vector<uint8_t> bytes;
  bytes.reserve(kHeaderSize);
  protocol::Writer w(&bytes);
  w.u16(kFormatMagic);
  w.u8(static_cast<uint8_t>(h.codec));
  w.u8(kFormatVersion);
  w.u64(h.count);
  w.u32(h.block);
  w.u32(h.k);
  std::memcpy(out.data(), bytes.data(), kHeaderSize);
}

Header read_header(std::span<const uint8_t> in) {
  if (in.size() < kHeaderSize)
    throw Error(ErrorCode::kProtocol, "codec buffer of " + std::to_string(in.size()) +
                                          " bytes is shorter than its header");
  protocol::Reader r(in.first(kHeaderSize));
  uint16_t magic = 0;
  uint8_t codec = 0, version = 0;
  Header h{};
  r.u16(&magic);
  r.u8(&codec);
  r.u8(&version);
  r.u64(&h.count);
  r.u32(&h.block);
  r.u32(&h.k);
  if (magic != kFormatMagic) throw Error(ErrorCode::kProtocol, "codec buffer: bad magic");
  if (version != kFormatVersion)
    throw Error(ErrorCode::kProtocol, "codec buffer: version " + std::to_string(version) +
                                          ", this build reads " + std::to_string(kFormatVersion));
  if (codec < static_cast<uint8_t>(CodecId::kFp16) || codec > static_cast<uint8_t>(kLastCodec))
    throw Error(ErrorCode::kProtocol, "codec buffer: unknown codec " + std::to_string(codec));
  if (h.count > kMaxElements)
    throw Error(ErrorCode::kProtocol,
                "codec buffer: element count " + std::to_string(h.count) + " above the limit");
  h.codec = static_cast<CodecId>(codec);
  return h;
}

void check_payload(const Header& h, CodecId want, size_t in_size, size_t expected_size) {
  if (h.codec != want)
    throw Error(ErrorCode::kProtocol, "codec buffer: codec " +
                                          std::to_string(static_cast<int>(h.codec)) + " where " +
                                          std::to_string(static_cast<int>(want)) + " was expected");
  if (in_size != expected_size)
    throw Error(ErrorCode::kProtocol, "codec buffer: " + std::to_string(in_size) +
                                          " bytes where its header says " +
                                          std::to_string(expected_size));
}

void check_destination(const Header& h, size_t dst_size) {
  if (h.count != dst_size)
    throw Error(ErrorCode::kMismatch, "codec buffer holds " + std::to_string(h.count) +
                                          " elements, destination " + std::to_string(dst_size));
}

void check_output(std::span<const uint8_t> out, size_t expected) {
  if (out.size() != expected)
    throw Error(ErrorCode::kInvalidArgument, "codec output of " + std::to_string(out.size()) +
                                                 " bytes, encoding needs " +
                                                 std::to_string(expected));
}

}  // namespace geoccl::compression
