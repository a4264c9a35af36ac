#include <gtest/gtest.h>

#include "protocol/frame.h"
#include "protocol/liveness.h"
#include "protocol/handshake.h"
#include "protocol/shm_hello.h"
#include "protocol/store_codec.h"

using namespace geoccl::protocol;

TEST(Frame, RoundTrip) {
  FrameHeader h;
  h.kind = OpKind::kAllreduce;
  h.dtype = 1;
  h.reduce_op = 2;
  h.tag = 7;
  h.payload_len = 12345;
  h.seq = 0x0102030405060708ull;
  h.op_bytes = 1ull << 40;
  h.offset = 99;
  h.frame = 0x1112131415161718ull;
  h.channel = 3;
  h.epoch = 0x21222324u;
  const auto b = encode_frame_header(h);
  static_assert(kFrameHeaderSize == 64);
  EXPECT_EQ(b[0], 'G');  // magic is little-endian "GCF2"
  EXPECT_EQ(b[3], '2');
  EXPECT_EQ(b[16], 0x08);  // seq low byte first
  EXPECT_EQ(b[40], 0x18);  // frame number at offset 40, low byte first
  EXPECT_EQ(b[48], 0);     // flags
  EXPECT_EQ(b[49], 3);     // channel
  EXPECT_EQ(b[52], 0x24);  // epoch, low byte first
  for (size_t i : {50, 51, 56, 57, 58, 59, 60, 61, 62, 63}) EXPECT_EQ(b[i], 0) << i;
  FrameHeader d;
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kOk);
  EXPECT_EQ(d, h);
}

TEST(Frame, RejectsBadInput) {
  FrameHeader h, d;
  auto b = encode_frame_header(h);
  b[0] ^= 1;
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadMagic);
  b = encode_frame_header(h);
  b[4] = 9;
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadType);
  h.payload_len = kMaxPayload + 1;
  b = encode_frame_header(h);
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadLength);
  h.payload_len = 0;
  b = encode_frame_header(h);
  b[47] = 1;  // a data frame may carry any frame number
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.frame, 1ull << 56);
  h.type = FrameType::kGoodbye;
  b = encode_frame_header(h);
  b[47] = 1;  // ... a control frame none
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadReserved);
  h.frame = 5;  // encoding a control frame drops it
  b = encode_frame_header(h);
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.frame, 0u);
  h.type = FrameType::kAck;  // an ack carries the count of frames received in full
  h.frame = 77;
  b = encode_frame_header(h);
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.type, FrameType::kAck);
  EXPECT_EQ(d.frame, 77u);
  h.payload_len = 1;  // ... and no payload
  b = encode_frame_header(h);
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadLength);
  b[4] = 6;  // no frame type beyond heartbeat
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadType);
}

TEST(Frame, HeartbeatIsAControlFrameWithABoundedPayload) {
  FrameHeader h, d;
  h.type = FrameType::kHeartbeat;
  h.frame = 5;  // encoding a heartbeat drops it
  h.payload_len = 4 + 8 * 3;
  auto b = encode_frame_header(h);
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kOk);
  EXPECT_EQ(d.type, FrameType::kHeartbeat);
  EXPECT_EQ(d.frame, 0u);
  b[40] = 1;  // a frame number is not allowed
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadReserved);
  h.payload_len = static_cast<uint32_t>(max_heartbeat_payload() + 1);
  b = encode_frame_header(h);
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadLength);
}

TEST(Frame, UnknownFlagsAndReservedBytesAreRejected) {
  for (FrameType t : {FrameType::kData, FrameType::kAbort, FrameType::kGoodbye, FrameType::kAck, FrameType::kHeartbeat}) {
    FrameHeader h, d;
    h.type = t;
    for (size_t i : {48, 50, 51, 56, 63}) {
      auto b = encode_frame_header(h);
      b[i] = 1;
      EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadReserved) << int(t) << " byte " << i;
    }
  }
}

