// The shared-memory transport between real processes (own executable: it forks). Ranks are
// forked children that swap their addresses through the parent over socketpairs (no store):
//  - a rank SIGKILLed mid-transfer gives kPeerLost on every other rank within 100 ms, and once
//    every process has exited nothing is left: no new entry in /dev/shm, no abstract socket of
//    the job in /proc/net/unix, no child;
//  - a rank in another network namespace is another host;
//  - the micro-benchmark: 96 MiB in 1 MiB frames from one process to another, copy-receive and
//    recv_reduce (f32 sum), in GB/s.
// Children are killed and reaped on every exit path of a test, assertion failures included.
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "geoccl/error.h"
#include "protocol/wire.h"
#include "runtime/event_loop.h"
#include "transport/shm/device.h"

using namespace geoccl;
using namespace std::chrono_literals;
using transport::Group;
using transport::RequestPtr;
using transport::shm::ShmDevice;
using transport::shm::UniqueFd;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

namespace {

int64_t now_ns() {
  // steady_clock is CLOCK_MONOTONIC: one clock for every process of the machine.
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Forked ranks: SIGKILLed and reaped when the test ends, however it ends.
struct Children {
  std::vector<pid_t> pids;
  ~Children() {
    for (pid_t p : pids) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  // Waits for `p` (at most `limit`, then kills it); returns its wait status.
  int reap(pid_t p, std::chrono::milliseconds limit = 30000ms) {
    int status = -1;
    const auto deadline = Clock::now() + limit;
    while (waitpid(p, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(p, SIGKILL);
        waitpid(p, &status, 0);
        break;
      }
      usleep(1000);
    }
    pids.erase(std::remove(pids.begin(), pids.end(), p), pids.end());
    return status;
  }
};

// One packet each way on a SOCK_SEQPACKET socketpair.
bool send_msg(int fd, const Bytes& b) { return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()); }
bool recv_msg(int fd, Bytes* out, int timeout_ms = 30000) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  out->resize(1 << 16);
  const ssize_t n = ::recv(fd, out->data(), out->size(), 0);
  if (n <= 0) return false;
  out->resize(static_cast<size_t>(n));
  return true;
}

Bytes pack(const std::vector<Bytes>& parts) {
  Bytes out;
  protocol::Writer w(&out);
  w.u32(static_cast<uint32_t>(parts.size()));
  for (const auto& p : parts) w.blob(p);
  return out;
}
std::vector<Bytes> unpack(const Bytes& in) {
  protocol::Reader r(in);
  uint32_t n = 0;
  r.u32(&n);
  std::vector<Bytes> parts(n);
  for (auto& p : parts) r.blob(&p, 1 << 16);
  return parts;
}

// A rank inside a child: loop, group (progress wakes `cv`), device, and the first failure as the
// group's own listener saw it (with the time it was seen).
struct ChildRank {
  ChildRank(int rank, int size, uint64_t session)
      : group(loop, rank, size, session, 1, [this] {
          std::lock_guard lk(mu);
          cv.notify_all();
        }) {
    loop.run_sync([this] {
      group.on_failure([this](const transport::Failure& f, bool) {
        fail_ns = now_ns();
        fail_code = f.code;
        fail_msg = f.message;
      });
    });
    dev = std::make_unique<ShmDevice>(group);
  }
  ~ChildRank() { dev.reset(); }
  // Swaps addresses through the parent on `fd` and connects to every other rank.
  void link(int fd) {
    Bytes all;
    if (!send_msg(fd, dev->address()) || !recv_msg(fd, &all)) _exit(10);
    addrs = unpack(all);
    std::vector<int> peers;
    for (int p = 0; p < group.size(); ++p)
      if (p != group.rank()) peers.push_back(p);
    dev->connect(peers, [&](int p) { return addrs[static_cast<size_t>(p)]; }, {}, Clock::now() + 20s);
  }
  runtime::EventLoop loop;
  std::mutex mu;
  std::condition_variable cv;
  Group group;
  std::unique_ptr<ShmDevice> dev;
  std::vector<Bytes> addrs;
  int64_t fail_ns = 0;  // loop thread until the group has failed
  ErrorCode fail_code = ErrorCode::kOk;
  std::string fail_msg;
};

protocol::FrameHeader header(uint64_t seq, protocol::OpKind kind = protocol::OpKind::kSendRecv) {
  protocol::FrameHeader h;
  h.kind = kind;
  h.seq = seq;
  return h;
}

// Child: streams 1 MiB frames to and from every peer (2 outstanding each way) until the group
// fails, says "ready" once a frame from every peer is in, then reports the failure.
int traffic_child(int rank, int size, uint64_t session, int fd) {
  ChildRank me(rank, size, session);
  me.link(fd);
  constexpr int kDepth = 2;
  constexpr size_t kFrame = 1 << 20;
  struct PeerIo {
    Bytes src = Bytes(kFrame, 1);
    std::vector<Bytes> dst = std::vector<Bytes>(kDepth, Bytes(kFrame));
    std::vector<RequestPtr> sends, recvs;
    uint64_t sent = 0, received = 0;
  };
  std::vector<PeerIo> io(static_cast<size_t>(size));
  auto post = [&](int p) {
    PeerIo& x = io[static_cast<size_t>(p)];
    x.sends.push_back(me.dev->send(p, header(x.sent++), x.src));
    x.recvs.push_back(me.dev->recv(p, header(x.received), x.dst[x.received % kDepth]));
    ++x.received;
  };
  for (int p = 0; p < size; ++p)
    if (p != rank)
      for (int k = 0; k < kDepth; ++k) post(p);
  bool ready = false;
  const auto deadline = Clock::now() + 30s;
  while (!me.group.failed() && Clock::now() < deadline) {
    std::unique_lock lk(me.mu);
    me.cv.wait_for(lk, 100ms, [&] {
      if (me.group.failed()) return true;
      for (auto& x : io)
        if ((!x.recvs.empty() && x.recvs.front()->done.load()) || (!x.sends.empty() && x.sends.front()->done.load()))
          return true;
      return false;
    });
    lk.unlock();
    bool all_in = true;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      PeerIo& x = io[static_cast<size_t>(p)];
      while (!x.sends.empty() && x.sends.front()->done.load() && x.sends.front()->ok())
        x.sends.erase(x.sends.begin());
      while (!x.recvs.empty() && x.recvs.front()->done.load() && x.recvs.front()->ok()) {
        x.recvs.erase(x.recvs.begin());
        post(p);
      }
      all_in = all_in && x.received > kDepth;
    }
    if (all_in && !ready) {
      ready = true;
      if (!send_msg(fd, {'r'})) return 11;
    }
  }
  Bytes report;
  me.loop.run_sync([&] {
    protocol::Writer w(&report);
    w.u8(static_cast<uint8_t>(me.fail_code));
    w.i64(me.fail_ns);
    w.str(me.fail_msg);
  });
  send_msg(fd, report);
  return 0;
}

