// The contract every transport keeps (transport/device.h), checked by the same cases against each
// of them: TCP and shared memory with and without the group secret, and QUIC. A transport is done
// when it passes this suite. Every wait is bounded; no case depends on timing: where a case needs
// frames to arrive before their receives, it waits until the sends are done first.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "geoccl/error.h"
#include "protocol/frame.h"
#include "requests.h"
#include "runtime/event_loop.h"
#include "security/secret.h"
#include "transport/device.h"
#include "transport/group.h"
#include "transport/quic/device.h"
#include "transport/shm/device.h"
#include "transport/tcp/device.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::Device;
using transport::RequestPtr;
using test_support::wait_for;

// A named namespace: in a unity build, other test files' anonymous helpers (Rank, header) share
// this translation unit.
namespace conformance {

struct Kind {
  std::string name;
  bool secret = false;
  std::function<std::unique_ptr<Device>(transport::Group&)> make;
};

// gtest names a case's parameter by this (not by its bytes).
void PrintTo(const Kind& k, std::ostream* os) { *os << k.name; }

std::vector<Kind> kinds() {
  auto tcp = [](transport::Group& g) { return std::make_unique<transport::tcp::TcpDevice>(g, "127.0.0.1", transport::tcp::TcpOptions{}); };
  auto shm = [](transport::Group& g) { return std::make_unique<transport::shm::ShmDevice>(g, transport::shm::ShmOptions{}); };
  auto quic = [](transport::Group& g) { return std::make_unique<transport::quic::QuicDevice>(g, "127.0.0.1", transport::quic::QuicOptions{}); };
  return {{"tcp", false, tcp}, {"tcp_secret", true, tcp}, {"shm", false, shm}, {"shm_secret", true, shm}, {"quic", false, quic}};
}

// One rank: its loop, its group and its device of the kind under test.
struct Rank {
  runtime::EventLoop loop;
  transport::Group group;
  std::unique_ptr<Device> dev;
  Rank(const Kind& k, int r, int n, const std::string& secret)
      : loop("conformance"), group(loop, r, n, 42, 7, [] {}) {
    if (k.secret) group.set_security(test_support::job_key_of(secret));
    dev = k.make(group);
  }
  ~Rank() {
    if (dev) dev->shutdown();
    dev.reset();
  }
};

// `n` ranks of one kind, connected to each other. Ranks whose secret differs from the others'
// (`secret_of`) are strangers to them.
struct Job {
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::string> errors;  // each rank's connect error, "" when it connected
  Job(const Kind& k, int n, const std::function<std::string(int)>& secret_of = [](int) { return std::string("the conformance suite's secret"); },
      std::chrono::seconds limit = 20s) {
    for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<Rank>(k, r, n, secret_of(r)));
    std::vector<std::vector<uint8_t>> addrs;
    for (auto& r : ranks) addrs.push_back(r->dev->address());
    errors.resize(static_cast<size_t>(n));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        std::vector<int> peers;
        for (int q = 0; q < n; ++q)
          if (q != r) peers.push_back(q);
        try {
          ranks[static_cast<size_t>(r)]->dev->connect(peers, [&](int q) { return addrs[static_cast<size_t>(q)]; }, {}, deadline);
        } catch (const Error& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    for (auto& t : ts) t.join();
  }
  bool connected() const {
    for (const auto& e : errors)
      if (!e.empty()) return false;
    return true;
  }
  Device& dev(int r) { return *ranks[static_cast<size_t>(r)]->dev; }
  transport::Group& group(int r) { return ranks[static_cast<size_t>(r)]->group; }
};

protocol::FrameHeader header(uint64_t seq, size_t bytes, uint32_t tag = 0) {
  protocol::FrameHeader h;
  h.kind = protocol::OpKind::kSendRecv;
  h.seq = seq;
  h.tag = tag;
  h.op_bytes = bytes;
  return h;
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// A message: its bytes, where they land, and its requests.
struct Msg {
  std::vector<uint8_t> src, dst;
  RequestPtr send, recv;
};

class Conformance : public ::testing::TestWithParam<Kind> {};

// Frames of every size class, zero bytes and several MiB included, arrive intact and in posting
// order per peer, each completing its receive with its size and its send twice: done, then
// delivered (acknowledged by the peer).
TEST_P(Conformance, FramesOfEverySizeArriveIntactInOrder) {
  Job job(GetParam(), 2);
  ASSERT_TRUE(job.connected()) << job.errors[0] << " / " << job.errors[1];
  const std::vector<size_t> sizes = {0, 1, 63, 4096, 65536, 65537, (1u << 20) + 3, 8u << 20, 0, 17};
  std::vector<Msg> m(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    m[i].src = pattern(sizes[i], i);
    m[i].dst.assign(sizes[i], 0xee);
  }
  // Receives from one peer match its frames in posting order: the first half is posted before
  // the sends, the rest after.
  const size_t half = sizes.size() / 2;
  for (size_t i = 0; i < half; ++i) m[i].recv = job.dev(1).recv(0, header(i, sizes[i]), m[i].dst);
  for (size_t i = 0; i < sizes.size(); ++i) m[i].send = job.dev(0).send(1, header(i, sizes[i]), m[i].src);
  for (size_t i = half; i < sizes.size(); ++i) m[i].recv = job.dev(1).recv(0, header(i, sizes[i]), m[i].dst);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(wait_for({m[i].recv}, 60s)) << "receive " << i;
    ASSERT_TRUE(m[i].recv->ok()) << m[i].recv->failure.message;
    EXPECT_EQ(m[i].recv->bytes, sizes[i]) << "frame " << i;
    EXPECT_EQ(m[i].dst, m[i].src) << "frame " << i;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(wait_for({m[i].send}, 60s, /*delivered=*/true)) << "send " << i << " not acknowledged";
    EXPECT_TRUE(m[i].send->done.load());
    EXPECT_TRUE(m[i].send->ok()) << m[i].send->failure.message;
  }
}

// Three ranks send to each other at once, both ways on every pair: each frame reaches the
// receive that names its sender and sequence number, whatever the interleaving.
TEST_P(Conformance, EveryPairBothWaysAtOnce) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  constexpr int kFrames = 12;
  std::vector<Msg> m;
  m.reserve(3 * 2 * kFrames);
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      for (int i = 0; a != b && i < kFrames; ++i) {
        Msg& x = m.emplace_back();
        const size_t n = static_cast<size_t>((a * 7 + b * 3 + i * 40503) % 300000);
        x.src = pattern(n, static_cast<uint64_t>(a * 1000 + b * 100 + i));
        x.dst.assign(n, 0);
        x.recv = job.dev(b).recv(a, header(static_cast<uint64_t>(i), n), x.dst);
        x.send = job.dev(a).send(b, header(static_cast<uint64_t>(i), n), x.src);
      }
  for (auto& x : m) {
    ASSERT_TRUE(wait_for({x.recv, x.send}, 60s));
    ASSERT_TRUE(x.recv->ok()) << x.recv->failure.message;
    EXPECT_EQ(x.dst, x.src);
  }
}