TEST(Frame, ControlFramesOfANewerMinorAreSkippable) {
  FrameHeader h;
  h.type = static_cast<FrameType>(kFirstUnknownControlType);
  h.kind = static_cast<OpKind>(200);  // no other field is checked
  h.flags = 0xff;
  h.frame = 9;
  h.payload_len = 100;
  auto b = encode_frame_header(h);
  b[50] = b[60] = 7;  // reserved bytes a newer minor may use
  FrameHeader d;
  ASSERT_EQ(decode_frame_header(b, &d), DecodeStatus::kUnknownControl);
  EXPECT_EQ(static_cast<uint8_t>(d.type), kFirstUnknownControlType);
  EXPECT_EQ(d.payload_len, 100u);  // what the connection reads past
  EXPECT_EQ(d.frame, 9u);
  b[4] = kLastUnknownControlType;
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kUnknownControl);
  h.type = static_cast<FrameType>(kLastUnknownControlType);
  h.payload_len = kMaxUnknownControlPayload + 1;  // the payload length is still bounded
  EXPECT_EQ(decode_frame_header(encode_frame_header(h), &d), DecodeStatus::kBadLength);
  h.payload_len = kMaxUnknownControlPayload;
  EXPECT_EQ(decode_frame_header(encode_frame_header(h), &d), DecodeStatus::kUnknownControl);
  // Outside the range: types a receiver must understand (5..15) and invalid ones (128..255).
  h.payload_len = 0;
  for (int t : {5, 15, 128, 255}) {
    h.type = static_cast<FrameType>(t);
    EXPECT_EQ(decode_frame_header(encode_frame_header(h), &d), DecodeStatus::kBadType) << t;
  }
  h.type = static_cast<FrameType>(kFirstUnknownControlType);
  b = encode_frame_header(h);
  b[0] ^= 1;  // the magic is checked first
  EXPECT_EQ(decode_frame_header(b, &d), DecodeStatus::kBadMagic);
}

TEST(Frame, MismatchNamesTheField) {
  FrameHeader a, b;
  a.kind = b.kind = OpKind::kAllreduce;
  EXPECT_EQ(describe_mismatch(a, b), "");
  b.frame = 3;  // transport bookkeeping, not a disagreement between ranks
  b.offset = 64;
  EXPECT_EQ(describe_mismatch(a, b), "");
  b.op_bytes = 8;
  EXPECT_NE(describe_mismatch(a, b).find("size"), std::string::npos);
  b = a;
  b.dtype = 3;
  EXPECT_NE(describe_mismatch(a, b).find("dtype"), std::string::npos);
  b = a;
  b.kind = OpKind::kBroadcast;
  EXPECT_NE(describe_mismatch(a, b).find("broadcast"), std::string::npos);
  b = a;
  b.flags = 1;  // per-frame bits, not a disagreement
  EXPECT_EQ(describe_mismatch(a, b), "");
  b.channel = 2;
  EXPECT_EQ(describe_mismatch(a, b), "channel: expected 0, peer sent 2");
  b.epoch = 5;  // another membership epoch is named before anything else
  b.kind = OpKind::kBroadcast;
  EXPECT_EQ(describe_mismatch(a, b), "membership epoch: expected 0, peer is in 5");
}

TEST(Frame, AbortPayload) {
  const auto p = encode_abort(3, "rank 2 died");
  uint8_t code = 0;
  std::string msg;
  std::vector<int> ranks{9};
  ASSERT_TRUE(decode_abort(p, &code, &msg, &ranks));
  EXPECT_EQ(code, 3);
  EXPECT_EQ(msg, "rank 2 died");
  EXPECT_TRUE(ranks.empty());
  auto q = p;
  q.push_back(0);
  EXPECT_FALSE(decode_abort(q, &code, &msg, &ranks));
}

