// The on-path adversary's packet operations and its per-link attacks, on
// hand-built IPv4/TCP packets. Checksums are checked with the test's own
// one's-complement sum (RFC 1071), not the code under test.
#include "testbed/adversary.h"
#include "testbed/link_adversary.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace geoccl::testbed {
namespace {

using Bytes = std::vector<std::uint8_t>;

// RFC 1071 sum of big-endian 16-bit words, folded; an odd last byte is the high half of a word.
std::uint16_t folded_sum(const Bytes& data, std::uint32_t start = 0) {
  std::uint32_t sum = start;
  for (std::size_t i = 0; i < data.size(); ++i) {
    sum += i % 2 == 0 ? std::uint32_t{data[i]} << 8 : data[i];
    sum = (sum & 0xFFFF) + (sum >> 16);
  }
  return static_cast<std::uint16_t>(sum);
}

// The folded sum of the pseudo-header and the TCP segment as it is (checksum field included).
std::uint16_t tcp_sum_for_test(const Bytes& p, std::size_t ihl, std::size_t total) {
  Bytes pseudo(p.begin() + 12, p.begin() + 20);
  const std::size_t len = total - ihl;
  pseudo.insert(pseudo.end(), {0, 6, static_cast<std::uint8_t>(len >> 8), static_cast<std::uint8_t>(len)});
  return folded_sum(Bytes(p.begin() + static_cast<long>(ihl), p.begin() + static_cast<long>(total)),
                    folded_sum(pseudo));
}

struct Spec {
  std::uint8_t protocol = 6;
  std::size_t ip_options = 0;   // bytes, a multiple of 4
  std::size_t tcp_options = 0;  // bytes, a multiple of 4
  Bytes payload;
  std::uint16_t frag = 0x4000;  // DF
  std::size_t padding = 0;      // bytes after the IPv4 total length (link-layer padding)
};

// A packet from 10.1.2.1:40000 to 10.1.2.2:5000 with both checksums right.
Bytes build(const Spec& s) {
  const std::size_t ihl = 20 + s.ip_options, thl = 20 + s.tcp_options;
  const std::size_t total = ihl + (s.protocol == 6 ? thl : 8) + s.payload.size();
  Bytes p(total + s.padding, 0);
  p[0] = static_cast<std::uint8_t>(0x40 | (ihl / 4));
  p[2] = static_cast<std::uint8_t>(total >> 8);
  p[3] = static_cast<std::uint8_t>(total);
  p[4] = 0x12;
  p[5] = 0x34;
  p[6] = static_cast<std::uint8_t>(s.frag >> 8);
  p[7] = static_cast<std::uint8_t>(s.frag);
  p[8] = 64;
  p[9] = s.protocol;
  const std::uint8_t addrs[8] = {10, 1, 2, 1, 10, 1, 2, 2};
  std::copy(addrs, addrs + 8, p.begin() + 12);
  for (std::size_t i = 20; i < ihl; ++i) p[i] = 1;  // NOP options
  const std::uint16_t ip_sum = static_cast<std::uint16_t>(~folded_sum(Bytes(p.begin(), p.begin() + ihl)));
  p[10] = static_cast<std::uint8_t>(ip_sum >> 8);
  p[11] = static_cast<std::uint8_t>(ip_sum);
  std::uint8_t* t = p.data() + ihl;
  t[0] = 40000 >> 8;
  t[1] = 40000 & 0xFF;
  t[2] = 5000 >> 8;
  t[3] = 5000 & 0xFF;
  t[4] = 0xde;  // sequence and acknowledgement numbers
  t[7] = 0x01;
  t[11] = 0x02;
  if (s.protocol == 6) {
    t[12] = static_cast<std::uint8_t>((thl / 4) << 4);
    t[13] = 0x18;  // PSH, ACK
    t[14] = 0xff;
    for (std::size_t i = 20; i < thl; ++i) t[i] = 1;
  }
  std::copy(s.payload.begin(), s.payload.end(), p.begin() + static_cast<long>(total - s.payload.size()));
  if (s.protocol == 6) {
    const std::uint16_t sum = static_cast<std::uint16_t>(~tcp_sum_for_test(p, ihl, total));
    t[16] = static_cast<std::uint8_t>(sum >> 8);
    t[17] = static_cast<std::uint8_t>(sum);
  }
  return p;
}

std::size_t ihl_of(const Bytes& p) { return std::size_t{p[0] & 0x0Fu} * 4; }
std::size_t total_of(const Bytes& p) { return (std::size_t{p[2]} << 8) | p[3]; }

// A receiving kernel's checks: the IPv4 header and the TCP segment each sum to 0xFFFF.
void expect_checksums_valid(const Bytes& p) {
  EXPECT_EQ(folded_sum(Bytes(p.begin(), p.begin() + static_cast<long>(ihl_of(p)))), 0xFFFF) << "IPv4 header";
  EXPECT_EQ(tcp_sum_for_test(p, ihl_of(p), total_of(p)), 0xFFFF) << "TCP checksum";
}

Bytes counting(std::size_t n, std::uint8_t from = 0) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(from + i * 7);
  return b;
}

