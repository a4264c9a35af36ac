// The per-peer protocol state without sockets (src/protocol/peer_session.h): numbering, the
// receive window, when acknowledgements are due, delivery, and the kept copies a broken stream
// re-sends exactly once. Time plays no part: acks follow bytes and pending receives only.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "protocol/peer_session.h"

using geoccl::protocol::FrameHeaderBytes;
using geoccl::protocol::PeerSession;

namespace {

struct SessionRecv {
  int id = -1;
};
using Session = PeerSession<SessionRecv, std::shared_ptr<int>>;

FrameHeaderBytes header_of(uint64_t frame) {
  FrameHeaderBytes h{};
  h[0] = static_cast<uint8_t>(frame);
  return h;
}

}  // namespace

TEST(PeerSession, NumbersFramesInPostingOrder) {
  Session s;
  EXPECT_EQ(s.number_frame(), 0u);
  EXPECT_EQ(s.number_frame(), 1u);
  EXPECT_EQ(s.frames_numbered(), 2u);
}

TEST(PeerSession, AcksDeliverInFrameOrderAndForget) {
  Session s;
  std::vector<uint8_t> payload(100, 1);
  std::vector<std::shared_ptr<int>> tokens;
  for (int i = 0; i < 5; ++i) tokens.push_back(std::make_shared<int>(i));
  // Written out of order (striped streams finish in any order).
  for (int f : {2, 0, 1, 4, 3})
    EXPECT_FALSE(s.written(static_cast<uint64_t>(f), f % 2 + 1, header_of(f), payload, tokens[static_cast<size_t>(f)]));
  EXPECT_EQ(s.unacked_frames(), 5u);
  EXPECT_EQ(s.kept_bytes(), 0u);  // copies off: nothing copied
  std::vector<int> delivered;
  s.acked(3, [&](std::shared_ptr<int>& t) { delivered.push_back(*t); });
  EXPECT_EQ(delivered, (std::vector<int>{0, 1, 2}));
  s.acked(2, [&](std::shared_ptr<int>&) { ADD_FAILURE() << "acks never go backwards"; });
  EXPECT_EQ(s.unacked_frames(), 2u);
  // A frame written after its ack (a re-sent copy that raced the ack) is delivered at once.
  s.acked(10, [&](std::shared_ptr<int>& t) { delivered.push_back(*t); });
  EXPECT_TRUE(s.written(7, 1, header_of(7), payload, std::make_shared<int>(7)));
  EXPECT_EQ(s.unacked_frames(), 0u);
  EXPECT_EQ(delivered, (std::vector<int>{0, 1, 2, 3, 4}));
}

// QUIC acknowledges each frame on its own, in any order: the session forgets exactly that frame
// and its copy (shared with the sender, not copied), and keeps the rest in frame order for a
// new connection.
TEST(PeerSession, FramesAcknowledgedOneByOneInAnyOrder) {
  Session s;
  s.set_keep_copies(true);
  for (uint64_t f = 0; f < 4; ++f) {
    auto copy = std::make_shared<std::vector<uint8_t>>(10 + f, 1);
    EXPECT_FALSE(s.written(f, 0, header_of(f), *copy, std::make_shared<int>(static_cast<int>(f)), copy));
  }
  EXPECT_EQ(s.kept_bytes(), 10u + 11 + 12 + 13);
  EXPECT_TRUE(s.delivered(2));
  EXPECT_FALSE(s.delivered(2));  // once
  EXPECT_TRUE(s.delivered(0));
  EXPECT_EQ(s.kept_bytes(), 11u + 13);
  std::vector<uint64_t> left;
  for (const auto& [frame, k] : s.unacked()) {
    left.push_back(frame);
    EXPECT_EQ(*k.token, static_cast<int>(frame));
    EXPECT_EQ(k.copy->size(), 10 + frame);
  }
  EXPECT_EQ(left, (std::vector<uint64_t>{1, 3}));
}

