// The shared-memory ring without fds: wait flags ask for exactly one wake-up, corrupt positions
// are caught, and two threads stream records of random sizes (many larger than the ring) through
// the wrap, sleeping on semaphores (the test's stand-in for the transport's eventfds) whenever the
// ring says so. A lost wake-up shows as a timed-out wait, not as a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <semaphore>
#include <thread>
#include <vector>

#include "transport/shm/ring.h"

using namespace geoccl::transport::shm;
using namespace std::chrono_literals;

namespace {

struct Mem {
  explicit Mem(size_t capacity) : data(capacity) {}
  RingControl ctl;
  std::vector<uint8_t> data;
  RingWriter writer() { return RingWriter(&ctl, data.data(), data.size()); }
  RingReader reader() { return RingReader(&ctl, data.data(), data.size()); }
};

uint8_t pattern(uint64_t record, uint64_t offset) { return static_cast<uint8_t>(record * 131 + offset * 7 + 1); }

}  // namespace

TEST(shm_ring, CapacityIsAWholeNumberOfQuanta) {
  EXPECT_EQ(ring_capacity(0), 64u);
  EXPECT_EQ(ring_capacity(64), 64u);
  EXPECT_EQ(ring_capacity(65), 128u);
  EXPECT_EQ(ring_capacity(4u << 20), 4u << 20);
}

TEST(shm_ring, AutoSizeSharesABudgetAmongThePeers) {
  // 4 MiB each up to 16 peers, then 64 MiB split among them, never under 256 KiB.
  EXPECT_EQ(auto_ring_bytes(0), kMaxAutoRing);
  EXPECT_EQ(auto_ring_bytes(1), kMaxAutoRing);
  EXPECT_EQ(auto_ring_bytes(16), kMaxAutoRing);
  EXPECT_EQ(auto_ring_bytes(32), size_t{2} << 20);
  EXPECT_EQ(auto_ring_bytes(63), ring_capacity((size_t{64} << 20) / 63));
  EXPECT_EQ(auto_ring_bytes(63) % kCapacityQuantum, 0u);
  EXPECT_EQ(auto_ring_bytes(257), kMinAutoRing);
  EXPECT_EQ(auto_ring_bytes(10000), kMinAutoRing);
  // What one rank's rings of one direction hold in all stays within the budget from 16 peers on
  // (up to the floor: 256 peers).
  for (size_t p = 16; p <= 256; ++p) EXPECT_LE(p * auto_ring_bytes(p), kRingBudget + p * kCapacityQuantum) << p;
}

TEST(shm_ring, WaitFlagsAskForOneWakeUp) {
  Mem m(256);
  RingWriter w = m.writer();
  RingReader r = m.reader();
  std::vector<uint8_t> bytes(300, 5);
  bool wake = false;
  EXPECT_EQ(w.write(std::span(bytes).first(8), 64, &wake), 8u);
  EXPECT_FALSE(wake);  // nobody asked
  EXPECT_EQ(r.arm_wait(), 8u);  // data is there: the reader does not sleep
  EXPECT_FALSE(r.consume(8));
  m.ctl.reader_waiting.store(0);

  EXPECT_EQ(r.arm_wait(), 0u);  // empty: the reader sleeps
  EXPECT_EQ(m.ctl.reader_waiting.load(), 1u);
  EXPECT_EQ(w.write(std::span(bytes).first(8), 64, &wake), 8u);
  EXPECT_TRUE(wake);
  EXPECT_EQ(m.ctl.reader_waiting.load(), 0u);  // cleared by the writer that signals
  wake = false;
  EXPECT_EQ(w.write(std::span(bytes).first(8), 64, &wake), 8u);
  EXPECT_FALSE(wake);  // one wake-up per sleep

  // The writer fills the ring (in pieces of 64), then sleeps until the reader consumes.
  EXPECT_EQ(w.write(bytes, 64, &wake), 256u - 16u);
  EXPECT_EQ(w.room(), 0u);
  EXPECT_EQ(w.arm_wait(), 8u);
  EXPECT_EQ(r.available(256), 256u);
  EXPECT_TRUE(r.consume(8));
  EXPECT_FALSE(r.consume(8));
  EXPECT_EQ(w.room(1), 16u);
  EXPECT_EQ(r.available(240), 240u);
  EXPECT_FALSE(w.corrupt());
  EXPECT_FALSE(r.corrupt());
}

TEST(shm_ring, RecordsStartAlignedAndPadOnlyWhenRoom) {
  Mem m(64);
  RingWriter w = m.writer();
  RingReader r = m.reader();
  std::vector<uint8_t> bytes(64, 1);
  bool wake = false;
  ASSERT_EQ(w.write(bytes, 64, &wake), 64u);
  ASSERT_EQ(r.available(), 64u);
  r.consume(63);
  ASSERT_EQ(w.write(std::span(bytes).first(61), 64, &wake), 61u);  // head 125: 2 bytes free
  EXPECT_EQ(w.pad(), 3u);
  EXPECT_FALSE(w.align(&wake));
  EXPECT_EQ(w.position(), 125u);
  ASSERT_EQ(r.available(62), 62u);
  r.consume(1);
  EXPECT_TRUE(w.align(&wake));
  EXPECT_EQ(w.position(), 128u);
  EXPECT_EQ(r.available(64), 64u);  // 61 bytes and the pad
  r.consume(61);
  EXPECT_EQ(r.pad(), 3u);
}

