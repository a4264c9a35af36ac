// Sealing and opening on worker threads (security/crypto_lane.h), without sockets: the workers'
// bytes are FrameSealer's; frames sealed by FrameSealer open on them, in place, and a changed
// record leaves zeros; a cancelled job touches neither the payload nor the destination (the pool
// is held busy so that the jobs are queued when they are cancelled); the loop is woken when what
// it waits for is ready.
#include <gtest/gtest.h>

#include <sodium.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "protocol/frame.h"
#include "runtime/worker_pool.h"
#include "security/crypto_lane.h"
#include "security/sealer.h"
#include "security/secret.h"

using namespace geoccl;
using namespace geoccl::security;
using namespace std::chrono_literals;

namespace {

class Lane : public ::testing::TestWithParam<uint8_t> {
 protected:
  void SetUp() override {
    init_sodium();
    if (GetParam() == kCipherAes256Gcm && !crypto_aead_aes256gcm_is_available()) GTEST_SKIP() << "no AES-NI";
    randombytes_buf(conn_.data(), conn_.size());
    randombytes_buf(pair_.data(), pair_.size());
  }
  // A data frame's header bytes.
  static protocol::FrameHeaderBytes header(uint64_t frame, size_t n) {
    protocol::FrameHeader h;
    h.frame = frame;
    h.payload_len = static_cast<uint32_t>(n);
    return protocol::encode_frame_header(h);
  }
  static std::vector<uint8_t> random_bytes(size_t n) {
    std::vector<uint8_t> v(n);
    randombytes_buf(v.data(), v.size());
    return v;
  }
  // Counts wake-ups; wait_for(n) until there were n.
  struct Wakes {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> n{0};
    std::function<void()> fn() {
      return [this] {
        std::lock_guard<std::mutex> l(mu);
        ++n;
        cv.notify_all();
      };
    }
    bool wait_for(int want) {
      std::unique_lock<std::mutex> l(mu);
      return cv.wait_for(l, 20s, [&] { return n >= want; });
    }
  };
  // Holds every worker of a pool busy until release().
  struct Hold {
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    int started = 0;
    void occupy(runtime::WorkerPool& pool) {
      for (int i = 0; i < pool.threads(); ++i)
        pool.submit([this] {
          std::unique_lock<std::mutex> l(mu);
          ++started;
          cv.notify_all();
          cv.wait(l, [&] { return go; });
        });
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return started == pool.threads(); });
    }
    void release() {
      std::lock_guard<std::mutex> l(mu);
      go = true;
      cv.notify_all();
    }
  };
  // Hands records [0, records) of sealed payload `wire` over to `lane` as the connection reads
  // them: each record's ciphertext into the destination, its tag beside it.
  static void hand_over(CryptoLane& lane, const std::shared_ptr<CryptoLane::Opening>& o,
                        const std::vector<uint8_t>& wire, size_t records) {
    const size_t n = o->dst().size();
    for (uint32_t i = 0; i < records; ++i) {
      const size_t p = record_plain_size(n, i);
      const auto at = wire.begin() + static_cast<std::ptrdiff_t>(record_wire_offset(i));
      std::copy_n(at, p, o->dst().begin() + static_cast<std::ptrdiff_t>(i * kRecordBytes));
      std::copy_n(at + static_cast<std::ptrdiff_t>(p), kTagBytes, o->tag(i).begin());
      lane.open_record(o, i);
    }
  }
  Key conn_{}, pair_{};
};

TEST_P(Lane, SealedBytesAreTheSealersAndReadyInOrder) {
  runtime::WorkerPool pool(2, "test-seal");
  Wakes wakes;
  CryptoLane lane(pool, GetParam(), pair_, pair_, wakes.fn());
  FrameSealer sealer(GetParam(), conn_, pair_);
  for (size_t n : {kRecordBytes, kRecordBytes + 1, 5 * kRecordBytes + 7}) {
    const auto hb = header(n, n);
    const auto plain = random_bytes(n);
    std::vector<uint8_t> want(sealed_payload_size(n));
    sealer.seal(hb, plain, want.data());
    lane.woken();
    auto s = lane.seal(hb, plain);
    ASSERT_EQ(s->size(), want.size());
    // The loop has written the header tag and waits for more: it is woken until more is there
    // (a wake-up is a hint: the loop looks again).
    for (int seen = wakes.n; !lane.more_sealed(*s, kTagBytes); ++seen) {
      ASSERT_TRUE(wakes.wait_for(seen + 1));
      lane.woken();
    }
    EXPECT_GT(s->ready(), kTagBytes);
    lane.woken();
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (s->ready() < s->size() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(s->ready(), s->size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), s->wire().get())) << n << " bytes";
  }
}