TEST(Adversary, FindsThePayloadBehindOptions) {
  const Bytes p = build({.ip_options = 4, .tcp_options = 12, .payload = counting(100)});
  expect_checksums_valid(p);  // the builder itself
  const auto s = parse_tcp_segment(p);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->tcp_offset, 24u);
  EXPECT_EQ(s->payload_offset, 24u + 32u);
  EXPECT_EQ(s->payload_size, 100u);
  EXPECT_EQ(s->flow.src_addr, 0x0A010201u);
  EXPECT_EQ(s->flow.dst_addr, 0x0A010202u);
  EXPECT_EQ(s->flow.src_port, 40000);
  EXPECT_EQ(s->flow.dst_port, 5000);
}

TEST(Adversary, FlippedByteKeepsBothChecksumsValid) {
  for (const std::size_t size : {1u, 2u, 101u, 1448u}) {  // odd sizes: the last word is half a byte
    SCOPED_TRACE(size);
    const Bytes before = build({.tcp_options = 12, .payload = counting(size, 3)});
    Bytes p = before;
    ASSERT_TRUE(flip_payload_byte(p, size / 2));
    expect_checksums_valid(p);
    std::size_t differing_payload = 0;
    const std::size_t off = 20 + 32;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p[i] == before[i]) continue;
      if (i >= off) {
        ++differing_payload;
        EXPECT_EQ(i, off + size / 2);
        EXPECT_EQ(p[i], static_cast<std::uint8_t>(~before[i]));
      } else {
        EXPECT_TRUE(i == 20 + 16 || i == 20 + 17) << "header byte " << i << " changed";
      }
    }
    EXPECT_EQ(differing_payload, 1u);
    ASSERT_TRUE(flip_payload_byte(p, size / 2));
    EXPECT_EQ(p, before);  // flipped back: the original checksum again
  }
}

TEST(Adversary, OverwriteWithAnEarlierPayloadKeepsLengthAndChecksums) {
  const Bytes earlier = counting(300, 50);
  {  // longer earlier payload: truncated to this one's size
    Bytes p = build({.payload = counting(200, 9)});
    const Bytes header(p.begin(), p.begin() + 40);
    EXPECT_EQ(overwrite_payload(p, earlier), 200u);
    expect_checksums_valid(p);
    EXPECT_EQ(p.size(), 240u);
    EXPECT_EQ(Bytes(p.begin() + 40, p.end()), Bytes(earlier.begin(), earlier.begin() + 200));
    EXPECT_EQ(Bytes(p.begin() + 4, p.begin() + 36), Bytes(header.begin() + 4, header.begin() + 36));  // seq, ack
  }
  {  // shorter earlier payload: only its bytes are replaced
    const Bytes mine = counting(301, 9);
    Bytes p = build({.payload = mine});
    EXPECT_EQ(overwrite_payload(p, Bytes(earlier.begin(), earlier.begin() + 101)), 101u);
    expect_checksums_valid(p);
    EXPECT_EQ(Bytes(p.begin() + 40, p.begin() + 141), Bytes(earlier.begin(), earlier.begin() + 101));
    EXPECT_EQ(Bytes(p.begin() + 141, p.end()), Bytes(mine.begin() + 101, mine.end()));
  }
}