// Frames whose receives are posted only after the sends completed wait at the receiver, and a
// receive larger than its frame gets the frame's actual size.
TEST_P(Conformance, EarlyFramesWaitForTheirReceives) {
  Job job(GetParam(), 2);
  ASSERT_TRUE(job.connected());
  std::vector<Msg> m(8);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i].src = pattern(1000 * i + 5, 50 + i);
    m[i].send = job.dev(1).send(0, header(i, m[i].src.size()), m[i].src);
  }
  for (auto& x : m) ASSERT_TRUE(wait_for({x.send}, 60s));
  for (size_t i = 0; i < m.size(); ++i) {
    m[i].dst.assign(m[i].src.size() + 100, 0xaa);  // room to spare
    m[i].recv = job.dev(0).recv(1, header(i, m[i].src.size()), m[i].dst);
  }
  for (auto& x : m) {
    ASSERT_TRUE(wait_for({x.recv}, 60s));
    ASSERT_TRUE(x.recv->ok()) << x.recv->failure.message;
    ASSERT_EQ(x.recv->bytes, x.src.size());
    EXPECT_TRUE(std::equal(x.src.begin(), x.src.end(), x.dst.begin()));
    EXPECT_EQ(x.dst.back(), 0xaa);  // nothing written past the frame
  }
}

