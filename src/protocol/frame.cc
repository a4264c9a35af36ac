#include "protocol/frame.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "protocol/liveness.h"
#include "protocol/wire.h"

namespace geoccl::protocol {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::kNone: return "none";
    case OpKind::kAllreduce: return "allreduce";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllgather: return "allgather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kReduce: return "reduce";
    case OpKind::kGather: return "gather";
    case OpKind::kScatter: return "scatter";
    case OpKind::kAlltoall: return "alltoall";
    case OpKind::kBarrier: return "barrier";
    case OpKind::kSendRecv: return "send/recv";
    case OpKind::kSparseAllgather: return "sparse_allgather";
  }
  return "unknown";
}

const char* decode_status_name(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kBadMagic: return "bad magic";
    case DecodeStatus::kBadType: return "bad frame type";
    case DecodeStatus::kBadLength: return "payload too long";
    case DecodeStatus::kBadReserved:
      return "reserved field set (unknown flag, reserved byte, or frame number of an abort/goodbye)";
    case DecodeStatus::kUnknownControl: return "control frame of a newer minor version (skipped)";
  }
  return "unknown";
}

namespace {

bool is_known(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kData) &&
         type <= static_cast<uint8_t>(FrameType::kHeartbeat);
}

}  // namespace

FrameHeaderBytes encode_frame_header(const FrameHeader& h) {
  std::vector<uint8_t> v;
  v.reserve(kFrameHeaderSize);
  Writer w(&v);
  w.u32(kFrameMagic);
  w.u8(static_cast<uint8_t>(h.type));
  w.u8(static_cast<uint8_t>(h.kind));
  w.u8(h.dtype);
  w.u8(h.reduce_op);
  w.u32(h.tag);
  w.u32(h.payload_len);
  w.u64(h.seq);
  w.u64(h.op_bytes);
  w.u64(h.offset);
  w.u64(h.type == FrameType::kAbort || h.type == FrameType::kGoodbye || h.type == FrameType::kHeartbeat ? 0 : h.frame);
  w.u8(h.flags);
  w.u8(h.channel);
  w.u16(0);
  w.u32(h.epoch);
  w.u64(0);
  FrameHeaderBytes out{};
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

DecodeStatus decode_frame_header(std::span<const uint8_t, kFrameHeaderSize> in, FrameHeader* out) {
  Reader r(in);
  uint32_t magic = 0;
  uint8_t type = 0, kind = 0;
  uint16_t reserved50 = 0;
  uint64_t reserved56 = 0;
  FrameHeader h;
  r.u32(&magic);
  r.u8(&type);
  r.u8(&kind);
  r.u8(&h.dtype);
  r.u8(&h.reduce_op);
  r.u32(&h.tag);
  r.u32(&h.payload_len);
  r.u64(&h.seq);
  r.u64(&h.op_bytes);
  r.u64(&h.offset);
  r.u64(&h.frame);
  r.u8(&h.flags);
  r.u8(&h.channel);
  r.u16(&reserved50);
  r.u32(&h.epoch);
  r.u64(&reserved56);
  if (magic != kFrameMagic) return DecodeStatus::kBadMagic;
  h.type = static_cast<FrameType>(type);
  h.kind = static_cast<OpKind>(kind);
  if (type >= kFirstUnknownControlType && type <= kLastUnknownControlType) {
    if (h.payload_len > kMaxUnknownControlPayload) return DecodeStatus::kBadLength;
    *out = h;
    return DecodeStatus::kUnknownControl;
  }
  if (!is_known(type)) return DecodeStatus::kBadType;
  if (kind > static_cast<uint8_t>(kLastOpKind)) return DecodeStatus::kBadType;
  if (h.payload_len > kMaxPayload) return DecodeStatus::kBadLength;
  if (h.type == FrameType::kAbort && h.payload_len > kMaxAbortPayload)
    return DecodeStatus::kBadLength;
  if ((h.type == FrameType::kGoodbye || h.type == FrameType::kAck) && h.payload_len != 0)
    return DecodeStatus::kBadLength;
  if (h.type == FrameType::kHeartbeat && h.payload_len > max_heartbeat_payload()) return DecodeStatus::kBadLength;
  if ((h.type == FrameType::kAbort || h.type == FrameType::kGoodbye || h.type == FrameType::kHeartbeat) &&
      h.frame != 0)
    return DecodeStatus::kBadReserved;
  if ((h.flags & ~kFrameFlagsKnown) != 0 || reserved50 != 0 || reserved56 != 0)
    return DecodeStatus::kBadReserved;
  *out = h;
  return DecodeStatus::kOk;
}

std::string describe_mismatch(const FrameHeader& want, const FrameHeader& got) {
  auto num = [](uint64_t v) { return std::to_string(v); };
  if (got.epoch != want.epoch)
    return "membership epoch: expected " + num(want.epoch) + ", peer is in " + num(got.epoch);
  if (got.kind != want.kind)
    return std::string("operation: expected ") + op_kind_name(want.kind) + ", peer sent " +
           op_kind_name(got.kind);
  if (got.seq != want.seq) return "sequence: expected " + num(want.seq) + ", got " + num(got.seq);
  if (got.channel != want.channel)
    return "channel: expected " + num(want.channel) + ", peer sent " + num(got.channel);
  if (got.dtype != want.dtype)
    return "dtype: expected " + num(want.dtype) + ", peer sent " + num(got.dtype);
  if (got.reduce_op != want.reduce_op)
    return "reduce op: expected " + num(want.reduce_op) + ", peer sent " + num(got.reduce_op);
  if (got.tag != want.tag)
    return "tag/root: expected " + num(want.tag) + ", peer sent " + num(got.tag);
  if (got.op_bytes != want.op_bytes)
    return "size: expected " + num(want.op_bytes) + " bytes, peer's buffer has " +
           num(got.op_bytes);
  return "";
}

std::vector<uint8_t> encode_abort(uint8_t code, const std::string& message,
                                  std::span<const int> ranks) {
  std::vector<uint8_t> v;
  Writer w(&v);
  w.u8(code);
  w.str(message.substr(0, kMaxAbortMessage));
  const auto n = std::min<size_t>(ranks.size(), kMaxAbortRanks);
  w.u16(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) w.u32(static_cast<uint32_t>(ranks[i]));
  return v;
}

bool decode_abort(std::span<const uint8_t> in, uint8_t* code, std::string* message,
                  std::vector<int>* ranks) {
  Reader r(in);
  uint16_t n = 0;
  if (!r.u8(code) || !r.str(message, kMaxAbortMessage) || !r.u16(&n) || n > kMaxAbortRanks ||
      r.remaining() != size_t{n} * 4)
    return false;
  ranks->clear();
  for (uint16_t i = 0; i < n; ++i) {
    uint32_t rank = 0;
    r.u32(&rank);
    if (rank > static_cast<uint32_t>(INT32_MAX)) return false;
    if (std::find(ranks->begin(), ranks->end(), static_cast<int>(rank)) != ranks->end())
      return false;
    ranks->push_back(static_cast<int>(rank));
  }
  return true;
}

}  // namespace geoccl::protocol
