#include "security/sealed_stream.h"

#include <algorithm>
#include <cstring>

namespace geoccl::security {

const char* SealedStream::open_header(std::span<const uint8_t, kHeaderWireBytes> wire) {
  const auto header = wire.first<protocol::kFrameHeaderSize>();
  if (!opener_.open_header(header, wire.subspan<protocol::kFrameHeaderSize, kTagBytes>()))
    return opener_.repeated(header) ? "a data frame numbered at or below one this connection opened" : "frame header";
  std::copy(header.begin(), header.end(), header_.begin());
  record_got_ = 0;
  record_index_ = 0;
  return nullptr;
}

std::span<uint8_t> SealedStream::record_space(size_t payload_bytes) {
  payload_bytes_ = payload_bytes;
  const size_t wire = record_plain_size(payload_bytes, record_index_) + kTagBytes;
  if (record_.size() < wire) record_.resize(wire);
  return std::span<uint8_t>(record_).subspan(record_got_, wire - record_got_);
}

SealedStream::Record SealedStream::record_got(size_t n, uint8_t* dst, size_t* plain, const uint8_t** at) {
  record_got_ += n;
  const size_t size = record_plain_size(payload_bytes_, record_index_);
  if (record_got_ < size + kTagBytes) return Record::kMore;
  uint8_t* out = dst ? dst : record_.data();
  if (!opener_.open_record(header_, record_index_, std::span<const uint8_t>(record_.data(), size + kTagBytes), out))
    return Record::kFailed;
  record_got_ = 0;
  ++record_index_;
  *plain = size;
  if (at) *at = out;
  return Record::kOpened;
}

void SealedStream::end_frame() { opener_.next(); }

std::string SealedStream::describe() const {
  return std::to_string(opener_.data_frames()) + " data and " + std::to_string(opener_.control_frames()) +
         " control frame(s) of the connection; next data frame at least " + std::to_string(opener_.next_data_frame());
}

}  // namespace geoccl::security