// A frame larger than its receive fails the receive with kMismatch, and the sender's group hears
// of it; nothing is written past the receive's memory.
TEST_P(Conformance, AFrameLargerThanItsReceiveIsAMismatch) {
  Job job(GetParam(), 2);
  ASSERT_TRUE(job.connected());
  std::vector<uint8_t> src = pattern(5000, 1), dst(4000 + 64, 0x55);
  const RequestPtr recv = job.dev(1).recv(0, header(0, src.size()), std::span<uint8_t>(dst.data(), 4000));
  const RequestPtr send = job.dev(0).send(1, header(0, src.size()), src);
  ASSERT_TRUE(wait_for({recv}, 60s));
  EXPECT_EQ(recv->failure.code, ErrorCode::kMismatch) << recv->failure.message;
  for (size_t i = 4000; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0x55) << "byte " << i;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!job.group(0).failed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(job.group(0).failed()) << "the sender was not told";
}

// The group's failure ends every operation pending on it, receives and sends alike, with that
// failure; a later post completes with it at once; the peers are told.
TEST_P(Conformance, AFailureEndsEveryPendingOperation) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  std::vector<std::vector<uint8_t>> bufs(6, std::vector<uint8_t>(1 << 16));
  std::vector<RequestPtr> pending;
  for (int i = 0; i < 3; ++i) {
    pending.push_back(job.dev(0).recv(1, header(static_cast<uint64_t>(i), bufs[0].size()), bufs[static_cast<size_t>(i)]));
    pending.push_back(job.dev(0).recv(2, header(static_cast<uint64_t>(i), bufs[0].size()), bufs[static_cast<size_t>(3 + i)]));
  }
  job.group(0).loop().run_sync([&] { job.group(0).fail(ErrorCode::kAborted, "conformance test", true); });
  ASSERT_TRUE(wait_for(pending, 30s));
  for (const auto& r : pending) EXPECT_EQ(r->failure.code, ErrorCode::kAborted) << r->failure.message;
  std::vector<uint8_t> more(10);
  const RequestPtr late = job.dev(0).send(1, header(9, more.size()), more);
  ASSERT_TRUE(wait_for({late}, 30s));
  EXPECT_FALSE(late->ok());
  for (int r : {1, 2}) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (!job.group(r).failed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    ASSERT_TRUE(job.group(r).failed()) << "rank " << r << " was not told";
    EXPECT_EQ(job.group(r).failure()->code, ErrorCode::kAborted);
  }
}

// A peer that goes away (its device closed) ends the receives waiting for it with kPeerLost.
TEST_P(Conformance, APeerThatGoesAwayEndsTheReceivesWaitingForIt) {
  Job job(GetParam(), 2);
  ASSERT_TRUE(job.connected());
  std::vector<uint8_t> buf(1 << 16);
  const RequestPtr waiting = job.dev(0).recv(1, header(0, buf.size()), buf);
  job.ranks[1].reset();
  ASSERT_TRUE(wait_for({waiting}, 60s)) << "the receive still waits for a peer that is gone";
  EXPECT_EQ(waiting->failure.code, ErrorCode::kPeerLost) << waiting->failure.message;
}