TEST(Frame, AbortPayloadNamesTheRanksItIsAbout) {
  const std::vector<int> lost{2, 7};
  const auto p = encode_abort(3, "rank 2 died", lost);
  // u8 code | u32 length + message | u16 count | count x u32 rank
  ASSERT_EQ(p.size(), 1u + 4 + 11 + 2 + 2 * 4);
  EXPECT_EQ(p[16], 2);  // the count
  EXPECT_EQ(p[18], 2);
  EXPECT_EQ(p[22], 7);
  uint8_t code = 0;
  std::string msg;
  std::vector<int> ranks;
  ASSERT_TRUE(decode_abort(p, &code, &msg, &ranks));
  EXPECT_EQ(ranks, lost);
  // Truncated, trailing bytes, a count beyond the ranks present, a rank listed twice, a rank
  // that is no int: refused.
  for (size_t n = 0; n < p.size(); ++n)
    EXPECT_FALSE(decode_abort(std::span(p).first(n), &code, &msg, &ranks)) << n;
  auto q = p;
  q.push_back(0);
  EXPECT_FALSE(decode_abort(q, &code, &msg, &ranks));
  q = p;
  q[16] = 3;
  EXPECT_FALSE(decode_abort(q, &code, &msg, &ranks));
  EXPECT_FALSE(decode_abort(encode_abort(3, "", std::vector<int>{4, 4}), &code, &msg, &ranks));
  q = encode_abort(3, "", std::vector<int>{4});
  q.back() = 0x80;  // 0x80000004
  EXPECT_FALSE(decode_abort(q, &code, &msg, &ranks));
  // The count is bounded; the encoder keeps to the bound.
  std::vector<int> many(kMaxAbortRanks + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int>(i);
  const auto capped = encode_abort(3, "", many);
  ASSERT_TRUE(decode_abort(capped, &code, &msg, &ranks));
  EXPECT_EQ(ranks.size(), kMaxAbortRanks);
  q = capped;
  q[5] = static_cast<uint8_t>((kMaxAbortRanks + 1) & 0xff);
  q[6] = static_cast<uint8_t>((kMaxAbortRanks + 1) >> 8);
  for (int i = 0; i < 4; ++i) q.push_back(0xff);
  EXPECT_FALSE(decode_abort(q, &code, &msg, &ranks));
  // The largest payload fits the header's bound for abort frames, and nothing larger does.
  const auto largest = encode_abort(3, std::string(kMaxAbortMessage + 10, 'x'), many);
  EXPECT_EQ(largest.size(), kMaxAbortPayload);
  FrameHeader h, d;
  h.type = FrameType::kAbort;
  h.payload_len = kMaxAbortPayload;
  EXPECT_EQ(decode_frame_header(encode_frame_header(h), &d), DecodeStatus::kOk);
  h.payload_len = kMaxAbortPayload + 1;
  EXPECT_EQ(decode_frame_header(encode_frame_header(h), &d), DecodeStatus::kBadLength);
}

TEST(Handshake, HelloRoundTripAndChecks) {
  Hello h;
  h.stream = 1;
  h.rank = 3;
  h.world_size = 4;
  h.session_id = 42;
  h.minor = 7;
  h.flags = 0x80000001u;
  h.params_hash = 0x0102030405060708ull;
  const auto b = encode_hello(h);
  EXPECT_EQ(b[8], kProtocolVersion);  // major version at offset 8, as in every version
  EXPECT_EQ(b[28], 7);                // minor after the fields of version 3
  EXPECT_EQ(b[30], 0x01);             // flags, low byte first
  EXPECT_EQ(b[34], 0x08);             // params hash, low byte first
  for (size_t i = kHelloSize - kHelloReserved; i < kHelloSize; ++i) EXPECT_EQ(b[i], 0) << i;
  Hello d;
  ASSERT_EQ(decode_hello(b, &d), HandshakeStatus::kAccepted);
  EXPECT_EQ(d, h);
  const uint64_t ph = h.params_hash;
  EXPECT_EQ(check_hello(d, 4, 42, 2, ph), HandshakeStatus::kAccepted);
  EXPECT_EQ(check_hello(d, 5, 42, 2, ph), HandshakeStatus::kBadWorldSize);
  EXPECT_EQ(check_hello(d, 4, 43, 2, ph), HandshakeStatus::kBadSession);
  EXPECT_EQ(check_hello(d, 4, 42, 1, ph), HandshakeStatus::kBadStream);
  EXPECT_EQ(check_hello(d, 4, 42, 2, ph + 1), HandshakeStatus::kBadParams);
  EXPECT_STREQ(handshake_status_name(HandshakeStatus::kBadParams), "group parameters differ");
  d.minor = 0xffff;  // another minor of the same major is accepted
  EXPECT_EQ(check_hello(d, 4, 42, 2, ph), HandshakeStatus::kAccepted);
  d.version = kProtocolVersion + 1;
  EXPECT_EQ(check_hello(d, 4, 42, 2, ph), HandshakeStatus::kBadVersion);
  std::array<uint8_t, kHelloSize> garbage{};
  garbage.fill('x');
  EXPECT_EQ(decode_hello(garbage, &d), HandshakeStatus::kBadMagic);
}

TEST(Handshake, RelayFieldsRoundTripAndAreChecked) {
  Hello h;
  h.rank = 2;
  h.world_size = 3;
  h.session_id = 42;
  h.flags = kHelloFlagRelayRequest;
  h.via = 0;  // "connect me to rank 0"
  auto b = encode_hello(h);
  EXPECT_EQ(b[30], kHelloFlagRelayRequest);
  b[42] = 1;  // via = 1, at offset 42, low byte first
  Hello d;
  ASSERT_EQ(decode_hello(b, &d), HandshakeStatus::kAccepted);
  EXPECT_EQ(d.via, 1u);
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kAccepted);
  d.via = 2;  // itself
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kBadRank);
  d.via = 3;  // no such rank
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kBadRank);
  d.via = 1;
  d.flags = kHelloFlagRelayed;
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kAccepted);
  d.flags = kHelloFlagRelayed | kHelloFlagRelayRequest;
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kMalformed);
  d.flags = 0;
  d.via = 7;  // without a relay flag `via` means nothing
  EXPECT_EQ(check_hello(d, 3, 42, 2, 0), HandshakeStatus::kAccepted);
  Reply r;
  r.status = HandshakeStatus::kUnreachable;
  Reply rd;
  ASSERT_EQ(decode_reply(encode_reply(r), &rd), HandshakeStatus::kAccepted);
  EXPECT_EQ(rd.status, HandshakeStatus::kUnreachable);
  EXPECT_STREQ(handshake_status_name(HandshakeStatus::kUnreachable), "the relay cannot reach that rank");
}

