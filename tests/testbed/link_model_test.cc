// The link model with time injected: packets and timestamps in, delivery
// times and fates out. No sockets, no sleeps.
#include "testbed/link_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace geoccl::testbed {
namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kUs = 1'000;

LinkParams params(std::int64_t delay_ns, std::uint64_t rate_bps = 0, std::uint64_t queue_bytes = 0,
                  double loss = 0) {
  LinkParams p;
  p.delay_ns = delay_ns;
  p.rate_bps = rate_bps;
  p.queue = QueueLimit{queue_bytes, 0};
  p.loss = loss;
  p.mtu = 9000;
  return p;
}

// Pops everything due by `now`; returns the delivery times.
std::vector<std::int64_t> drain(LinkModel& link, std::int64_t now) {
  std::vector<std::int64_t> times;
  while (link.has_packets() && link.front().deliver_at <= now) {
    times.push_back(link.front().deliver_at);
    link.pop_delivered();
  }
  return times;
}

TEST(LinkModel, DelaysEveryPacketByTheOneWayDelay) {
  LinkModel link(params(10 * kMs), 1);
  EXPECT_EQ(link.next_deadline(), LinkModel::kForever);
  ASSERT_EQ(link.submit(0, 7, 1500), Fate::kQueued);
  ASSERT_EQ(link.submit(3 * kMs, 8, 100), Fate::kQueued);
  EXPECT_EQ(link.next_deadline(), 10 * kMs);
  EXPECT_TRUE(drain(link, 10 * kMs - 1).empty());
  EXPECT_EQ(link.front().slot, 7u);
  EXPECT_EQ(drain(link, 13 * kMs), (std::vector<std::int64_t>{10 * kMs, 13 * kMs}));
  EXPECT_EQ(link.counters().packets_out, 2u);
  EXPECT_EQ(link.counters().bytes_out, 1600u);
}