// What a device offers (its optional capabilities, transport/device.h) works: a reduce on
// receive sums the frame into the destination, path readings report the RTT of a link that
// carried frames, WAN tuning leaves the pair carrying frames; without the capability the caller
// receives and reduces itself.
TEST_P(Conformance, WhatADeviceOffersWorks) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  if (transport::WanTuning* t = job.dev(1).wan_tuning()) {
    for (int r = 0; r < 3; ++r)
      if (transport::WanTuning* u = job.dev(r).wan_tuning())
        for (int q = 0; q < 3; ++q)
          if (q != r) u->set_wan_peer(q, true);
    t->await_wan_streams(std::chrono::steady_clock::now() + 10s);
  }
  constexpr size_t kFloats = 4096;
  std::vector<float> acc(kFloats, 1.0f), add(kFloats, 2.0f);
  const std::span<uint8_t> acc_bytes(reinterpret_cast<uint8_t*>(acc.data()), kFloats * sizeof(float));
  const std::span<const uint8_t> add_bytes(reinterpret_cast<const uint8_t*>(add.data()), kFloats * sizeof(float));
  transport::ReduceOnReceive* reducer = job.dev(1).reduce_on_receive();
  const RequestPtr reduce =
      reducer ? reducer->recv_reduce(0, header(0, add_bytes.size()), acc_bytes, DataType::kFloat32, ReduceOp::kSum)
              : nullptr;
  EXPECT_EQ(reduce != nullptr, reducer != nullptr);
  // Frame 0 lands either in the reduce or in a plain receive; one back the other way.
  std::vector<uint8_t> plain(add_bytes.size());
  const RequestPtr recv = reduce ? reduce : job.dev(1).recv(0, header(0, add_bytes.size()), plain);
  const RequestPtr send = job.dev(0).send(1, header(0, add_bytes.size()), add_bytes);
  std::vector<uint8_t> back_src = pattern(70000, 9), back_dst(back_src.size());
  const RequestPtr back_recv = job.dev(0).recv(1, header(1, back_src.size()), back_dst);
  const RequestPtr back_send = job.dev(1).send(0, header(1, back_src.size()), back_src);
  ASSERT_TRUE(wait_for({recv, back_recv}, 60s));
  ASSERT_TRUE(wait_for({send, back_send}, 60s, /*delivered=*/true));
  ASSERT_TRUE(recv->ok()) << recv->failure.message;
  if (reduce) {
    for (size_t i = 0; i < kFloats; ++i) {
      ASSERT_EQ(acc[i], 3.0f) << "element " << i;
    }
  } else {
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), add_bytes.begin()));
  }
  if (const transport::PathReader* reader = job.dev(1).path_reader()) {
    EXPECT_GT(reader->path_reading(0).srtt_ms, 0.0);
  }
  const transport::DeviceProperties props = job.dev(1).properties();
  EXPECT_EQ(props.reduces_on_receive, reducer != nullptr);
  EXPECT_EQ(props.reads_paths, job.dev(1).path_reader() != nullptr);
}