TEST(PeerSession, BrokenStreamGivesBackItsCopiesInOrder) {
  Session s;
  s.set_keep_copies(true);
  std::vector<std::vector<uint8_t>> payloads;
  for (int f = 0; f < 6; ++f) payloads.emplace_back(static_cast<size_t>(10 + f), static_cast<uint8_t>(f));
  for (int f = 0; f < 6; ++f) s.written(static_cast<uint64_t>(f), f % 2 + 1, header_of(f), payloads[static_cast<size_t>(f)], nullptr);
  EXPECT_EQ(s.kept_bytes(), 10u + 11 + 12 + 13 + 14 + 15);
  // The caller's memory may change once the frame is written: the copy must not.
  payloads[3].assign(payloads[3].size(), 0xee);
  s.acked(2, [](auto&) {});
  auto kept = s.take_kept(2);  // frames 1, 3, 5 went on stream 2; 1 is acknowledged
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].frame, 3u);
  EXPECT_EQ(kept[1].frame, 5u);
  EXPECT_EQ(*kept[0].copy, std::vector<uint8_t>(13, 3));
  EXPECT_EQ(kept[0].header, header_of(3));
  EXPECT_EQ(s.unacked_frames(), 2u);  // 2 and 4 on stream 1 stay
  // Re-written on the new socket: kept again with the same copy, not copied twice.
  const auto* storage = kept[0].copy.get();
  s.written(3, 2, kept[0].header, *kept[0].copy, nullptr, kept[0].copy);
  auto again = s.take_kept(2);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].copy.get(), storage);
  s.set_keep_copies(false);
  s.written(9, 1, header_of(9), payloads[0], nullptr);
  EXPECT_EQ(s.take_kept(1).front().copy, nullptr);
}

TEST(PeerSession, AcksAreDueEveryFewMiBAndAtTheEndOfAnOperation) {
  Session s;
  auto& w = s.window();
  for (int i = 0; i < 8; ++i) w.post(SessionRecv{i});
  // Frames of 1 MiB: with receives still pending, an ack every 4 MiB.
  std::vector<uint64_t> acks;
  for (uint64_t f = 0; f < 8; ++f) {
    w.complete(f);
    if (auto a = s.received(1 << 20)) acks.push_back(*a);
  }
  // After frame 3 (4 MiB) and after the last one (nothing pending).
  EXPECT_EQ(acks, (std::vector<uint64_t>{4, 8}));
  // Nothing new: no ack.
  EXPECT_FALSE(s.received(0).has_value());
  // Small frames, none pending after each: every one is acknowledged.
  w.post(SessionRecv{});
  w.complete(8);
  EXPECT_EQ(s.received(16), std::optional<uint64_t>(9));
}

// Random: frames written on random streams, random acks and random stream breaks; every frame is
// delivered exactly once and every kept copy is given back exactly once per break.
TEST(PeerSession, RandomBreaksLoseNothingAndDeliverOnce) {
  std::mt19937_64 rng(7);
  Session s;
  s.set_keep_copies(true);
  std::multiset<uint64_t> delivered;
  std::vector<std::vector<Session::Kept>> resend(4);
  uint64_t next = 0, receiver_has = 0;
  for (int step = 0; step < 5000; ++step) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 6) {
      const uint64_t f = next++;
      std::vector<uint8_t> p(rng() % 32, static_cast<uint8_t>(f));
      s.written(f, 1 + static_cast<int>(rng() % 3), header_of(f), p, std::make_shared<int>(static_cast<int>(f)));
    } else if (what < 8) {
      receiver_has = std::min(next, receiver_has + rng() % 8);
      s.acked(receiver_has, [&](std::shared_ptr<int>& t) { delivered.insert(static_cast<uint64_t>(*t)); });
    } else if (what == 8) {
      const int st = 1 + static_cast<int>(rng() % 3);
      for (auto& k : s.take_kept(st)) {
        EXPECT_EQ(*k.copy, std::vector<uint8_t>(k.copy->size(), static_cast<uint8_t>(k.frame)));
        resend[static_cast<size_t>(st)].push_back(std::move(k));
      }
    } else {  // the stream is back: its copies are written again, on any stream
      for (auto& v : resend)
        for (auto& k : v)
          if (s.written(k.frame, 1 + static_cast<int>(rng() % 3), k.header, *k.copy, k.token, k.copy))
            delivered.insert(k.frame);
      for (auto& v : resend) v.clear();
    }
  }
  for (auto& v : resend)
    for (auto& k : v)
      if (s.written(k.frame, 1, k.header, *k.copy, k.token, k.copy)) delivered.insert(k.frame);
  s.acked(next, [&](std::shared_ptr<int>& t) { delivered.insert(static_cast<uint64_t>(*t)); });
  ASSERT_EQ(delivered.size(), next);
  uint64_t f = 0;
  for (uint64_t d : delivered) EXPECT_EQ(d, f++);
  EXPECT_EQ(s.kept_bytes(), 0u);
}
