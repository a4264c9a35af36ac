// Real namespaces, real TUN devices, the real emulator process: a short check
// that a 20 ms / 100 Mbit/s link measures as such, that links can be cut
// while traffic flows, and that nothing is left behind. Needs root; skipped
// with a message where namespaces cannot be created.
#include "testbed/wan_session.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "testbed/netns.h"

namespace geoccl::testbed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kScenario = R"(
name = "wan-test"
seed = 1
mtu = 1500
queue = "20ms"
host_cc = "cubic"
[domains.a]
[domains.b]
[links.default]
rtt = "20ms"
rate = "100mbit"
)";

// Why namespaces cannot be used here, or "" when they can.
std::string namespaces_unavailable() {
  if (geteuid() != 0) return "needs root to create network namespaces";
  if (access("/dev/net/tun", R_OK | W_OK) != 0) return "/dev/net/tun is not available";
  const std::string probe = "geoccl-" + std::to_string(getpid()) + "-probe";
  try {
    create_netns(probe);
  } catch (const std::exception& e) {
    return std::string("cannot create a network namespace: ") + e.what();
  }
  delete_netns(probe.c_str());
  return "";
}

struct Socket {
  int fd;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

sockaddr_in address(const std::string& ip, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &sa.sin_addr);
  return sa;
}

void set_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Runs fn on a thread inside namespace `netns`; joined on destruction.
class NsThread {
 public:
  NsThread(const std::string& netns, std::function<void()> fn)
      : thread_([netns, fn = std::move(fn)] { in_netns(netns, fn); }) {}
  ~NsThread() { thread_.join(); }

 private:
  std::thread thread_;
};