// A device that forwards (ForwardOnReceive) sends a received frame on as it arrives, reduced with
// an operand (the destination itself, or another buffer it only reads, either operand first) or
// copied to the destination as well; in order with the plain frames to the
// same peer (a plain frame queued first leaves first), frames over twice the ring's size included,
// whether the frame came before its forward was posted or after.
TEST_P(Conformance, AForwardedFrameGoesOnAsItArrives) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  transport::ForwardOnReceive* fw = job.dev(1).forward_on_receive();
  EXPECT_EQ(job.dev(1).properties().forwards_on_receive, fw != nullptr);
  if (!fw) GTEST_SKIP() << "this device forwards nothing";
  auto floats = [](size_t n, float a, float b) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = a + b * static_cast<float>(i % 1000);
    return v;
  };
  auto bytes = [](std::vector<float>& v) { return std::span<uint8_t>(reinterpret_cast<uint8_t*>(v.data()), v.size() * 4); };
  const size_t small = 16384, big = (9u << 20) / 4 + 5;  // floats; 9 MiB against 4 MiB rings
  std::vector<float> in0 = floats(small, 1, 0.25f), in1 = floats(big, -3, 0.5f);
  std::vector<uint8_t> in2 = pattern((1u << 20) + 3, 5), plain = pattern(3u << 20, 6);
  // Frame 0 waits at rank 1 before its forward is posted.
  const RequestPtr s0 = job.dev(0).send(1, header(0, in0.size() * 4), bytes(in0));
  ASSERT_TRUE(wait_for({s0}, 60s));
  std::vector<float> acc0 = floats(small, 7, 1), acc1 = floats(big, 2, 2);
  // Frame 1 is reduced with an operand it leaves alone, payload first: min(+0, -0) is +0 then.
  for (size_t i = 0; i < 8; ++i) {
    in1[i] = 0.0f;
    acc1[i] = -0.0f;
  }
  const std::vector<float> acc0_before = acc0, acc1_before = acc1;
  std::vector<float> out1(big, -1.0f);
  std::vector<uint8_t> copy(in2.size(), 0xee);
  const RequestPtr p = job.dev(1).send(2, header(9, plain.size()), plain);
  const auto f0 = fw->recv_forward(0, header(0, in0.size() * 4), bytes(acc0), 2, header(10, in0.size() * 4),
                                   {true, false, DataType::kFloat32, ReduceOp::kSum, bytes(acc0)});
  const auto f1 = fw->recv_forward(0, header(1, in1.size() * 4), bytes(out1), 2, header(11, in1.size() * 4),
                                   {true, true, DataType::kFloat32, ReduceOp::kMin, bytes(acc1)});
  const auto f2 = fw->recv_forward(0, header(2, in2.size()), copy, 2, header(12, in2.size()), {});
  std::vector<uint8_t> got_plain(plain.size()), got2(in2.size());
  std::vector<float> got0(small), got1(big);
  const RequestPtr rp = job.dev(2).recv(1, header(9, plain.size()), got_plain);
  const RequestPtr r0 = job.dev(2).recv(1, header(10, in0.size() * 4), bytes(got0));
  const RequestPtr r1 = job.dev(2).recv(1, header(11, in1.size() * 4), bytes(got1));
  const RequestPtr r2 = job.dev(2).recv(1, header(12, in2.size()), got2);
  const RequestPtr s1 = job.dev(0).send(1, header(1, in1.size() * 4), bytes(in1));
  const RequestPtr s2 = job.dev(0).send(1, header(2, in2.size()), in2);
  ASSERT_TRUE(wait_for({rp, r0, r1, r2, f0.recv, f1.recv, f2.recv}, 60s));
  ASSERT_TRUE(wait_for({p, f0.send, f1.send, f2.send, s1, s2}, 60s, /*delivered=*/true));
  for (const RequestPtr& r : {rp, r0, r1, r2, f0.recv, f1.recv, f2.recv}) ASSERT_TRUE(r->ok()) << r->failure.message;
  EXPECT_EQ(got_plain, plain);
  // A reducing forward leaves each element of the destination as it was or reduced.
  for (size_t i = 0; i < small; ++i) {
    ASSERT_EQ(got0[i], acc0_before[i] + in0[i]) << "element " << i;
    ASSERT_TRUE(acc0[i] == acc0_before[i] || acc0[i] == got0[i]) << "element " << i;
  }
  for (size_t i = 0; i < big; ++i) {
    ASSERT_EQ(got1[i], std::min(in1[i], acc1[i])) << "element " << i;
    ASSERT_TRUE(out1[i] == -1.0f || out1[i] == got1[i]) << "element " << i;
  }
  for (size_t i = 0; i < 8; ++i) EXPECT_FALSE(std::signbit(got1[i])) << "payload first: min(+0, -0) is +0";
  EXPECT_EQ(acc1, acc1_before);  // the operand is only read
  EXPECT_EQ(got2, in2);
  EXPECT_EQ(copy, in2);  // a copying one leaves the frame there too
  EXPECT_EQ(f1.recv->bytes, in1.size() * 4);
}