std::set<std::string> dev_shm_entries() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

// Abstract sockets of the job (their names carry the session) still bound anywhere.
int job_sockets(uint64_t session) {
  char tag[64];
  std::snprintf(tag, sizeof tag, "@geoccl-shm.%016llx.", static_cast<unsigned long long>(session));
  std::ifstream f("/proc/net/unix");
  int n = 0;
  for (std::string line; std::getline(f, line);) n += line.find(tag) != std::string::npos;
  return n;
}

// Forks `size` ranks running `body(rank, fd)`; returns the parent's end of each rank's socketpair.
std::vector<UniqueFd> spawn(Children& kids, int size, const std::function<int(int, int)>& body) {
  std::vector<UniqueFd> ends;
  for (int r = 0; r < size; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
      ends.clear();  // the other ranks' parent ends are not ours
      ::close(sv[0]);
      int rc = 12;
      try {
        rc = body(r, sv[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(rc);
    }
    ::close(sv[1]);
    ends.emplace_back(sv[0]);
    kids.pids.push_back(pid);
  }
  return ends;
}

// The parent's part of linking: every rank's address to every rank.
bool swap_addresses(std::vector<UniqueFd>& ends) {
  std::vector<Bytes> addrs(ends.size());
  for (size_t r = 0; r < ends.size(); ++r)
    if (!recv_msg(ends[r].get(), &addrs[r])) return false;
  const Bytes all = pack(addrs);
  for (auto& e : ends)
    if (!send_msg(e.get(), all)) return false;
  return true;
}

}  // namespace

class shm_kill : public ::testing::TestWithParam<int> {};

TEST_P(shm_kill, SigkilledRankGivesPeerLostWithin100msAndLeavesNothing) {
  constexpr int kSize = 3;
  const int victim = GetParam();
  const uint64_t session = 0x5eed0000ull + static_cast<uint64_t>(getpid()) * 8 + static_cast<uint64_t>(victim);
  const auto shm_before = dev_shm_entries();
  {
    Children kids;
    auto ends = spawn(kids, kSize, [&](int r, int fd) { return traffic_child(r, kSize, session, fd); });
    ASSERT_EQ(ends.size(), static_cast<size_t>(kSize));
    ASSERT_TRUE(swap_addresses(ends));
    Bytes m;
    for (auto& e : ends) ASSERT_TRUE(recv_msg(e.get(), &m)) << "a rank did not get its traffic going";
    EXPECT_GE(job_sockets(session), kSize);  // listeners, and the sockets they accepted
    const int64_t t_kill = now_ns();
    ASSERT_EQ(kill(kids.pids[static_cast<size_t>(victim)], SIGKILL), 0);
    const int vs = kids.reap(kids.pids[static_cast<size_t>(victim)]);
    EXPECT_TRUE(WIFSIGNALED(vs) && WTERMSIG(vs) == SIGKILL);
    for (int r = 0; r < kSize; ++r) {
      if (r == victim) continue;
      ASSERT_TRUE(recv_msg(ends[static_cast<size_t>(r)].get(), &m)) << "rank " << r << " reported nothing";
      protocol::Reader rd(m);
      uint8_t code = 0;
      int64_t t_seen = 0;
      std::string msg;
      rd.u8(&code);
      rd.i64(&t_seen);
      rd.str(&msg, 1 << 14);
      ASSERT_TRUE(rd.ok());
      EXPECT_EQ(static_cast<ErrorCode>(code), ErrorCode::kPeerLost) << "rank " << r << ": " << msg;
      const double ms = static_cast<double>(t_seen - t_kill) / 1e6;
      EXPECT_LT(ms, 100.0) << "rank " << r << " saw the failure after " << ms << " ms: " << msg;
      RecordProperty("rank" + std::to_string(r) + "_detect_us", static_cast<int>(ms * 1000));
      std::printf("rank %d: %s after %.2f ms: %s\n", r, std::string(error_code_name(static_cast<ErrorCode>(code))).c_str(), ms, msg.c_str());
    }
    for (int r = 0; r < kSize; ++r) {
      if (r == victim) continue;
      const int st = kids.reap(kids.pids.front());
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
    }
  }
  errno = 0;
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD) << "a child is left";
  EXPECT_EQ(dev_shm_entries(), shm_before) << "something was left in /dev/shm";
  EXPECT_EQ(job_sockets(session), 0) << "an abstract socket of the job is still bound";
}