TEST(Adversary, NonTcpFragmentsTruncatedAndEmptySegmentsAreUntouched) {
  Bytes v6 = build({.payload = counting(64)});
  v6[0] = 0x60;
  Bytes truncated = build({.payload = counting(64)});
  truncated.resize(truncated.size() - 1);  // total length beyond the buffer
  Bytes bad_offset = build({.payload = counting(8)});
  bad_offset[20 + 12] = 0xF0;  // TCP header of 60 bytes in a 48-byte segment
  const std::vector<Bytes> untouched = {
      build({.protocol = 17, .payload = counting(64)}),             // UDP
      v6,                                                           // not IPv4
      build({.payload = counting(64), .frag = 0x2000}),             // first fragment (MF)
      build({.payload = counting(64), .frag = 0x0010}),             // a later fragment
      truncated,
      bad_offset,
      build({.tcp_options = 12}),                                   // a pure ACK
      Bytes(19, 0x45),                                              // shorter than an IPv4 header
  };
  const Bytes pattern = {0, 7};
  for (std::size_t i = 0; i < untouched.size(); ++i) {
    SCOPED_TRACE(i);
    Bytes p = untouched[i];
    EXPECT_FALSE(flip_payload_byte(p, 0));
    EXPECT_EQ(overwrite_payload(p, counting(64, 1)), 0u);
    EXPECT_FALSE(payload_contains(p, pattern));
    EXPECT_EQ(p, untouched[i]);
    LinkAdversary adv;
    adv.tamper(1);
    adv.replay(1);
    adv.sniff(pattern);
    adv.process(p);
    adv.process(p);
    EXPECT_EQ(p, untouched[i]);
    EXPECT_EQ(adv.tamper_pending(), 1u);
    EXPECT_EQ(adv.counters().sniff_packets, 0u);
  }
  EXPECT_FALSE(parse_tcp_segment(untouched[0]).has_value());
  const auto ack = parse_tcp_segment(untouched[6]);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(ack->payload_size, 0u);
}

TEST(Adversary, PatternIsFoundAnywhereInThePayloadAndOnlyThere) {
  Bytes payload = counting(1000);
  const Bytes marker = {0xEE, 0xFF, 0xC0, 0x00, 0x55, 0xDA, 0xBA, 0x00,
                        0xA5, 0x5E, 0xD1, 0x00, 0xDE, 0xCA, 0xFA, 0x00};
  for (const std::size_t at : {0u, 1u, 493u, 1000u - 16u}) {
    SCOPED_TRACE(at);
    Bytes with = payload;
    std::copy(marker.begin(), marker.end(), with.begin() + static_cast<long>(at));
    EXPECT_TRUE(payload_contains(build({.tcp_options = 12, .payload = with}), marker));
  }
  EXPECT_FALSE(payload_contains(build({.payload = payload}), marker));
  Bytes cut = payload;  // all but the last byte of the marker, at the very end
  std::copy(marker.begin(), marker.end() - 1, cut.end() - 15);
  EXPECT_FALSE(payload_contains(build({.payload = cut}), marker));
  // In the headers (the addresses) but not in the payload: not found.
  EXPECT_FALSE(payload_contains(build({.payload = payload}), Bytes{10, 1, 2, 1}));
  // Link-layer padding after the IPv4 total length is not payload.
  Bytes padded = build({.payload = payload, .padding = 16});
  std::copy(marker.begin(), marker.end(), padded.end() - 16);
  EXPECT_FALSE(payload_contains(padded, marker));
  EXPECT_EQ(parse_tcp_segment(padded)->payload_size, 1000u);
  EXPECT_FALSE(payload_contains(build({.payload = Bytes(marker.begin(), marker.begin() + 8)}), marker));
  EXPECT_FALSE(payload_contains(build({.payload = payload}), Bytes{}));
}