// With the next hop's ring ready (its frame's header out, room for the whole frame), a forwarded
// frame goes ring to ring: every byte of it is counted as forwarded.
TEST_P(Conformance, AForwardWithTheNextHopReadyGoesRingToRing) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  transport::ForwardOnReceive* fw = job.dev(1).forward_on_receive();
  if (!fw) GTEST_SKIP() << "this device forwards nothing";
  std::vector<uint8_t> in = pattern(1u << 20, 9), dst(in.size()), got(in.size());
  const RequestPtr r = job.dev(2).recv(1, header(0, in.size()), got);
  const auto f = fw->recv_forward(0, header(0, in.size()), dst, 2, header(0, in.size()), {});
  // The header goes out as the forward is posted: once a frame rank 1 sends after it (its loop
  // runs them in order) has reached rank 0, it is out.
  std::vector<uint8_t> ping(8, 1), pong(8);
  const RequestPtr pr = job.dev(0).recv(1, header(7, 8), pong);
  ASSERT_TRUE(wait_for({job.dev(1).send(0, header(7, 8), ping), pr}, 60s));
  const RequestPtr s = job.dev(0).send(1, header(0, in.size()), in);
  ASSERT_TRUE(wait_for({r, f.recv, f.send, s}, 60s));
  ASSERT_TRUE(r->ok()) << r->failure.message;
  EXPECT_EQ(got, in);
  EXPECT_EQ(dst, in);
  transport::LinkStats to2;
  to2.peer = 2;
  job.dev(1).stats(&to2);
  EXPECT_EQ(to2.forwarded_bytes, in.size());
}

// A forwarded frame whose sender said goodbye right after writing it is drained from the ring,
// not waited on, even while the next hop's ring is full (its reader is not ready): the receive
// completes and nothing fails.
TEST_P(Conformance, AForwardFromAPeerThatLeftIsDrainedWhileTheNextHopIsFull) {
  Job job(GetParam(), 3);
  ASSERT_TRUE(job.connected());
  transport::ForwardOnReceive* fw = job.dev(1).forward_on_receive();
  if (!fw) GTEST_SKIP() << "this device forwards nothing";
  std::vector<uint8_t> plain = pattern(6u << 20, 7), in = pattern(256u << 10, 8), dst(in.size());
  const RequestPtr p = job.dev(1).send(2, header(0, plain.size()), plain);  // more than rank 2's ring
  const auto f = fw->recv_forward(0, header(0, in.size()), dst, 2, header(1, in.size()), {});
  const RequestPtr s = job.dev(0).send(1, header(0, in.size()), in);
  ASSERT_TRUE(wait_for({s}, 60s));
  job.dev(0).shutdown();  // goodbye: the frame is in rank 1's ring
  ASSERT_TRUE(wait_for({f.recv}, 60s)) << "the forwarded frame waited for the full ring";
  ASSERT_TRUE(f.recv->ok()) << f.recv->failure.message;
  EXPECT_EQ(dst, in);
  EXPECT_FALSE(p->done.load());  // the next hop's ring is still full
  std::vector<uint8_t> got_plain(plain.size()), got(in.size());
  const RequestPtr r0 = job.dev(2).recv(1, header(0, plain.size()), got_plain);
  const RequestPtr r1 = job.dev(2).recv(1, header(1, in.size()), got);
  ASSERT_TRUE(wait_for({r0, r1, p, f.send}, 60s));
  ASSERT_TRUE(r1->ok()) << r1->failure.message;
  EXPECT_EQ(got_plain, plain);
  EXPECT_EQ(got, in);
  EXPECT_FALSE(job.group(1).failed());
}

// With the group secret, a rank with another secret is refused: it never joins, and the refusal
// is a protocol error, not a timeout.
TEST_P(Conformance, AStrangerIsRefused) {
  if (!GetParam().secret) GTEST_SKIP() << "no group secret on this kind";
  Job job(GetParam(), 2, [](int r) { return r == 1 ? std::string("another job's secret, not ours") : std::string("the conformance suite's secret"); }, 5s);
  ASSERT_FALSE(job.connected());
  bool protocol_error = false;
  for (const auto& e : job.errors) protocol_error |= e.find(error_code_name(ErrorCode::kProtocol)) != std::string::npos;
  EXPECT_TRUE(protocol_error) << job.errors[0] << " / " << job.errors[1];
}

INSTANTIATE_TEST_SUITE_P(EveryTransport, Conformance, ::testing::ValuesIn(kinds()),
                         [](const ::testing::TestParamInfo<Kind>& i) { return i.param.name; });

}  // namespace conformance