INSTANTIATE_TEST_SUITE_P(victims, shm_kill, ::testing::Values(0, 1, 2));

TEST(shm_process, AnotherNetworkNamespaceIsAnotherHost) {
  const uint64_t session = 0xa11e0000ull + static_cast<uint64_t>(getpid());
  runtime::EventLoop loop;
  Group group(loop, 0, 2, session, 1, [] {});
  ShmDevice dev(group);
  Children kids;
  auto ends = spawn(kids, 1, [&](int, int fd) {
    if (unshare(CLONE_NEWNET) != 0) {
      send_msg(fd, {'s'});
      return 0;
    }
    ChildRank me(1, 2, session);
    Bytes parent;
    if (!send_msg(fd, me.dev->address()) || !recv_msg(fd, &parent)) return 10;
    // The parent's socket does not exist in this namespace, and the device does not try.
    transport::shm::Address a;
    transport::shm::decode_address(parent, &a);
    sockaddr_un sa;
    const socklen_t len = transport::shm::abstract_sockaddr(a.socket_name, &sa);
    UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET, 0));
    const bool visible = ::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), len) == 0;
    uint8_t code = 0;
    try {
      me.dev->connect({0}, [&](int) { return parent; }, {}, Clock::now() + 2s);
    } catch (const Error& e) {
      code = static_cast<uint8_t>(e.code());
    }
    send_msg(fd, {static_cast<uint8_t>(me.dev->reaches(parent)), static_cast<uint8_t>(visible), code});
    return 0;
  });
  ASSERT_EQ(ends.size(), 1u);
  Bytes child_addr, verdict;
  ASSERT_TRUE(recv_msg(ends[0].get(), &child_addr));
  if (child_addr == Bytes{'s'}) GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted here";
  EXPECT_FALSE(dev.reaches(child_addr));
  ASSERT_TRUE(send_msg(ends[0].get(), dev.address()));
  ASSERT_TRUE(recv_msg(ends[0].get(), &verdict));
  ASSERT_EQ(verdict.size(), 3u);
  EXPECT_EQ(verdict[0], 0) << "the child thinks it reaches us";
  EXPECT_EQ(verdict[1], 0) << "our abstract socket is visible from another namespace";
  EXPECT_EQ(static_cast<ErrorCode>(verdict[2]), ErrorCode::kProtocol);
  EXPECT_EQ(kids.reap(kids.pids[0]), 0);
}

