// Two ShmDevices in one process, each with its own EventLoop and Group, linked through real unix
// sockets, memfd segments and eventfds: random frames (0 B .. 2 MiB, many larger than a small ring)
// arrive intact and in order both ways, a receive reports the actual size, recv_reduce gives the
// reduced values, sends are delivered, mismatches fail both ranks, strangers are refused while
// the group goes on, and a peer that leaves fails what is pending with it. With a group secret
// both ends prove it before a segment is adopted: a rank with another secret, or none, and a
// stranger that forges the proof are refused on both sides, and the genuine rank still joins.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/half.h"
#include "core/reduce.h"
#include "geoccl/error.h"
#include "geoccl/config.h"
#include "protocol/handshake_machine.h"
#include "protocol/shm_hello.h"
#include "protocol/wire.h"
#include "runtime/event_loop.h"
#include "security/auth.h"
#include "security/secret.h"
#include "transport/shm/device.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::Group;
using transport::RequestPtr;
using transport::shm::ShmDevice;
using transport::shm::ShmOptions;
using Clock = std::chrono::steady_clock;

namespace {

// One rank: its loop, its group (progress wakes `cv`), its device.
struct ShmRank {
  ShmRank(int rank, int size, uint64_t session = 7, uint64_t params = 99, ShmOptions o = {},
       std::optional<security::GroupKey> key = std::nullopt)
      : loop("shm-test"), group(loop, rank, size, session, params, [this] {
          std::lock_guard lk(mu);
          cv.notify_all();
        }) {
    group.set_security(key);
    dev = std::make_unique<ShmDevice>(group, o);
  }
  ~ShmRank() { dev.reset(); }

  // Waits (on progress notifications) until `pred` holds; false after `limit`.
  template <class P>
  bool wait(P pred, std::chrono::milliseconds limit = 20000ms) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, limit, pred);
  }
  bool wait_done(const std::vector<RequestPtr>& reqs, bool delivered = false) {
    return wait([&] {
      for (const auto& r : reqs)
        if (!(delivered ? r->delivered.load() : r->done.load())) return false;
      return true;
    });
  }
  bool wait_failed() { return wait([&] { return group.failed(); }); }

  runtime::EventLoop loop;
  std::mutex mu;
  std::condition_variable cv;
  Group group;
  std::unique_ptr<ShmDevice> dev;
};