TEST(LinkAdversary, TamperHitsTheNextNSegmentsWithPayloadOnly) {
  LinkAdversary adv;
  EXPECT_FALSE(adv.armed());
  adv.tamper(2);
  EXPECT_TRUE(adv.armed());
  const Bytes ack = build({});
  const Bytes data = build({.payload = counting(500)});
  Bytes p = ack;
  adv.process(p);
  EXPECT_EQ(p, ack);
  for (int i = 0; i < 3; ++i) {
    p = data;
    adv.process(p);
    expect_checksums_valid(p);
    EXPECT_EQ(p != data, i < 2) << i;
  }
  EXPECT_EQ(adv.counters().tampered, 2u);
  EXPECT_EQ(adv.tamper_pending(), 0u);
  EXPECT_FALSE(adv.armed());
  EXPECT_TRUE(adv.used());
}

// Two flows' segments interleaved: each replayed segment carries its own flow's previous
// payload, as that flow's sender sent it.
TEST(LinkAdversary, ReplayGivesEachSegmentItsFlowsPreviousPayload) {
  LinkAdversary adv;
  adv.replay(3);
  auto other_flow = [](Bytes p) {
    p[20 + 1] ^= 1;  // source port 40001
    p[20 + 16] = p[20 + 17] = 0;
    const auto sum = static_cast<std::uint16_t>(~tcp_sum_for_test(p, 20, total_of(p)));
    p[20 + 16] = static_cast<std::uint8_t>(sum >> 8);
    p[20 + 17] = static_cast<std::uint8_t>(sum);
    return p;
  };
  const Bytes a1 = counting(400, 1), a2 = counting(400, 2), a3 = counting(400, 3), b1 = counting(400, 9);
  Bytes p1 = build({.payload = a1}), q1 = other_flow(build({.payload = b1}));
  Bytes p2 = build({.payload = a2}), p3 = build({.payload = a3});
  Bytes q2 = other_flow(build({.payload = a3}));
  adv.process(p1);  // first of flow A: remembered, unchanged
  adv.process(q1);  // first of flow B
  adv.process(p2);  // A: gets a1
  adv.process(q2);  // B: gets b1
  adv.process(p3);  // A: gets a2, as sent (not the a1 it was given)
  Bytes p4 = build({.payload = a1});
  adv.process(p4);  // nothing pending any more
  for (const Bytes* p : {&p1, &q1, &p2, &q2, &p3, &p4}) expect_checksums_valid(*p);
  EXPECT_EQ(Bytes(p1.begin() + 40, p1.end()), a1);
  EXPECT_EQ(Bytes(q1.begin() + 40, q1.end()), b1);
  EXPECT_EQ(Bytes(p2.begin() + 40, p2.end()), a1);
  EXPECT_EQ(Bytes(q2.begin() + 40, q2.end()), b1);
  EXPECT_EQ(Bytes(p3.begin() + 40, p3.end()), a2);
  EXPECT_EQ(p4, build({.payload = a1}));
  EXPECT_EQ(adv.counters().replayed, 3u);
  EXPECT_EQ(adv.replay_pending(), 0u);
}

TEST(LinkAdversary, SniffCountsSegmentsCarryingThePattern) {
  LinkAdversary adv;
  const Bytes marker = {0xC0, 0xFF, 0xEE, 0x42};
  adv.sniff(marker);
  Bytes with = counting(600);
  std::copy(marker.begin(), marker.end(), with.begin() + 300);
  for (int i = 0; i < 5; ++i) {
    Bytes p = build({.payload = i % 2 ? counting(600) : with});
    const Bytes before = p;
    adv.process(p);
    EXPECT_EQ(p, before);  // a sniffer changes nothing
  }
  Bytes ack = build({});
  adv.process(ack);
  EXPECT_EQ(adv.counters().sniff_packets, 5u);
  EXPECT_EQ(adv.counters().sniff_matches, 3u);
  adv.sniff(Bytes{0x01, 0x02});  // a new pattern: counted from then on
  EXPECT_EQ(adv.counters().sniff_matches, 0u);
  adv.sniff({});
  EXPECT_FALSE(adv.armed());
  Bytes p = build({.payload = with});
  adv.process(p);
  EXPECT_EQ(adv.counters().sniff_packets, 0u);
  EXPECT_EQ(to_hex(marker), "c0ffee42");
}

}  // namespace
}  // namespace geoccl::testbed