// Bytes written in place: writable() offers the free bytes up to the wrap only, advance() commits
// them (and asks for the reader's wake-up when it waits), and the reader sees them in order.
TEST(shm_ring, InPlaceWritesStopAtTheWrapAndCommitOnAdvance) {
  Mem m(64);
  RingWriter w = m.writer();
  RingReader r = m.reader();
  bool wake = false;
  auto s = w.writable(8);
  ASSERT_EQ(s.size(), 64u);
  for (size_t i = 0; i < 40; ++i) s[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(r.available(), 0u);  // nothing committed yet
  r.arm_wait();
  w.advance(40, &wake);
  EXPECT_TRUE(wake);
  ASSERT_EQ(r.available(), 40u);
  r.consume(32);
  s = w.writable(8);
  ASSERT_EQ(s.size(), 24u);  // 56 free, 24 of them before the wrap
  for (size_t i = 0; i < 24; ++i) s[i] = static_cast<uint8_t>(40 + i);
  wake = false;
  w.advance(24, &wake);
  EXPECT_FALSE(wake);
  s = w.writable(8);
  ASSERT_EQ(s.size(), 32u);  // the rest, from the ring's start
  EXPECT_EQ(s.data(), m.data.data());
  s[0] = 64;
  w.advance(1, &wake);
  std::vector<uint8_t> got(33);
  ASSERT_EQ(r.available(33), 33u);
  r.copy(got.data(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 32 + i);
  r.consume(33);
  EXPECT_EQ(w.writable(64).size(), 63u);  // head at 65: 63 bytes to the wrap, all free
}

TEST(shm_ring, CorruptPositionsAreCaught) {
  {
    Mem m(128);
    RingReader r = m.reader();
    m.ctl.head.store(129);  // more than a ring's worth ahead
    EXPECT_EQ(r.available(), 0u);
    EXPECT_TRUE(r.corrupt());
  }
  {
    Mem m(128);
    RingWriter w = m.writer();
    m.ctl.tail.store(5);  // consumed what was never written
    EXPECT_EQ(w.room(1000), 0u);
    EXPECT_TRUE(w.corrupt());
  }
}

// Records: u64 length, then the payload; each starts aligned. Sizes up to 3x the ring.
TEST(shm_ring, TwoThreadsStreamRandomRecordsThroughTheWrap) {
  constexpr size_t kCap = 15 * 64;  // not a power of two
  constexpr int kRecords = 3000;
  Mem m(kCap);
  std::counting_semaphore<> wake_writer(0), wake_reader(0);
  std::atomic<int> writer_sleeps{0}, reader_sleeps{0};
  std::atomic<bool> lost{false};

  std::thread reader([&] {
    RingReader r = m.reader();
    std::mt19937_64 rng(2);
    auto wait_for = [&](size_t want) {
      while (r.available(want) < want) {
        if (r.arm_wait() >= want) break;
        ++reader_sleeps;
        if (!wake_reader.try_acquire_for(10s)) {
          lost = true;
          return false;
        }
      }
      return true;
    };
    for (uint64_t rec = 0; rec < kRecords; ++rec) {
      const size_t pad = r.pad();
      if (!wait_for(pad + 8)) return;
      if (pad && r.consume(pad)) wake_writer.release();
      uint64_t len = 0;
      r.copy(&len, sizeof len);
      if (r.consume(sizeof len)) wake_writer.release();
      ASSERT_EQ(r.position() % 8, 0u) << "payload of record " << rec << " is not aligned";
      uint64_t got = 0;
      while (got < len) {
        if (!wait_for(1)) return;
        auto span = r.peek();
        // Take a random part of what is there: pieces end anywhere, not only at commits.
        size_t n = std::min<size_t>(span.size(), len - got);
        if (rng() % 2) n = 1 + rng() % n;
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(span[i], pattern(rec, got + i)) << "record " << rec << " byte " << got + i;
        got += n;
        if (r.consume(n)) wake_writer.release();
      }
    }
  });
  // The reader finds the ring empty first and sleeps.
  while (m.ctl.reader_waiting.load() == 0) std::this_thread::yield();

  RingWriter w = m.writer();
  std::mt19937_64 rng(1);
  std::vector<uint8_t> payload;
  auto write_all = [&](std::span<const uint8_t> bytes, bool pad_first) {
    size_t done = 0;
    bool padded = !pad_first;
    while (done < bytes.size() || !padded) {
      bool wake = false;
      if (!padded) padded = w.align(&wake);
      if (padded) done += w.write(bytes.subspan(done), 1 + rng() % kCap, &wake);
      if (wake) wake_reader.release();
      if (done == bytes.size() && padded) break;
      if (w.room(8) >= 8) continue;
      const uint64_t consumed = w.arm_wait();
      if (kCap - (w.position() - consumed) >= 8) continue;
      ++writer_sleeps;
      if (!wake_writer.try_acquire_for(10s)) {
        lost = true;
        return false;
      }
    }
    return true;
  };
  for (uint64_t rec = 0; rec < kRecords && !lost; ++rec) {
    const size_t kind = rng() % 4;
    const uint64_t len = kind == 0 ? rng() % 16 : kind == 1 ? rng() % (3 * kCap) : rng() % 200;
    payload.resize(len);
    for (size_t i = 0; i < len; ++i) payload[i] = pattern(rec, i);
    const auto lb = std::span(reinterpret_cast<const uint8_t*>(&len), sizeof len);
    if (!write_all(lb, true) || !write_all(payload, false)) break;
  }
  reader.join();
  EXPECT_FALSE(lost) << "a wake-up was lost";
  EXPECT_FALSE(w.corrupt());
  EXPECT_GT(reader_sleeps.load(), 0);
  RecordProperty("writer_sleeps", writer_sleeps.load());
  RecordProperty("reader_sleeps", reader_sleeps.load());
}