void connect_all(std::vector<ShmRank*> ranks, std::chrono::milliseconds limit = 10000ms) {
  std::vector<std::vector<uint8_t>> addrs;
  for (auto* r : ranks) addrs.push_back(r->dev->address());
  const auto deadline = Clock::now() + limit;
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i)
    ts.emplace_back([&, i] {
      std::vector<int> peers;
      for (size_t j = 0; j < ranks.size(); ++j)
        if (j != i) peers.push_back(static_cast<int>(j));
      try {
        ranks[i]->dev->connect(peers, [&](int p) { return addrs[static_cast<size_t>(p)]; }, {}, deadline);
      } catch (...) {
        errs[i] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

struct ShmPair {
  explicit ShmPair(ShmOptions o = {}) : r0(0, 2, 7, 99, o), r1(1, 2, 7, 99, o) { connect_all({&r0, &r1}); }
  ShmRank r0, r1;
};

protocol::FrameHeader shm_header(uint64_t seq, size_t bytes, protocol::OpKind kind = protocol::OpKind::kSendRecv) {
  protocol::FrameHeader h;
  h.kind = kind;
  h.seq = seq;
  h.op_bytes = bytes;
  return h;
}

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// `from` sends `frames` frames of random sizes to `to`, which posts its receives in random
// batches while the sends are under way.
void transfer(ShmRank& from, ShmRank& to, int frames, std::mt19937_64& rng) {
  const int a = from.group.rank(), b = to.group.rank();
  std::vector<std::vector<uint8_t>> src, dst;
  for (int i = 0; i < frames; ++i) {
    const size_t kind = rng() % 4;
    const size_t n = kind == 0 ? rng() % 64 : kind == 1 ? rng() % (2u << 20) : rng() % (256u << 10);
    src.push_back(random_bytes(n, rng));
    dst.emplace_back(n, 0);
  }
  std::vector<RequestPtr> sends, recvs;
  for (size_t i = 0; i < src.size(); ++i) sends.push_back(from.dev->send(b, shm_header(i, src[i].size()), src[i]));
  for (size_t i = 0; i < dst.size();) {
    const size_t batch = 1 + rng() % 16;
    for (size_t j = 0; j < batch && i < dst.size(); ++j, ++i)
      recvs.push_back(to.dev->recv(a, shm_header(i, dst[i].size()), dst[i]));
    ASSERT_TRUE(to.wait_done({recvs.front()}));
  }
  ASSERT_TRUE(to.wait_done(recvs));
  ASSERT_TRUE(from.wait_done(sends, /*delivered=*/true));
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_TRUE(recvs[i]->ok()) << recvs[i]->failure.message;
    ASSERT_TRUE(sends[i]->ok()) << sends[i]->failure.message;
    EXPECT_EQ(recvs[i]->bytes, src[i].size());
    ASSERT_EQ(src[i], dst[i]) << "frame " << i;
  }
}

// The job key of session 7 (the test ranks' session) for `secret`.
security::GroupKey key_of(const std::string& secret) {
  Config c;
  c.secret = secret;
  return security::job_key(*security::load_secret(c), 7, security::offered_ciphers("auto"));
}

// Dials `to` as rank `rank` of 2 and expects connect() to fail with kProtocol naming `what`.
void expect_refused(ShmRank& to, std::optional<security::GroupKey> key, const std::string& what) {
  ShmRank r(1, 2, 7, 99, {}, key);
  try {
    r.dev->connect({0}, [&](int) { return to.dev->address(); }, {}, Clock::now() + 5s);
    ADD_FAILURE() << "connect succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// What rank 1 of ShmRank's group (session 7, parameters 99) says in a shared-memory Hello.
protocol::HandshakeSetup rank1_setup() {
  protocol::HandshakeSetup me;
  me.rank = 1;
  me.world_size = 2;
  me.session_id = 7;
  me.params_hash = 99;
  me.transport = protocol::Transport::kSharedMemory;
  return me;
}

}  // namespace

TEST(shm_device, AddressReachesOnlyTheSameHostAndNamespace) {
  ShmRank r(0, 1);
  const auto mine = r.dev->address();
  EXPECT_TRUE(r.dev->reaches(mine));
  transport::shm::Address a;
  ASSERT_TRUE(transport::shm::decode_address(mine, &a));
  EXPECT_EQ(a.host.boot_id.size(), 36u);
  EXPECT_EQ(a.socket_name.rfind("geoccl-shm.", 0), 0u);
  auto other = a;
  other.host.netns_ino ^= 1;  // another network namespace
  EXPECT_FALSE(r.dev->reaches(transport::shm::encode_address(other)));
  other = a;
  other.host.boot_id[0] = other.host.boot_id[0] == 'a' ? 'b' : 'a';  // another boot
  EXPECT_FALSE(r.dev->reaches(transport::shm::encode_address(other)));
  EXPECT_FALSE(r.dev->reaches(std::vector<uint8_t>{1, 2, 3}));
  EXPECT_STREQ(r.dev->name(), "shm");
}

TEST(shm_device, RandomFramesArriveIntactInOrderBothWays) {
  ShmPair p;
  std::mt19937_64 rng(1);
  std::thread back([&] {
    std::mt19937_64 rng2(2);
    transfer(p.r1, p.r0, 150, rng2);
  });
  transfer(p.r0, p.r1, 150, rng);
  back.join();
  transport::LinkStats ps;
  ps.peer = 1;
  p.r0.dev->stats(&ps);
  EXPECT_EQ(ps.device, "shm");
  EXPECT_EQ(ps.frames_sent, 150u);
  EXPECT_EQ(ps.frames_received, 150u);
  EXPECT_GT(ps.bytes_sent, 150u * protocol::kFrameHeaderSize);
  EXPECT_GT(ps.bytes_received, 150u * protocol::kFrameHeaderSize);
  EXPECT_FALSE(p.r0.group.failed());
  EXPECT_FALSE(p.r1.group.failed());
}

TEST(shm_device, FramesLargerThanASmallRingStream) {
  ShmOptions o;
  o.ring_bytes = 64 * 1000 + 1;  // rounded up to 64064: not a power of two
  ShmPair p(o);
  std::mt19937_64 rng(3);
  transfer(p.r0, p.r1, 60, rng);
}

TEST(shm_device, ReceiveIntoLargerDestinationReportsSize) {
  ShmPair p;
  std::mt19937_64 rng(4);
  const auto src = random_bytes(1000, rng);
  std::vector<uint8_t> dst(4096, 0xee), empty_dst(16, 0xee);
  auto s0 = p.r0.dev->send(1, shm_header(0, 1000), src);
  auto s1 = p.r0.dev->send(1, shm_header(1, 0), {});
  auto q0 = p.r1.dev->recv(0, shm_header(0, 1000), dst);
  auto q1 = p.r1.dev->recv(0, shm_header(1, 0), empty_dst);
  ASSERT_TRUE(p.r1.wait_done({q0, q1}));
  ASSERT_TRUE(q0->ok() && q1->ok()) << q0->failure.message << q1->failure.message;
  EXPECT_EQ(q0->bytes, 1000u);
  EXPECT_EQ(q1->bytes, 0u);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
  EXPECT_EQ(dst[1000], 0xee);  // nothing past the payload is touched
  EXPECT_EQ(empty_dst[0], 0xee);
  ASSERT_TRUE(p.r0.wait_done({s0, s1}, true));
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(shm_device, RecvReduceCombinesStraightFromTheRing) {
  ShmOptions o;
  o.ring_bytes = 64 * 999;  // frames wrap many times, pieces end at odd places
  ShmPair p(o);
  std::mt19937_64 rng(5);
  const size_t n = 300001;  // elements
  std::vector<float> f0(n), f1(n);
  std::vector<uint16_t> h0(n), h1(n);
  std::vector<int32_t> i0(n), i1(n);
  for (size_t i = 0; i < n; ++i) {
    f0[i] = static_cast<float>(rng() % 2000) / 7.0f;
    f1[i] = static_cast<float>(rng() % 2000) / 3.0f;
    h0[i] = core::float_to_half(static_cast<float>(rng() % 500) / 8.0f);
    h1[i] = core::float_to_half(static_cast<float>(rng() % 500) / 16.0f);
    i0[i] = static_cast<int32_t>(rng() % 100000) - 50000;
    i1[i] = static_cast<int32_t>(rng() % 100000) - 50000;
  }
  struct Case {
    DataType dtype;
    std::vector<uint8_t> mine, theirs;
  };
  std::vector<Case> cases = {{DataType::kFloat32, as_bytes(f1), as_bytes(f0)},
                             {DataType::kFloat16, as_bytes(h1), as_bytes(h0)},
                             {DataType::kInt32, as_bytes(i1), as_bytes(i0)}};
  uint64_t seq = 0;
  for (auto& c : cases) {
    std::vector<uint8_t> want = c.mine;
    core::reduce_into(want.data(), c.theirs.data(), n, c.dtype, ReduceOp::kSum);
    auto h = shm_header(seq, c.theirs.size(), protocol::OpKind::kAllreduce);
    h.dtype = static_cast<uint8_t>(c.dtype);
    h.reduce_op = static_cast<uint8_t>(ReduceOp::kSum);
    ++seq;
    auto s = p.r0.dev->send(1, h, c.theirs);
    auto r = p.r1.dev->recv_reduce(0, h, c.mine, c.dtype, ReduceOp::kSum);
    ASSERT_TRUE(r);
    ASSERT_TRUE(p.r1.wait_done({r}));
    ASSERT_TRUE(r->ok()) << r->failure.message;
    EXPECT_EQ(r->bytes, c.theirs.size());
    EXPECT_TRUE(c.mine == want) << dtype_name(c.dtype) << ": reduced values differ";
    ASSERT_TRUE(p.r0.wait_done({s}, true));
  }
  EXPECT_FALSE(p.r1.group.failed());
}

TEST(shm_device, MismatchedHeaderFailsBothRanks) {
  ShmPair p;
  std::vector<uint8_t> src(4096, 1), dst(4096);
  auto h = shm_header(3, src.size(), protocol::OpKind::kAllreduce);
  h.dtype = static_cast<uint8_t>(DataType::kFloat32);
  auto expect = h;
  expect.dtype = static_cast<uint8_t>(DataType::kFloat64);
  auto s = p.r0.dev->send(1, h, src);
  auto r = p.r1.dev->recv(0, expect, dst);
  ASSERT_TRUE(p.r1.wait_failed());
  ASSERT_TRUE(p.r0.wait_failed());
  EXPECT_EQ(p.r1.group.failure()->code, ErrorCode::kMismatch);
  EXPECT_EQ(p.r0.group.failure()->code, ErrorCode::kMismatch);  // told by the abort frame
  EXPECT_NE(p.r0.group.failure()->message.find("rank 1 reports"), std::string::npos);
  ASSERT_TRUE(p.r1.wait_done({r}));
  EXPECT_EQ(r->failure.code, ErrorCode::kMismatch);
  // Later requests fail at once with the group's failure.
  auto later = p.r0.dev->send(1, h, src);
  ASSERT_TRUE(p.r0.wait_done({later}));
  EXPECT_EQ(later->failure.code, ErrorCode::kMismatch);
}

TEST(shm_device, PayloadLargerThanTheReceiveFailsWithMismatch) {
  ShmPair p;
  std::vector<uint8_t> src(2000, 1), dst(1000);
  p.r0.dev->send(1, shm_header(0, 0), src);
  auto r = p.r1.dev->recv(0, shm_header(0, 0), dst);
  ASSERT_TRUE(p.r1.wait_done({r}));
  EXPECT_EQ(r->failure.code, ErrorCode::kMismatch);
  EXPECT_NE(r->failure.message.find("at most 1000"), std::string::npos) << r->failure.message;
  ASSERT_TRUE(p.r0.wait_failed());
}

TEST(shm_device, EarlyFrameOfAnotherOperationFailsWhenChecked) {
  ShmPair p;
  std::vector<uint8_t> src(100, 1);
  auto h = shm_header(5, src.size(), protocol::OpKind::kBroadcast);
  p.r0.dev->send(1, h, src);
  // No operation announced yet: the frame waits in the ring; then rank 1 starts an allreduce #5.
  auto probe = p.r0.dev->send(1, shm_header(0, 0), {});
  ASSERT_TRUE(p.r0.wait_done({probe}));
  EXPECT_FALSE(p.r1.group.failed());
  p.r1.loop.run_sync([&] {
    p.r1.group.set_current_operation(shm_header(5, 100, protocol::OpKind::kAllreduce));
    p.r1.dev->recheck_early_frames();
  });
  ASSERT_TRUE(p.r1.wait_failed());
  EXPECT_EQ(p.r1.group.failure()->code, ErrorCode::kMismatch);
  ASSERT_TRUE(p.r0.wait_failed());
}

TEST(shm_device, StrangersAreRefusedAndTheGroupGoesOn) {
  ShmRank r0(0, 2);
  transport::shm::Address a;
  ASSERT_TRUE(transport::shm::decode_address(r0.dev->address(), &a));
  sockaddr_un sa;
  const socklen_t len = transport::shm::abstract_sockaddr(a.socket_name, &sa);
  auto ask = [&](std::span<const uint8_t> hello, std::vector<int> fds) {
    transport::shm::UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), len), 0);
    EXPECT_EQ(transport::shm::send_with_fds(s.get(), hello, fds, 0), static_cast<ssize_t>(hello.size()));
    std::vector<uint8_t> rb(512);
    const ssize_t n = ::recv(s.get(), rb.data(), rb.size(), 0);
    EXPECT_GE(n, static_cast<ssize_t>(protocol::kReplySize));
    rb.resize(static_cast<size_t>(std::max<ssize_t>(n, 0)));
    protocol::Reply rep;
    if (rb.size() < protocol::kReplySize) return std::string("no reply");
    EXPECT_EQ(protocol::decode_reply(std::span<const uint8_t, protocol::kReplySize>(rb.data(), protocol::kReplySize), &rep),
              protocol::HandshakeStatus::kAccepted);
    EXPECT_NE(rep.status, protocol::HandshakeStatus::kAccepted);
    EXPECT_EQ(rb.size(), protocol::kReplySize + rep.reason);
    return rep.reason ? std::string(rb.begin() + protocol::kReplySize, rb.end())
                      : std::string(protocol::handshake_status_name(rep.status));
  };
  // Garbage.
  std::vector<uint8_t> junk(100, 'x');
  EXPECT_NE(ask(junk, {}).find("not a geoccl peer"), std::string::npos);
  // A well-formed Hello whose token is not the one in the memory it shares.
  protocol::HandshakeSetup me = rank1_setup();
  protocol::shm::Extension ext;
  ext.ring_bytes = 4096;
  transport::shm::Token in_memory{};
  in_memory[0] = 1;
  ext.token[0] = 2;
  auto hello_with = [&](const protocol::shm::Extension& e) {
    return protocol::HandshakeDialler(me, 0, 0, protocol::shm::encode_extension(e)).take_output();
  };
  auto seg = transport::shm::Segment::create(transport::shm::segment_bytes(4096), "test");
  transport::shm::init_segment(seg, 4096, in_memory);
  transport::shm::UniqueFd e1(eventfd(0, EFD_CLOEXEC)), e2(eventfd(0, EFD_CLOEXEC));
  EXPECT_NE(ask(hello_with(ext), {seg.fd(), e1.get(), e2.get()}).find("token mismatch"), std::string::npos);
  // The right token but no descriptors.
  ext.token = in_memory;
  EXPECT_NE(ask(hello_with(ext), {}).find("descriptors"), std::string::npos);
  // Not an eventfd.
  EXPECT_NE(ask(hello_with(ext), {seg.fd(), e1.get(), seg.fd()}).find("eventfd"), std::string::npos);
  // A TCP Hello at the shared-memory listener.
  me.transport = protocol::Transport::kTcp;
  EXPECT_NE(ask(hello_with(ext), {}).find("a tcp Hello reached the shm listener"), std::string::npos);
  // Another job, and another configuration: the dialler's connect() names the reason.
  for (auto [session, params, what] : {std::tuple{8, 99, "different session"}, std::tuple{7, 98, "group parameters"}}) {
    ShmRank stranger(1, 2, session, params);
    try {
      stranger.dev->connect({0}, [&](int) { return r0.dev->address(); }, {}, Clock::now() + 5s);
      ADD_FAILURE() << "connect succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kProtocol);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(r0.dev->rejected_connections(), 7u);
  EXPECT_FALSE(r0.group.failed());
  // The real rank 1 still gets in, and data flows.
  ShmRank r1(1, 2);
  connect_all({&r0, &r1});
  std::mt19937_64 rng(6);
  transfer(r1, r0, 10, rng);
}

TEST(shm_device, ConnectTimesOutNamingTheMissingRanks) {
  ShmRank r0(0, 3);
  try {
    r0.dev->connect({1, 2}, [](int) { return std::vector<uint8_t>{}; }, {}, Clock::now() + 200ms);
    ADD_FAILURE() << "connect succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1,2"), std::string::npos) << e.what();
  }
  ShmRank r2(2, 3);
  try {
    r2.dev->connect({0}, [&](int) { return std::vector<uint8_t>{9, 9}; }, {}, Clock::now() + 200ms);
    ADD_FAILURE() << "connect succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocol);
  }
}

TEST(shm_device, PeerThatLeavesStillDeliversWhatItSentThenPendingFails) {
  ShmPair p;
  std::vector<uint8_t> a(3000, 1), b(5000, 2), dst_a(3000), dst_b(5000), dst_c(10);
  p.r1.dev->send(0, shm_header(0, 0), a);
  p.r1.dev->send(0, shm_header(1, 0), b);
  p.r1.dev->shutdown();  // waits until both frames are in the ring, says goodbye, closes
  auto ra = p.r0.dev->recv(1, shm_header(0, 0), dst_a);
  auto rb = p.r0.dev->recv(1, shm_header(1, 0), dst_b);
  ASSERT_TRUE(p.r0.wait_done({ra, rb}));
  EXPECT_TRUE(ra->ok() && rb->ok()) << ra->failure.message << rb->failure.message;
  EXPECT_EQ(dst_a, a);
  EXPECT_EQ(dst_b, b);
  auto rc = p.r0.dev->recv(1, shm_header(2, 0), dst_c);
  ASSERT_TRUE(p.r0.wait_done({rc}));
  EXPECT_EQ(rc->failure.code, ErrorCode::kPeerLost);
  EXPECT_NE(rc->failure.message.find("left the group"), std::string::npos) << rc->failure.message;
}

TEST(shm_device, ShutdownCompletesPendingRequests) {
  ShmPair p;
  std::vector<uint8_t> dst(10);
  auto r = p.r0.dev->recv(1, shm_header(0, 0), dst);
  p.r0.dev->shutdown();
  ASSERT_TRUE(r->done.load());
  EXPECT_EQ(r->failure.code, ErrorCode::kAborted);
  EXPECT_FALSE(p.r0.group.failed());
}

namespace {
long open_fds() {
  const std::filesystem::directory_iterator fds("/proc/self/fd");
  return std::distance(begin(fds), end(fds));
}
int shm_mappings() {
  std::ifstream f("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(f, line);) n += line.find("memfd:geoccl-shm") != std::string::npos;
  return n;
}
}  // namespace

TEST(shm_device, ShutdownReleasesEveryDescriptorAndMapping) {
  const long fds = open_fds();
  {
    ShmPair p;
    std::vector<uint8_t> src(100, 1), dst(100);
    p.r0.dev->send(1, shm_header(0, 0), src);
    auto r = p.r1.dev->recv(0, shm_header(0, 0), dst);
    ASSERT_TRUE(p.r1.wait_done({r}));
    EXPECT_EQ(shm_mappings(), 2);  // one segment, mapped by each end
  }
  EXPECT_EQ(shm_mappings(), 0);
  EXPECT_EQ(open_fds(), fds);
}

TEST(shm_device, WithASecretBothEndsProveItAndFramesFlow) {
  const auto key = key_of("shm-secret-0123456789");
  ShmRank r0(0, 2, 7, 99, {}, key), r1(1, 2, 7, 99, {}, key);
  connect_all({&r0, &r1});
  std::mt19937_64 rng(11);
  transfer(r1, r0, 20, rng);
  transfer(r0, r1, 20, rng);
  EXPECT_EQ(r0.dev->rejected_connections(), 0u);
}

TEST(shm_device, WithoutTheSecretNoRankJoinsAndTheGenuineOneStillDoes) {
  const auto key = key_of("shm-secret-0123456789");
  ShmRank r0(0, 2, 7, 99, {}, key);
  // Another secret: the dialler finds the acceptor's proof wrong, and says so; both count it.
  expect_refused(r0, key_of("another-secret-0123456789"), "could not prove the group secret");
  // No secret at the dialler, and a secret only at the dialler.
  expect_refused(r0, std::nullopt, "one side has a group secret");
  {
    ShmRank plain0(0, 2);
    expect_refused(plain0, key, "one side has a group secret");
  }
  // A stranger that knows the session, parameters and token but not the secret: it passes the
  // Hello, then sends a forged proof. The acceptor refuses it and adopts nothing.
  {
    transport::shm::Address a;
    ASSERT_TRUE(transport::shm::decode_address(r0.dev->address(), &a));
    sockaddr_un sa;
    const socklen_t len = transport::shm::abstract_sockaddr(a.socket_name, &sa);
    transport::shm::UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    ASSERT_EQ(::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), len), 0);
    protocol::HandshakeSetup me = rank1_setup();
    const auto guess = key_of("stranger-guess-0123456789");
    me.key = &guess;
    protocol::shm::Extension ext;
    ext.ring_bytes = 4096;
    ext.token[0] = 5;
    auto seg = transport::shm::Segment::create(transport::shm::segment_bytes(4096), "test");
    transport::shm::init_segment(seg, 4096, ext.token);
    transport::shm::UniqueFd e1(eventfd(0, EFD_CLOEXEC)), e2(eventfd(0, EFD_CLOEXEC));
    protocol::HandshakeDialler d(me, 0, 0, protocol::shm::encode_extension(ext));
    const auto first = d.take_output();
    const int fds[3] = {seg.fd(), e1.get(), e2.get()};
    ASSERT_EQ(transport::shm::send_with_fds(s.get(), first, fds, 0), static_cast<ssize_t>(first.size()));
    std::vector<uint8_t> rb(512);
    ssize_t n = ::recv(s.get(), rb.data(), rb.size(), 0);
    // The Hello itself is right: the Reply accepts it, and the acceptor's proof comes with it.
    ASSERT_EQ(n, static_cast<ssize_t>(protocol::kReplySize + security::kAuthRespSize));
    protocol::Reply rep;
    ASSERT_EQ(protocol::decode_reply(std::span<const uint8_t, protocol::kReplySize>(rb.data(), protocol::kReplySize), &rep),
              protocol::HandshakeStatus::kAccepted);
    EXPECT_EQ(rep.status, protocol::HandshakeStatus::kAccepted);
    std::vector<uint8_t> fin;
    protocol::Writer w(&fin);
    w.u64(security::kAuthFinMagic);
    w.u8(0);
    for (int i = 0; i < 32; ++i) w.u8(static_cast<uint8_t>(i * 7));
    ASSERT_EQ(::send(s.get(), fin.data(), fin.size(), MSG_NOSIGNAL), static_cast<ssize_t>(fin.size()));
    // The acceptor refuses the forged proof by closing; it counted the refusal before.
    n = ::recv(s.get(), rb.data(), rb.size(), 0);
    EXPECT_EQ(n, 0);
  }
  EXPECT_EQ(r0.dev->rejected_connections(), 3u);  // another secret, no secret, the forged proof
  EXPECT_FALSE(r0.group.failed());
  ShmRank r1(1, 2, 7, 99, {}, key);
  connect_all({&r0, &r1});
  std::mt19937_64 rng(12);
  transfer(r1, r0, 10, rng);
}
