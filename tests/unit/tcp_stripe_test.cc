// Striping without sockets: frames of one peer spread over S streams, arriving in random chunk
// orders, are reassembled in place at their destinations (src/transport/tcp/stripe.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "protocol/recv_window.h"
#include "transport/tcp/stripe.h"

using geoccl::transport::tcp::pick_stream;
using geoccl::protocol::RecvWindow;

namespace {

struct Recv {
  std::span<uint8_t> dst;
  int id = -1;
};

struct Frame {
  uint64_t number;
  std::span<const uint8_t> payload;
};

// One stream as the receiver sees it: frames in the order the sender put them on it, and how
// much of the head frame has been read.
struct Stream {
  std::deque<Frame> frames;
  size_t got = 0;
};

// Sends `src` cut into frames of at most `frame_bytes`, spread over `streams` streams by
// `choose(frame, backlog)`, and receives them into `dst` with receives posted progressively and
// streams read in random-size chunks in random interleavings. Returns the number of frames.
template <class Choose>
size_t run(std::mt19937_64& rng, std::span<const uint8_t> src, std::span<uint8_t> dst,
           size_t frame_bytes, size_t streams, Choose choose) {
  std::vector<Stream> wire(streams);
  std::vector<uint64_t> backlog(streams, 0);
  size_t frames = 0;
  for (size_t off = 0; off < src.size(); off += frame_bytes, ++frames) {
    const size_t len = std::min(frame_bytes, src.size() - off);
    const size_t s = choose(frames, backlog);
    backlog[s] += len;
    wire[s].frames.push_back({frames, src.subspan(off, len)});
  }

  RecvWindow<Recv> window;
  size_t posted_bytes = 0, completed = 0;
  std::vector<bool> done(frames, false);
  auto post_one = [&] {
    const size_t len = std::min(frame_bytes, dst.size() - posted_bytes);
    const int id = static_cast<int>(window.next_frame());
    EXPECT_EQ(window.post(Recv{dst.subspan(posted_bytes, len), id}), static_cast<uint64_t>(id));
    posted_bytes += len;
  };
  // Receives are posted a few at a time, like a pipelined collective does.
  std::uniform_int_distribution<size_t> stream_pick(0, streams - 1);
  while (completed < frames) {
    if (posted_bytes < dst.size() && (rng() % 3 == 0 || !window.pending())) post_one();
    Stream& st = wire[stream_pick(rng)];
    if (st.frames.empty()) continue;
    const Frame& f = st.frames.front();
    const auto where = window.lookup(f.number);
    EXPECT_NE(where, RecvWindow<Recv>::Lookup::kStale);
    if (where != RecvWindow<Recv>::Lookup::kPosted) continue;  // the stream stalls
    Recv& r = window.at(f.number);
    EXPECT_EQ(r.dst.size(), f.payload.size());
    const size_t left = f.payload.size() - st.got;
    const size_t chunk = left == 0 ? 0 : 1 + rng() % left;
    std::memcpy(r.dst.data() + st.got, f.payload.data() + st.got, chunk);  // "recv()" in place
    st.got += chunk;
    if (st.got < f.payload.size()) continue;
    const Recv out = window.complete(f.number);
    EXPECT_EQ(out.id, static_cast<int>(f.number));
    EXPECT_FALSE(done[f.number]);
    done[f.number] = true;
    EXPECT_EQ(window.lookup(f.number), RecvWindow<Recv>::Lookup::kStale);
    st.frames.pop_front();
    st.got = 0;
    ++completed;
  }
  EXPECT_FALSE(window.pending());
  return frames;
}

}  // namespace

TEST(TcpStripe, ReassemblesUnderRandomArrivalOrders) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t bytes = 1 + rng() % (256 * 1024);
    const size_t frame_bytes = 1 + rng() % 8192;
    const size_t streams = 1 + rng() % 8;
    std::vector<uint8_t> src(bytes), dst(bytes, 0);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    // Random placement: any assignment of frames to streams must reassemble.
    run(rng, src, dst, frame_bytes, streams,
        [&](size_t, const std::vector<uint64_t>&) { return static_cast<size_t>(rng() % streams); });
    ASSERT_EQ(src, dst) << "trial " << trial << " bytes " << bytes << " frame " << frame_bytes
                        << " streams " << streams;
  }
}

TEST(TcpStripe, LeastBacklogPlacementReassembles) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t bytes = 1 + rng() % (1 << 20);
    const size_t streams = 1 + rng() % 8;
    std::vector<uint8_t> src(bytes), dst(bytes, 0);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    size_t rot = 0;
    run(rng, src, dst, 4096 + rng() % 65536, streams, [&](size_t, const std::vector<uint64_t>& q) {
      const size_t i = pick_stream(q, rot);
      rot = i + 1;
      return i;
    });
    ASSERT_EQ(src, dst) << "trial " << trial;
  }
}

TEST(TcpStripe, PickStreamTakesLeastBacklogAndRotatesTies) {
  const std::vector<uint64_t> idle(4, 0);
  EXPECT_EQ(pick_stream(idle, 0), 0u);
  EXPECT_EQ(pick_stream(idle, 1), 1u);
  EXPECT_EQ(pick_stream(idle, 5), 1u);
  // A slow stream (large backlog) is avoided; the least loaded wins wherever the rotation is.
  const std::vector<uint64_t> q{1 << 20, 300, 4096, 300};
  EXPECT_EQ(pick_stream(q, 0), 1u);
  EXPECT_EQ(pick_stream(q, 2), 3u);
  EXPECT_EQ(pick_stream(q, 3), 3u);
  // A stalled stream stops receiving frames while the others drain.
  std::vector<uint64_t> backlog{0, 0, 0};
  size_t rot = 0;
  int to_slow = 0;
  for (int k = 0; k < 300; ++k) {
    const size_t i = pick_stream(backlog, rot);
    rot = i + 1;
    backlog[i] += 1000;
    if (i == 0) ++to_slow;
    // Streams 1 and 2 send 1000 bytes per step; stream 0 only 100.
    backlog[0] -= std::min<uint64_t>(backlog[0], 100);
    for (size_t j = 1; j < 3; ++j) backlog[j] -= std::min<uint64_t>(backlog[j], 1000);
  }
  EXPECT_LT(to_slow, 40);  // round robin would give it 100; its drain rate share is ~1/21
}

TEST(TcpStripe, WindowDrainAndStaleFrames) {
  RecvWindow<Recv> w;
  std::vector<uint8_t> buf(8);
  EXPECT_EQ(w.post(Recv{std::span<uint8_t>(buf).subspan(0, 4), 0}), 0u);
  EXPECT_EQ(w.post(Recv{std::span<uint8_t>(buf).subspan(4, 4), 1}), 1u);
  EXPECT_EQ(w.lookup(2), RecvWindow<Recv>::Lookup::kNotPosted);
  // Frame 1 completes before frame 0: numbering and the slots of frame 0 are kept.
  EXPECT_EQ(w.complete(1).id, 1);
  EXPECT_EQ(w.lookup(1), RecvWindow<Recv>::Lookup::kStale);
  EXPECT_EQ(w.lookup(0), RecvWindow<Recv>::Lookup::kPosted);
  EXPECT_TRUE(w.pending());
  int failed = 0;
  w.drain([&](Recv& r) { failed += r.id == 0; });
  EXPECT_EQ(failed, 1);
  EXPECT_FALSE(w.pending());
  EXPECT_EQ(w.next_frame(), 2u);
  EXPECT_EQ(w.lookup(0), RecvWindow<Recv>::Lookup::kStale);
}