TEST(LinkModel, SerializesAtTheRate) {
  // 8 Mbit/s = 1 byte per microsecond: a 1000-byte packet takes 1 ms.
  LinkModel link(params(5 * kMs, 8'000'000, 100'000), 1);
  for (std::uint32_t i = 0; i < 3; ++i) ASSERT_EQ(link.submit(0, i, 1000), Fate::kQueued);
  EXPECT_EQ(drain(link, 100 * kMs), (std::vector<std::int64_t>{6 * kMs, 7 * kMs, 8 * kMs}));
}

TEST(LinkModel, DropTailQueueDropsWhenTheBacklogIsFull) {
  LinkModel link(params(0, 8'000'000, 5000), 1);
  int queued = 0;
  for (std::uint32_t i = 0; i < 10; ++i) queued += link.submit(0, i, 1000) == Fate::kQueued;
  // Backlogs before each packet: 0, 1000, ... 4000 fit (backlog + 1000 <= 5000).
  EXPECT_EQ(queued, 5);
  EXPECT_EQ(link.counters().queue_drops, 5u);
  // 2 ms later two packets have left: room for two more, not three.
  EXPECT_EQ(link.submit(2 * kMs, 20, 1000), Fate::kQueued);
  EXPECT_EQ(link.submit(2 * kMs, 21, 1000), Fate::kQueued);
  EXPECT_EQ(link.submit(2 * kMs, 22, 1000), Fate::kQueueDrop);
}

TEST(LinkModel, IdleLinkAcceptsAPacketLargerThanTheQueue) {
  LinkModel link(params(0, 8'000'000, 100), 1);
  EXPECT_EQ(link.submit(0, 1, 1500), Fate::kQueued);
  EXPECT_EQ(link.submit(0, 2, 1500), Fate::kQueueDrop);
}

TEST(LinkModel, EachFlowIsShapedToItsOwnRate) {
  // 8 Mbit/s per flow = 1 byte per microsecond (a 1000-byte packet every ms), a queue of 20 ms
  // per flow; the link itself is unlimited, 10 ms one way. Two flows offer 4 packets per ms
  // each for 100 ms; a packet of no flow (key 0) rides beside them.
  LinkParams p = params(10 * kMs);
  p.flow_rate_bps = 8'000'000;
  LinkModel link(p, 1);
  int queued[2] = {0, 0};
  std::uint32_t slot = 0;
  for (std::int64_t t = 0; t < 100 * kMs; t += 250 * kUs)
    for (int f = 0; f < 2; ++f)
      queued[f] += link.submit(t, slot++, 1000, nullptr, static_cast<std::uint64_t>(f + 1)) == Fate::kQueued;
  ASSERT_EQ(link.submit(50 * kMs, 99999, 1000), Fate::kQueued);
  for (int n : queued) {
    EXPECT_GE(n, 119);  // 100 ms at the rate plus the 20 ms queue, to a packet
    EXPECT_LE(n, 122);
  }
  EXPECT_GT(link.counters().flow_drops, 0u);
  // Each flow leaves one packet per ms; the unshaped packet at 50 + 10 ms, among them.
  std::vector<std::int64_t> times = drain(link, 1000 * kMs);
  ASSERT_EQ(times.size(), static_cast<size_t>(queued[0] + queued[1] + 1));
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
  EXPECT_EQ(times.front(), 11 * kMs);  // both flows' first packets
  EXPECT_EQ(times[1], 11 * kMs);
  EXPECT_NE(std::find(times.begin(), times.end(), 60 * kMs), times.end());
  EXPECT_EQ(times.back(), (10 + queued[0]) * kMs);
}

TEST(LinkModel, FlowKeyTellsTcpAndUdpFlowsApartAndIgnoresTheRest) {
  std::uint8_t pkt[40] = {0x45};
  pkt[9] = 6;                                        // TCP
  pkt[12] = 10, pkt[15] = 1, pkt[16] = 10, pkt[19] = 2;  // 10.0.0.1 -> 10.0.0.2
  pkt[20] = 0x1f, pkt[21] = 0x90, pkt[22] = 0x30, pkt[23] = 0x39;
  const std::uint64_t a = flow_key(pkt, sizeof pkt);
  EXPECT_NE(a, 0u);
  pkt[21] = 0x91;  // another source port: another flow
  EXPECT_NE(flow_key(pkt, sizeof pkt), a);
  pkt[9] = 17;  // UDP is keyed too
  EXPECT_NE(flow_key(pkt, sizeof pkt), 0u);
  pkt[9] = 1;  // ICMP is not
  EXPECT_EQ(flow_key(pkt, sizeof pkt), 0u);
  pkt[9] = 6;
  pkt[7] = 8;  // a fragment (offset 64 bytes) carries no ports
  EXPECT_EQ(flow_key(pkt, sizeof pkt), 0u);
  EXPECT_EQ(flow_key(pkt, 22), 0u);  // truncated
}

TEST(LinkModel, LongRunThroughputEqualsTheRate) {
  // Offer 200 Mbit/s to a 100 Mbit/s link for one second.
  const std::uint64_t rate = 100'000'000;
  LinkModel link(params(20 * kMs, rate, 250'000), 1);
  std::uint64_t delivered = 0;
  const std::int64_t gap = 60 * kUs;  // 1500 B every 60 us = 200 Mbit/s
  for (std::int64_t t = 0; t < 1000 * kMs; t += gap) {
    link.submit(t, 0, 1500);
    while (link.has_packets() && link.front().deliver_at <= t) {
      delivered += link.front().len;
      link.pop_delivered();
    }
  }
  // Delivered during [20 ms, 1 s): 0.98 s at the rate, within one packet.
  const double expected = 0.98 * rate / 8;
  EXPECT_NEAR(static_cast<double>(delivered), expected, 1500);
  EXPECT_GT(link.counters().queue_drops, 0u);
}

TEST(LinkModel, RandomLossMatchesTheRateAndTheSeed) {
  auto run = [](std::uint64_t seed) {
    LinkModel link(params(0, 0, 0, 0.01), seed);
    std::vector<bool> lost;
    for (std::uint32_t i = 0; i < 200'000; ++i) {
      lost.push_back(link.submit(i, i, 100) == Fate::kRandomDrop);
      drain(link, i);
    }
    return lost;
  };
  const auto a = run(42);
  const auto b = run(42);
  const auto c = run(43);
  EXPECT_EQ(a, b);  // same seed, same losses
  EXPECT_NE(a, c);
  std::size_t n = 0;
  for (bool l : a) n += l;
  // 1 % of 200000 = 2000; 4 sigma is about 180.
  EXPECT_NEAR(static_cast<double>(n), 2000.0, 180.0);
}

TEST(LinkModel, LossIsDrawnAfterTheBottleneck) {
  // A lost packet still used its slot on the wire: the next one waits for it.
  LinkParams p = params(0, 8'000'000, 100'000, 1.0);
  LinkModel link(p, 1);
  EXPECT_EQ(link.submit(0, 1, 1000), Fate::kRandomDrop);
  link.apply(LinkChange{.loss = 0.0});
  EXPECT_EQ(link.submit(0, 2, 1000), Fate::kQueued);
  EXPECT_EQ(link.front().deliver_at, 2 * kMs);
}

TEST(LinkModel, GilbertElliottProducesBurstsAtTheStationaryRate) {
  LinkParams p = params(0);
  p.ge = GilbertElliott{0.01, 0.25, 0.0, 1.0, true};
  LinkModel link(p, 7);
  const int n = 400'000;
  int lost = 0, bursts = 0;
  bool prev = false;
  for (int i = 0; i < n; ++i) {
    const bool l = link.submit(i, 0, 100) == Fate::kRandomDrop;
    drain(link, i);
    lost += l;
    bursts += l && !prev;
    prev = l;
  }
  const double rate = static_cast<double>(lost) / n;
  EXPECT_NEAR(rate, p.ge.mean_loss(), 0.004);  // 0.01 / 0.26 = 3.85 %
  EXPECT_NEAR(static_cast<double>(lost) / bursts, 1 / 0.25, 0.4);  // mean burst 1/r packets
}

TEST(LinkModel, OutageDropsArrivalsAndPacketsInFlight) {
  LinkModel link(params(10 * kMs), 1);
  ASSERT_EQ(link.submit(0, 1, 100), Fate::kQueued);
  ASSERT_EQ(link.submit(1 * kMs, 2, 100), Fate::kQueued);
  std::vector<std::uint32_t> released;
  link.cut(5 * kMs, 2005 * kMs, [&](std::uint32_t slot) { released.push_back(slot); });
  EXPECT_EQ(released, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_FALSE(link.has_packets());
  EXPECT_EQ(link.submit(1000 * kMs, 3, 100), Fate::kOutageDrop);
  EXPECT_EQ(link.submit(2005 * kMs, 4, 100), Fate::kQueued);  // the cut is over
  EXPECT_EQ(link.counters().outage_drops, 3u);
  // An open-ended cut lasts until restore().
  link.cut(3000 * kMs, LinkModel::kForever, [](std::uint32_t) {});
  EXPECT_EQ(link.submit(9000 * kMs, 5, 100), Fate::kOutageDrop);
  link.restore();
  EXPECT_EQ(link.submit(9000 * kMs, 6, 100), Fate::kQueued);
}

TEST(LinkModel, JitterNeverReorders) {
  LinkParams p = params(10 * kMs);
  p.jitter_ns = 2 * kMs;
  LinkModel link(p, 3);
  for (std::int64_t t = 0; t < 100 * kMs; t += 100 * kUs) ASSERT_EQ(link.submit(t, 0, 100), Fate::kQueued);
  std::int64_t last = 0, min_delay = INT64_MAX, max_delay = 0;
  for (std::int64_t sent = 0; link.has_packets(); sent += 100 * kUs) {
    const std::int64_t at = link.front().deliver_at;
    EXPECT_GE(at, last);
    last = at;
    min_delay = std::min(min_delay, at - sent);
    max_delay = std::max(max_delay, at - sent);
    link.pop_delivered();
  }
  EXPECT_GE(min_delay, 8 * kMs);
  EXPECT_LE(max_delay, 12 * kMs);
  EXPECT_GT(max_delay - min_delay, 1 * kMs);  // it does vary
}

TEST(LinkModel, OversizedPacketsAreDropped) {
  LinkParams p = params(0);
  p.mtu = 1500;
  LinkModel link(p, 1);
  EXPECT_EQ(link.submit(0, 1, 1501), Fate::kMtuDrop);
  EXPECT_EQ(link.submit(0, 2, 1500), Fate::kQueued);
  EXPECT_EQ(link.counters().mtu_drops, 1u);
}

TEST(LinkModel, SharedUplinkCapsTheSumOfTwoLinks) {
  // Two destinations behind one 8 Mbit/s uplink: together they get 1 byte/us.
  Bottleneck uplink(8'000'000, 1'000'000);
  LinkModel to_b(params(0), 1), to_c(params(0), 2);
  for (std::uint32_t i = 0; i < 10; ++i) {
    ASSERT_EQ(to_b.submit(0, i, 1000, &uplink), Fate::kQueued);
    ASSERT_EQ(to_c.submit(0, i, 1000, &uplink), Fate::kQueued);
  }
  EXPECT_EQ(drain(to_b, 20 * kMs).size() + drain(to_c, 20 * kMs).size(), 20u);
  EXPECT_EQ(std::max(to_b.counters().packets_out, to_c.counters().packets_out), 10u);
  EXPECT_EQ(uplink.backlog_bytes(20 * kMs), 0u);
  EXPECT_EQ(uplink.backlog_bytes(10 * kMs), 10'000u);  // 20 packets = 20 ms of serialization
}

TEST(LinkModel, RateChangeAppliesToNewPackets) {
  LinkModel link(params(0, 8'000'000, 1'000'000), 1);
  ASSERT_EQ(link.submit(0, 1, 1000), Fate::kQueued);  // leaves at 1 ms
  link.apply(LinkChange{.rate_bps = 16'000'000});
  ASSERT_EQ(link.submit(0, 2, 1000), Fate::kQueued);  // then 0.5 ms more
  EXPECT_EQ(drain(link, 10 * kMs), (std::vector<std::int64_t>{1 * kMs, 1500 * kUs}));
}

}  // namespace
}  // namespace geoccl::testbed
