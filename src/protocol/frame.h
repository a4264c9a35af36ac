// The frame header that precedes every message between two ranks. Fixed 64 bytes:
//
//   off size field
//     0    4 magic        "GCF2" (0x32464347 little-endian; "GCF1" was the 48-byte header)
//     4    1 type         FrameType, or a control frame type of a newer minor (see below)
//     5    1 kind         OpKind of the operation the payload belongs to
//     6    1 dtype        DataType wire value (0 when not applicable)
//     7    1 reduce_op    ReduceOp wire value (0 when not applicable)
//     8    4 tag          user tag (send/recv), root (rooted collectives), else 0
//    12    4 payload_len  bytes following the header (<= kMaxPayload)
//    16    8 seq          collective sequence number, or per-pair sequence for send/recv
//    24    8 op_bytes     the sender's buffer size for the whole operation, in bytes
//    32    8 offset       byte offset of this payload within the operation's stream
//    40    8 frame        data frames: per-pair data frame number (0, 1, 2, ... in posting order
//                         on the sender), which lets the receiver take frame k of a peer from any
//                         of its striped data streams; ack frames: the number of data frames
//                         received in full (every frame below it); abort/goodbye/heartbeat: zero
//    48    1 flags        per-frame bits (kFrameFlagsKnown); none are defined yet
//    49    1 channel      priority class of the traffic, 0 = gradients
//    50    2 reserved     zero
//    52    4 epoch        membership epoch the sender is in (0 until membership can change)
//    56    8 reserved     zero
//
// The receiver compares epoch, kind, seq, channel, dtype, reduce_op, tag and op_bytes with what
// it expects: any difference is a mismatch between ranks, reported as such instead of
// corrupting data.
//
// Frame types and what comes next:
//   1..5     data, abort, goodbye, ack, heartbeat: strict. Unknown flag bits or non-zero reserved bytes are
//            kBadReserved: a sender uses a new flag or field only when the peer's minor version
//            (exchanged in the handshake) announced it.
//   6..15    reserved for frame types a receiver must understand; sent only to a peer whose minor
//            version knows them, so a decoder of this version rejects them (kBadType).
//   16..127  control frames of a newer minor version that may be ignored: decode returns
//            kUnknownControl with the header filled in (type holds the raw value); the payload is
//            at most kMaxUnknownControlPayload bytes and the connection must read past it and go
//            on. No other field of such a header is checked.
//   128..255 invalid (kBadType).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace geoccl::protocol {

inline constexpr uint32_t kFrameMagic = 0x32464347;  // "GCF2"
inline constexpr size_t kFrameHeaderSize = 64;
// Where the header holds its type and its frame number (the layout above): what reads them
// before the header is decoded or trusted (the sealer picks a frame's key and nonce by them).
inline constexpr size_t kFrameTypeOffset = 4;
inline constexpr size_t kFrameNumberOffset = 40;
inline constexpr uint32_t kMaxPayload = 1u << 30;
inline constexpr uint32_t kMaxAbortMessage = 4096;
inline constexpr uint32_t kMaxAbortRanks = 256;
// The largest abort payload (see encode_abort).
inline constexpr uint32_t kMaxAbortPayload = 1 + 4 + kMaxAbortMessage + 2 + 4 * kMaxAbortRanks;
inline constexpr uint8_t kFrameFlagsKnown = 0;  // flag bits this version defines
inline constexpr uint8_t kFirstUnknownControlType = 16;
inline constexpr uint8_t kLastUnknownControlType = 127;
inline constexpr uint32_t kMaxUnknownControlPayload = 64u << 10;

enum class FrameType : uint8_t {
  kData = 1,   // payload is operation data
  kAbort = 2,  // payload: encode_abort (code, message, the ranks it is about); the group is failing
  kGoodbye = 3,  // no payload: the sender is shutting down cleanly; its EOF is not a failure
  kAck = 4,      // no payload: `frame` = data frames of this pair received in full, in order. The
                 // sender may forget them; until then it keeps a copy to re-send if a stream breaks
  kHeartbeat = 5,  // payload: the sender's silent peers (protocol/liveness.h); sent every interval
  // A header decoded as kUnknownControl holds its raw type value (16..127), named by none of these.
};

enum class OpKind : uint8_t {
  kNone = 0,
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kReduceScatter = 4,
  kReduce = 5,
  kGather = 6,
  kScatter = 7,
  kAlltoall = 8,
  kBarrier = 9,
  kSendRecv = 10,
  kSparseAllgather = 11,
};
inline constexpr OpKind kLastOpKind = OpKind::kSparseAllgather;

const char* op_kind_name(OpKind k);

struct FrameHeader {
  FrameType type = FrameType::kData;
  OpKind kind = OpKind::kNone;
  uint8_t dtype = 0;
  uint8_t reduce_op = 0;
  uint32_t tag = 0;
  uint32_t payload_len = 0;
  uint64_t seq = 0;
  uint64_t op_bytes = 0;
  uint64_t offset = 0;
  uint64_t frame = 0;  // data: per-pair frame number (transport-assigned); ack: frames received
  uint8_t flags = 0;
  uint8_t channel = 0;  // priority class, 0 = gradients
  uint32_t epoch = 0;   // membership epoch

  bool operator==(const FrameHeader&) const = default;
};

using FrameHeaderBytes = std::array<uint8_t, kFrameHeaderSize>;

FrameHeaderBytes encode_frame_header(const FrameHeader& h);

enum class DecodeStatus { kOk, kBadMagic, kBadType, kBadLength, kBadReserved, kUnknownControl };
const char* decode_status_name(DecodeStatus s);

// Decodes exactly kFrameHeaderSize bytes. Returns kOk and fills *out, or the first violation.
// kUnknownControl is no violation: *out is filled in, and the caller skips payload_len bytes.
DecodeStatus decode_frame_header(std::span<const uint8_t, kFrameHeaderSize> in, FrameHeader* out);

// Describes the first field where `got` differs from `want` ("" when they agree on every field a
// receiver checks: everything but type, payload_len, offset, frame and flags).
std::string describe_mismatch(const FrameHeader& want, const FrameHeader& got);

// Abort payload (at most kMaxAbortPayload bytes):
//   u8 code (ErrorCode) | u32 length + UTF-8 message (<= kMaxAbortMessage) |
//   u16 count (<= kMaxAbortRanks) | count x u32 rank
// The ranks are the peers the failure is about (transport::Failure::ranks): a rank that learns of
// a failure from a peer's abort knows which peer was lost as well as the one that found it. The
// encoder cuts the message and the ranks to their bounds.
std::vector<uint8_t> encode_abort(uint8_t code, const std::string& message,
                                  std::span<const int> ranks = {});
// False for truncated input, trailing bytes, an over-long message, more than kMaxAbortRanks ranks,
// a rank above INT32_MAX or one listed twice. Ranks are not checked against the group's size
// (the caller knows it). *ranks is replaced.
bool decode_abort(std::span<const uint8_t> in, uint8_t* code, std::string* message,
                  std::vector<int>* ranks);

}  // namespace geoccl::protocol