TEST_P(Lane, FramesOpenInPlaceAndAChangedRecordLeavesZeros) {
  runtime::WorkerPool pool(2, "test-open");
  Wakes wakes;
  CryptoLane lane(pool, GetParam(), pair_, pair_, wakes.fn());
  FrameSealer sealer(GetParam(), conn_, pair_);
  constexpr size_t n = 4 * kRecordBytes + 3;
  const auto plain = random_bytes(n);
  // Frame 0 intact, frame 1 with one bit of record 2 flipped.
  std::vector<std::vector<uint8_t>> dst(2, std::vector<uint8_t>(n));
  std::vector<std::shared_ptr<CryptoLane::Opening>> frames;
  for (uint64_t f = 0; f < 2; ++f) {
    const auto hb = header(f, n);
    std::vector<uint8_t> wire(sealed_payload_size(n));
    sealer.seal(hb, plain, wire.data());
    if (f == 1) wire[record_wire_offset(2) + 10] ^= 0x04;
    auto o = lane.begin_open(hb, dst[f]);
    EXPECT_EQ(o->frame(), f);
    hand_over(lane, o, wire, record_count(n));
    frames.push_back(o);
  }
  std::vector<std::shared_ptr<CryptoLane::Opening>> opened;
  for (int woken = 1; opened.size() < 2; ++woken) {
    ASSERT_TRUE(wakes.wait_for(woken)) << "no wake-up for an opened frame";
    lane.woken();
    for (auto& o : lane.take_opened()) opened.push_back(o);
  }
  EXPECT_EQ(lane.opening(), 0u);
  std::sort(opened.begin(), opened.end(), [](const auto& a, const auto& b) { return a->frame() < b->frame(); });
  EXPECT_TRUE(opened[0]->ok());
  EXPECT_EQ(dst[0], plain);
  EXPECT_FALSE(opened[1]->ok());
  // The changed record is zeros; the others opened (verified) to the plaintext.
  for (uint32_t i = 0; i < record_count(n); ++i) {
    const auto at = dst[1].begin() + static_cast<std::ptrdiff_t>(i * kRecordBytes);
    const auto p = static_cast<std::ptrdiff_t>(record_plain_size(n, i));
    if (i == 2)
      EXPECT_TRUE(std::all_of(at, at + p, [](uint8_t b) { return b == 0; }));
    else
      EXPECT_TRUE(std::equal(at, at + p, plain.begin() + static_cast<std::ptrdiff_t>(i * kRecordBytes)));
  }
}

TEST_P(Lane, CancelledJobsTouchNeitherPayloadNorDestination) {
  runtime::WorkerPool pool(1, "test-cancel");
  Wakes wakes;
  CryptoLane lane(pool, GetParam(), pair_, pair_, wakes.fn());
  FrameSealer sealer(GetParam(), conn_, pair_);
  constexpr size_t n = 3 * kRecordBytes;
  const auto plain = random_bytes(n);
  std::vector<uint8_t> wire(sealed_payload_size(n));
  sealer.seal(header(7, n), plain, wire.data());
  Hold hold;
  hold.occupy(pool);  // the lane's jobs queue behind it
  auto s = lane.seal(header(8, n), plain);
  std::vector<uint8_t> dst(n);
  auto o = lane.begin_open(header(7, n), dst);
  hand_over(lane, o, wire, record_count(n));
  lane.cancel_seals();
  lane.cancel_opens();
  // The frame being opened is forgotten, and its ciphertext is not left in the destination.
  EXPECT_EQ(lane.opening(), 0u);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0; }));
  std::fill(dst.begin(), dst.end(), 0x5a);  // the caller reuses it at once
  hold.release();
  // The queued jobs run now, and return without sealing or opening anything: a job submitted
  // after them runs after them.
  std::atomic<bool> after{false};
  pool.submit([&] { after = true; });
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!after && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(after);
  EXPECT_EQ(s->ready(), 0u);
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t b) { return b == 0x5a; }));
  EXPECT_TRUE(lane.take_opened().empty());
  EXPECT_EQ(wakes.n, 0);
}

// A stream broke (or ended) with records still queued: settle_opens waits for them (it is called
// while the pool is held busy, and returns once a helper thread lets the pool go); the frame read
// in full completes, the one cut short is zeroed and forgotten, and a cut frame with a changed
// record is reported (a break right behind a changed record does not hide it).
TEST_P(Lane, SettlingWaitsForHandedRecordsAndReportsAChangedOne) {
  runtime::WorkerPool pool(1, "test-settle");
  Wakes wakes;
  CryptoLane lane(pool, GetParam(), pair_, pair_, wakes.fn());
  FrameSealer sealer(GetParam(), conn_, pair_);
  constexpr size_t n = 3 * kRecordBytes;
  const auto plain = random_bytes(n);
  std::vector<std::vector<uint8_t>> dst(3, std::vector<uint8_t>(n));
  // Frame 0 whole; frames 1 and 2 cut after two records, frame 2's second record changed.
  const size_t handed[3] = {3, 2, 2};
  Hold hold;
  hold.occupy(pool);
  for (uint64_t f = 0; f < 3; ++f) {
    const auto hb = header(f, n);
    std::vector<uint8_t> wire(sealed_payload_size(n));
    sealer.seal(hb, plain, wire.data());
    if (f == 2) wire[record_wire_offset(1) + 5] ^= 0x01;
    auto o = lane.begin_open(hb, dst[f]);
    hand_over(lane, o, wire, handed[f]);
  }
  std::thread release([&] {
    std::this_thread::sleep_for(50ms);
    hold.release();
  });
  lane.settle_opens();  // returns only when every handed record was opened
  release.join();
  auto got = lane.take_opened();
  std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a->frame() < b->frame(); });
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0]->frame(), 0u);
  EXPECT_TRUE(got[0]->ok());
  EXPECT_EQ(dst[0], plain);
  EXPECT_EQ(got[1]->frame(), 2u);
  EXPECT_FALSE(got[1]->ok());
  EXPECT_TRUE(std::all_of(dst[1].begin(), dst[1].end(), [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::all_of(dst[2].begin(), dst[2].end(), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(lane.opening(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ciphers, Lane, ::testing::Values(kCipherAes256Gcm, kCipherXChaCha20Poly1305),
                         [](const auto& info) { return std::string(cipher_name(info.param)); });

}  // namespace