// UDP echo server in a namespace, until destroyed.
class UdpEcho {
 public:
  UdpEcho(const std::string& netns, const std::string& ip, int port)
      : thread_(netns, [this, ip, port] {
          Socket s(socket(AF_INET, SOCK_DGRAM, 0));
          const sockaddr_in sa = address(ip, port);
          if (bind(s.fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) return;
          set_timeout(s.fd, 50);
          ready_ = true;
          char buf[64];
          while (!stop_) {
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = recvfrom(s.fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n > 0) sendto(s.fd, buf, static_cast<std::size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
          }
        }) {
    for (int i = 0; i < 200 && !ready_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~UdpEcho() { stop_ = true; }

 private:
  std::atomic<bool> ready_{false}, stop_{false};
  NsThread thread_;  // last: joined before the flags go away
};

// Round trips of `count` UDP probes from netns to ip:port, in ms; lost probes
// (no answer within timeout_ms) are left out.
std::vector<double> udp_rtts(const std::string& netns, const std::string& ip, int port, int count,
                             int timeout_ms) {
  std::vector<double> rtts;
  in_netns(netns, [&] {
    Socket s(socket(AF_INET, SOCK_DGRAM, 0));
    set_timeout(s.fd, timeout_ms);
    const sockaddr_in to = address(ip, port);
    for (int i = 0; i < count; ++i) {
      const auto start = Clock::now();
      char buf[32] = {static_cast<char>(i)};
      sendto(s.fd, buf, sizeof buf, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
      if (recv(s.fd, buf, sizeof buf, 0) > 0 && buf[0] == static_cast<char>(i)) {
        rtts.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  return rtts;
}

// bytes_out of one link from the emulator's stats table.
std::uint64_t link_bytes_out(const std::string& stats, const std::string& link) {
  std::istringstream in(stats);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    std::uint64_t packets_in, bytes_in, packets_out, bytes_out;
    if (fields >> name >> packets_in >> bytes_in >> packets_out >> bytes_out && name == link) return bytes_out;
  }
  return 0;
}

std::uint64_t link_column(const std::string& stats, const std::string& link, int column) {
  std::istringstream in(stats);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    std::string w;
    while (fields >> w) f.push_back(w);
    if (!f.empty() && f[0] == link && static_cast<int>(f.size()) > column) return std::stoull(f[static_cast<std::size_t>(column)]);
  }
  return 0;
}

class WanSessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_reason_ = new std::string(namespaces_unavailable());
    if (skip_reason_->empty()) {
      session_ = new WanSession(parse_scenario(kScenario), 3, "a:2,b:1", "");
    }
  }
  static void TearDownTestSuite() {
    delete session_;  // tears down even if a test failed
    session_ = nullptr;
    delete skip_reason_;
  }
  void SetUp() override {
    if (!skip_reason_->empty()) GTEST_SKIP() << "WAN test bed unavailable: " << *skip_reason_;
  }

  static WanSession* session_;
  static std::string* skip_reason_;
};
WanSession* WanSessionTest::session_ = nullptr;
std::string* WanSessionTest::skip_reason_ = nullptr;

TEST_F(WanSessionTest, PlacesRanksInDomains) {
  const WanSession& s = *session_;
  EXPECT_EQ(s.n_ranks(), 3);
  EXPECT_EQ(s.domain_of_rank(0), "a");
  EXPECT_EQ(s.domain_of_rank(1), "a");
  EXPECT_EQ(s.domain_of_rank(2), "b");
  EXPECT_EQ(s.netns_of_rank(0), s.netns_of_rank(1));
  EXPECT_NE(s.netns_of_rank(0), s.netns_of_rank(2));
  EXPECT_EQ(s.master_addr(), s.addr_of_rank(0));
  EXPECT_NE(s.addr_of_rank(0), s.addr_of_rank(2));
  EXPECT_TRUE(netns_exists(s.netns_of_rank(2)));
  EXPECT_THROW(s.domain_of_rank(3), std::out_of_range);
  EXPECT_EQ(s.host_cc(), "cubic");
}

TEST_F(WanSessionTest, RoundTripTimeIsTheConfiguredRtt) {
  UdpEcho echo(session_->netns_of_rank(2), session_->addr_of_rank(2), 7001);
  // The emulator's delay is a floor that the host's scheduling can only add to: a loaded CI
  // machine moved the median of 30 pings to 22.3 ms while the fastest stayed at the configured
  // value, and once, with compilers beside the tests, moved the fastest of 30 to 28.3 ms. So the
  // fastest ping of a round is the emulator's own delay, and a round whose fastest is the
  // configured one shows it; up to five rounds, as a burst of load passes.
  double fastest = 1e9;
  for (int round = 0; round < 5 && !(fastest > 19.8 && fastest < 21.0); ++round) {
    std::vector<double> rtts = udp_rtts(session_->netns_of_rank(0), session_->addr_of_rank(2), 7001, 30, 1000);
    ASSERT_GE(rtts.size(), 28u);
    const double f = *std::min_element(rtts.begin(), rtts.end());
    EXPECT_GT(f, 19.8);  // never faster than light (less the 2 x 50 us early window)
    fastest = std::min(fastest, f);
  }
  EXPECT_LT(fastest, 21.0);  // and nothing systematic on top of it
}

// Every packet the emulator took in: its links' packets_in and the unroutable ones.
std::uint64_t emulator_packets(const std::string& stats) {
  std::uint64_t n = 0;
  std::istringstream in(stats);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    std::uint64_t packets_in = 0;
    if (line.rfind("unroutable ", 0) == 0) n += std::stoull(line.substr(11));
    else if (fields >> name >> packets_in && name.find('>') != std::string::npos) n += packets_in;
  }
  return n;
}

TEST_F(WanSessionTest, IntraDomainTrafficBypassesTheEmulator) {
  // Ranks 0 and 1 share domain a: their packets never reach the emulator (it counts none of the
  // 20 of 10 round trips), so its 20 ms is not in their round trip. The fastest of them is the
  // host's own; the median is not asserted (a loaded CI machine moved it to 2.8 ms).
  UdpEcho echo(session_->netns_of_rank(0), session_->addr_of_rank(1), 7002);
  const std::uint64_t before = emulator_packets(session_->stats());
  std::vector<double> rtts = udp_rtts(session_->netns_of_rank(1), session_->addr_of_rank(0), 7002, 10, 1000);
  const std::uint64_t after = emulator_packets(session_->stats());
  ASSERT_EQ(rtts.size(), 10u);
  EXPECT_LE(after - before, 2u) << "the emulator took in packets of an exchange inside one domain";
  EXPECT_LT(*std::min_element(rtts.begin(), rtts.end()), 10.0);
}

TEST_F(WanSessionTest, RateCapHoldsWithinTenPercent) {
  // Four TCP streams a -> b for 3 s; the rate is measured between 1 s and 3 s,
  // both at the receiver (goodput) and at the emulator's output (IP bytes).
  const std::string ip = session_->addr_of_rank(2);
  constexpr int kStreams = 4;
  std::atomic<bool> listening{false}, stop{false};
  std::atomic<std::uint64_t> received{0};
  NsThread receiver(session_->netns_of_rank(2), [&] {
    Socket l(socket(AF_INET, SOCK_STREAM, 0));
    const int one = 1;
    setsockopt(l.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in sa = address(ip, 7003);
    if (bind(l.fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(l.fd, 8) != 0) return;
    listening = true;
    std::vector<pollfd> fds;
    std::vector<std::unique_ptr<Socket>> conns;
    fds.push_back({l.fd, POLLIN, 0});
    std::vector<char> buf(1 << 16);
    while (!stop) {
      if (poll(fds.data(), fds.size(), 50) <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        if (i == 0) {
          conns.push_back(std::make_unique<Socket>(accept(l.fd, nullptr, nullptr)));
          fds.push_back({conns.back()->fd, POLLIN, 0});
          continue;
        }
        const ssize_t n = recv(fds[i].fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n > 0) received += static_cast<std::uint64_t>(n);
        else if (n == 0) fds[i].fd = -1;  // poll ignores negative fds
      }
    }
  });
  for (int i = 0; i < 200 && !listening; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(listening);

  const auto start = Clock::now();
  std::vector<std::unique_ptr<NsThread>> senders;
  for (int i = 0; i < kStreams; ++i) {
    senders.push_back(std::make_unique<NsThread>(session_->netns_of_rank(0), [&] {
      Socket s(socket(AF_INET, SOCK_STREAM, 0));
      set_timeout(s.fd, 500);
      const sockaddr_in to = address(ip, 7003);
      if (connect(s.fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) return;
      std::vector<char> data(1 << 16, 'x');
      while (Clock::now() - start < std::chrono::milliseconds(3200)) {
        send(s.fd, data.data(), data.size(), MSG_NOSIGNAL);
      }
    }));
  }
  std::this_thread::sleep_until(start + std::chrono::seconds(1));
  const std::uint64_t r1 = received;
  const std::uint64_t e1 = link_bytes_out(session_->stats(), "a>b");
  const auto t1 = Clock::now();
  std::this_thread::sleep_until(start + std::chrono::seconds(3));
  const std::uint64_t r2 = received;
  const std::uint64_t e2 = link_bytes_out(session_->stats(), "a>b");
  const double seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  senders.clear();
  stop = true;

  const double ip_mbit = static_cast<double>(e2 - e1) * 8 / seconds / 1e6;
  const double goodput_mbit = static_cast<double>(r2 - r1) * 8 / seconds / 1e6;
  EXPECT_NEAR(ip_mbit, 100.0, 10.0);
  // TCP payload is 1448 of each 1500-byte packet: 96.5 Mbit/s at most.
  EXPECT_NEAR(goodput_mbit, 96.5, 9.65);
}

TEST_F(WanSessionTest, CutLinkDropsTrafficUntilItEnds) {
  UdpEcho echo(session_->netns_of_rank(2), session_->addr_of_rank(2), 7004);
  const std::uint64_t before = link_column(session_->stats(), "a>b", 7);
  session_->control("cut a-b 300ms");
  const auto cut_at = Clock::now();
  EXPECT_TRUE(udp_rtts(session_->netns_of_rank(0), session_->addr_of_rank(2), 7004, 3, 60).empty());
  std::this_thread::sleep_until(cut_at + std::chrono::milliseconds(350));
  EXPECT_EQ(udp_rtts(session_->netns_of_rank(0), session_->addr_of_rank(2), 7004, 3, 500).size(), 3u);
  EXPECT_GE(link_column(session_->stats(), "a>b", 7), before + 3);  // outage_drops
  EXPECT_THROW(session_->control("cut a-z 1s"), std::runtime_error);
}

TEST_F(WanSessionTest, RankChildEntersItsNamespace) {
  const std::string ip = session_->addr_of_rank(2);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Binding to b's address only works inside b's namespace.
    int ok = 0;
    try {
      session_->enter_rank_namespace(2);
      const int fd = socket(AF_INET, SOCK_DGRAM, 0);
      const sockaddr_in sa = address(ip, 0);
      ok = bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0;
    } catch (...) {
    }
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(WanSessionTest, TeardownRemovesEverythingAndIsIdempotent) {
  std::vector<std::string> names;
  std::string socket_path;
  {
    WanSession s(parse_scenario(kScenario), 2, "", "bbr");
    for (const auto& d : s.domains()) names.push_back(d.netns);
    socket_path = s.control_socket();
    EXPECT_EQ(s.host_cc(), "bbr");
    EXPECT_EQ(access(socket_path.c_str(), F_OK), 0);
    s.teardown();
    s.teardown();
    EXPECT_NO_THROW(s.stats());  // still answers after teardown
  }
  ASSERT_EQ(names.size(), 2u);
  for (const auto& n : names) EXPECT_FALSE(netns_exists(n)) << n;
  EXPECT_NE(access(socket_path.c_str(), F_OK), 0);
}

TEST_F(WanSessionTest, BadArgumentsThrowAndLeaveNothingBehind) {
  const auto before = list_netns();
  EXPECT_THROW(WanSession(parse_scenario(kScenario), 4, "a:2,b:1", ""), std::runtime_error);
  EXPECT_THROW(WanSession(parse_scenario(kScenario), 0, "a:2,q:1", ""), std::runtime_error);
  EXPECT_THROW(WanSession(parse_scenario(kScenario), 0, "a", ""), std::runtime_error);
  EXPECT_THROW(WanSession(parse_scenario(kScenario), 0, "", "vegas"), std::runtime_error);
  EXPECT_EQ(list_netns(), before);
}

TEST_F(WanSessionTest, SweepRemovesNamespacesOfDeadRuns) {
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string stale = "geoccl-" + std::to_string(dead) + "-0-a";
  create_netns(stale);
  const auto removed = WanSession::sweep_stale_namespaces();
  EXPECT_NE(std::find(removed.begin(), removed.end(), stale), removed.end());
  EXPECT_FALSE(netns_exists(stale));
  EXPECT_TRUE(netns_exists(session_->netns_of_rank(0)));  // a live run is left alone
}

}  // namespace
}  // namespace geoccl::testbed