// 96 MiB in 1 MiB frames from a child process (rank 1) to this one (rank 0), through the
// default 4 MiB ring: copy-receive and recv_reduce (f32 sum). Prints GB/s.
TEST(shm_bench, NinetySixMiBInOneMiBFrames) {
  constexpr size_t kFrame = 1 << 20, kFrames = 96, kTotal = kFrame * kFrames;
  constexpr int kReps = 7;
  const uint64_t session = 0xbe0c0000ull + static_cast<uint64_t>(getpid());
  Children kids;
  auto ends = spawn(kids, 1, [&](int, int fd) {
    ChildRank me(1, 2, session);
    std::vector<float> src(kTotal / sizeof(float), 1.0f);
    me.link(fd);
    for (Bytes go; recv_msg(fd, &go) && go.size() == 2;) {
      const auto kind = go[0] ? protocol::OpKind::kAllreduce : protocol::OpKind::kSendRecv;
      auto h = header(go[1], kind);
      h.dtype = go[0] ? static_cast<uint8_t>(DataType::kFloat32) : 0;
      h.reduce_op = go[0] ? static_cast<uint8_t>(ReduceOp::kSum) : 0;
      std::vector<RequestPtr> sends;
      const auto* base = reinterpret_cast<const uint8_t*>(src.data());
      for (size_t i = 0; i < kFrames; ++i) sends.push_back(me.dev->send(0, h, {base + i * kFrame, kFrame}));
      std::unique_lock lk(me.mu);
      if (!me.cv.wait_for(lk, 30s, [&] { return sends.back()->done.load(); })) return 13;
    }
    return 0;
  });
  ASSERT_EQ(ends.size(), 1u);
  ChildRank me(0, 2, session);
  {
    Bytes addr;
    ASSERT_TRUE(recv_msg(ends[0].get(), &addr));
    me.addrs = {Bytes{}, addr};
    ASSERT_TRUE(send_msg(ends[0].get(), pack({me.dev->address(), addr})));
    me.dev->connect({1}, [&](int) { return addr; }, {}, Clock::now() + 20s);
  }
  std::vector<float> dst(kTotal / sizeof(float), 0.0f);
  auto* base = reinterpret_cast<uint8_t*>(dst.data());
  uint8_t seq = 0;
  double best[2] = {0, 0};
  std::vector<double> all[2];
  for (int mode = 0; mode < 2; ++mode)
    for (int rep = 0; rep < kReps; ++rep) {
      auto h = header(seq, mode ? protocol::OpKind::kAllreduce : protocol::OpKind::kSendRecv);
      h.dtype = mode ? static_cast<uint8_t>(DataType::kFloat32) : 0;
      h.reduce_op = mode ? static_cast<uint8_t>(ReduceOp::kSum) : 0;
      std::vector<RequestPtr> recvs;
      for (size_t i = 0; i < kFrames; ++i) {
        const std::span<uint8_t> d(base + i * kFrame, kFrame);
        recvs.push_back(mode ? me.dev->recv_reduce(1, h, d, DataType::kFloat32, ReduceOp::kSum)
                             : me.dev->recv(1, h, d));
      }
      const auto t0 = Clock::now();
      ASSERT_TRUE(send_msg(ends[0].get(), {static_cast<uint8_t>(mode), seq++}));
      {
        std::unique_lock lk(me.mu);
        ASSERT_TRUE(me.cv.wait_for(lk, 30s, [&] { return recvs.back()->done.load(); }));
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      for (auto& r : recvs) ASSERT_TRUE(r->ok()) << r->failure.message;
      if (rep == 0) continue;  // warm-up
      all[mode].push_back(kTotal / s / 1e9);
      best[mode] = std::max(best[mode], kTotal / s / 1e9);
    }
  // Copy reps left 1.0 everywhere; each reduce rep added 1.0.
  EXPECT_EQ(dst.front(), 1.0f + kReps);
  EXPECT_EQ(dst.back(), 1.0f + kReps);
  // Context: one thread's memcpy of the same 96 MiB in this process.
  std::vector<uint8_t> a(kTotal, 1), b(kTotal);
  std::memcpy(b.data(), a.data(), kTotal);
  const auto m0 = Clock::now();
  std::memcpy(b.data(), a.data(), kTotal);
  const double memcpy_gbs = kTotal / std::chrono::duration<double>(Clock::now() - m0).count() / 1e9;
  for (auto& v : all) std::sort(v.begin(), v.end());
  std::printf("shm 96 MiB in 1 MiB frames, 4 MiB ring: copy-receive %.2f GB/s (median %.2f), recv_reduce f32 sum %.2f GB/s (median %.2f); memcpy 96 MiB %.2f GB/s\n",
              best[0], all[0][all[0].size() / 2], best[1], all[1][all[1].size() / 2], memcpy_gbs);
  RecordProperty("copy_gbps_x100", static_cast<int>(best[0] * 100));
  RecordProperty("reduce_gbps_x100", static_cast<int>(best[1] * 100));
  ends.clear();  // EOF: the child ends its loop
  EXPECT_EQ(kids.reap(kids.pids[0]), 0);
}