TEST(Handshake, ReservedBytesAreIgnored) {
  Hello h;
  h.rank = 1;
  auto b = encode_hello(h);
  for (size_t i = kHelloSize - kHelloReserved; i < kHelloSize; ++i) b[i] = 0xa5;
  Hello d;
  ASSERT_EQ(decode_hello(b, &d), HandshakeStatus::kAccepted);
  EXPECT_EQ(d, h);
  Reply r;
  auto rb = encode_reply(r);
  rb[11] = 1;
  for (size_t i = kReplySize - kReplyReserved; i < kReplySize; ++i) rb[i] = 0x5a;
  Reply rd;
  ASSERT_EQ(decode_reply(rb, &rd), HandshakeStatus::kAccepted);
  EXPECT_EQ(rd, r);
}

TEST(Handshake, Reply) {
  Reply r;
  r.status = HandshakeStatus::kBadParams;
  r.rank = 9;
  r.minor = 3;
  r.flags = 5;
  const auto b = encode_reply(r);
  EXPECT_EQ(b[8], kProtocolVersion);
  EXPECT_EQ(b[10], static_cast<uint8_t>(HandshakeStatus::kBadParams));
  EXPECT_EQ(b[12], 9);  // rank where version 3 had it
  EXPECT_EQ(b[16], 3);
  EXPECT_EQ(b[18], 5);
  Reply d;
  ASSERT_EQ(decode_reply(b, &d), HandshakeStatus::kAccepted);
  EXPECT_EQ(d, r);
  auto unknown = b;
  unknown[10] = static_cast<uint8_t>(HandshakeStatus::kRefused) + 1;
  EXPECT_EQ(decode_reply(unknown, &d), HandshakeStatus::kMalformed);
  unknown = b;
  unknown[0] ^= 1;
  EXPECT_EQ(decode_reply(unknown, &d), HandshakeStatus::kBadMagic);
}

TEST(StoreCodec, KeysNameTheirSessionAndServerKeysAreReadInClear) {
  EXPECT_EQ(geoccl::protocol::key_session("geoccl/job7/g1/params"), "job7");
  EXPECT_EQ(geoccl::protocol::key_session("geoccl/job7/"), "job7");
  EXPECT_EQ(geoccl::protocol::key_session("geoccl/job7"), "");  // no key under it
  EXPECT_EQ(geoccl::protocol::key_session("geoccl//g1"), "");
  EXPECT_EQ(geoccl::protocol::key_session("geoccl/.owner"), "");
  EXPECT_EQ(geoccl::protocol::key_session("geoccl/.refused/job7"), "");
  EXPECT_EQ(geoccl::protocol::key_session("other/job7/g1"), "");
  using geoccl::protocol::StoreCommand;
  EXPECT_TRUE(geoccl::protocol::is_public_read({StoreCommand::kGet, "geoccl/.owner", {}, 0, 1}));
  EXPECT_TRUE(geoccl::protocol::is_public_read({StoreCommand::kCheck, "geoccl/.refused/job7", {}, 0, 0}));
  EXPECT_FALSE(geoccl::protocol::is_public_read({StoreCommand::kSet, "geoccl/.owner", {}, 0, 0}));
  EXPECT_FALSE(geoccl::protocol::is_public_read({StoreCommand::kGet, "geoccl/job7/g1/params", {}, 0, 1}));
}

TEST(StoreCodec, RoundTripAndLimits) {
  StoreRequest q{StoreCommand::kSet, "key", {1, 2, 3}, -5, 77};
  auto bytes = encode_store_request(q);
  auto d = decode_store_request(std::span<const uint8_t>(bytes).subspan(4));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->key, "key");
  EXPECT_EQ(d->value, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(d->delta, -5);
  EXPECT_EQ(d->timeout_ms, 77u);
  // Truncated, trailing garbage, or a length beyond the limit: rejected.
  EXPECT_FALSE(decode_store_request(std::span<const uint8_t>(bytes).subspan(4, bytes.size() - 5)));
  bytes.push_back(0);
  EXPECT_FALSE(decode_store_request(std::span<const uint8_t>(bytes).subspan(4)));
  std::vector<uint8_t> huge = {2, 0xff, 0xff, 0xff, 0x7f};
  EXPECT_FALSE(decode_store_request(huge));
  StoreResponse r{StoreStatus::kTimeout, {9}, 123};
  auto rb = encode_store_response(r);
  auto rd = decode_store_response(std::span<const uint8_t>(rb).subspan(4));
  ASSERT_TRUE(rd);
  EXPECT_EQ(rd->status, StoreStatus::kTimeout);
  EXPECT_EQ(rd->number, 123);
}

TEST(ShmHello, TheExtensionRoundTripsAndItsRingSizeIsChecked) {
  shm::Extension e;
  e.ring_bytes = 8192;
  e.token[15] = 9;
  const auto b = shm::encode_extension(e);
  ASSERT_EQ(b.size(), shm::kExtensionSize);
  shm::Extension back;
  ASSERT_TRUE(shm::decode_extension(b, &back));
  EXPECT_EQ(back.ring_bytes, 8192u);
  EXPECT_EQ(back.token, e.token);
  EXPECT_EQ(shm::check_extension(back), "");
  EXPECT_FALSE(shm::decode_extension(std::span<const uint8_t>(b).first(20), &back));
  back.ring_bytes = 4000;
  EXPECT_NE(shm::check_extension(back).find("multiple of 64"), std::string::npos);
}

TEST(Handshake, TheTransportAndItsExtensionSitInTheFormerReservedBytes) {
  Hello h;
  h.transport = static_cast<uint8_t>(Transport::kSharedMemory);
  h.extension = 24;
  const auto b = encode_hello(h);
  EXPECT_EQ(b[46], 1);
  EXPECT_EQ(b[47], 24);
  Hello d;
  ASSERT_EQ(decode_hello(b, &d), HandshakeStatus::kAccepted);
  EXPECT_EQ(d, h);
  Reply r;
  r.status = HandshakeStatus::kRefused;
  r.reason = 300;
  const auto rb = encode_reply(r);
  EXPECT_EQ(rb[22], 300 & 0xff);
  EXPECT_EQ(rb[23], 300 >> 8);
  Reply rd;
  ASSERT_EQ(decode_reply(rb, &rd), HandshakeStatus::kAccepted);
  EXPECT_EQ(rd, r);
  r.reason = kMaxReason + 1;
  EXPECT_EQ(decode_reply(encode_reply(r), &rd), HandshakeStatus::kMalformed);
}
