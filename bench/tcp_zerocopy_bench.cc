// tcp_zerocopy_bench: does MSG_ZEROCOPY beat plain sendmsg() for the transport's large writes?
//
// One TCP connection (loopback by default, or --connect HOST:PORT to a `--listen PORT` peer, e.g.
// across the emulated WAN); the sender writes --total bytes from one buffer in sendmsg() calls
// of --size bytes, non-blocking with poll() like the transport, either copying (mode copy) or
// with MSG_ZEROCOPY and error-queue completions (mode zerocopy); the receiver reads and discards.
// Prints throughput, the sender thread's CPU seconds per GiB (user+sys, RUSAGE_THREAD), and for
// zero copy how many completions the kernel reported as copied anyway (loopback always copies:
// the pages are handed to a local socket, so zero copy only adds the notification cost).
//
//   tcp_zerocopy_bench [--sizes 64K,256K,1M,4M] [--total 4G] [--modes copy,zerocopy]
//                      [--listen PORT | --connect HOST:PORT]
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

uint64_t parse_size(std::string s) {
  uint64_t mult = 1;
  const char c = s.empty() ? 0 : s.back();
  if (c == 'K' || c == 'k') mult = 1ull << 10;
  if (c == 'M' || c == 'm') mult = 1ull << 20;
  if (c == 'G' || c == 'g') mult = 1ull << 30;
  if (mult != 1) s.pop_back();
  return std::strtoull(s.c_str(), nullptr, 10) * mult;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "tcp_zerocopy_bench: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

double thread_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int listen_socket(uint16_t port, uint16_t* bound) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0) die("bind/listen");
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *bound = ntohs(a.sin_port);
  return fd;
}

int connect_to(const std::string& host, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) die("inet_pton");
  for (int i = 0; connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++i) {
    if (i > 100) die("connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fd;
}

// Reads everything until EOF.
void drain(int fd) {
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
  }
}

struct Result {
  double seconds = 0, cpu_s = 0;
  uint64_t calls = 0, zc_calls = 0, completions_copied = 0, completion_reads = 0;
};

// Drains zero-copy completions; returns the number of calls known complete.
uint32_t read_completions(int fd, uint32_t done, Result* r) {
  for (;;) {
    char control[128];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return done;
    ++r->completion_reads;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
      sock_extended_err ee{};
      std::memcpy(&ee, CMSG_DATA(cm), sizeof ee);
      if (ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      if (ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) r->completions_copied += ee.ee_data - ee.ee_info + 1;
      if (ee.ee_data + 1 > done) done = ee.ee_data + 1;
    }
  }
}

Result send_all(int fd, const std::vector<uint8_t>& buf, uint64_t size, uint64_t total, bool zc) {
  Result r;
  if (zc) {
    const int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) die("SO_ZEROCOPY");
  }
  const int fl = MSG_NOSIGNAL | MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0);
  const double cpu0 = thread_cpu_s();
  const auto t0 = Clock::now();
  uint64_t sent = 0;
  uint32_t done = 0;
  size_t off = 0;  // position in the current write of `size` bytes
  while (sent < total) {
    iovec iov{const_cast<uint8_t*>(buf.data()) + off, static_cast<size_t>(size - off)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    const ssize_t n = sendmsg(fd, &msg, fl);
    if (n < 0) {
      if (errno != EAGAIN && errno != ENOBUFS) die("sendmsg");
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      if (zc) done = read_completions(fd, done, &r);
      continue;
    }
    ++r.calls;
    if (zc) ++r.zc_calls;
    sent += static_cast<uint64_t>(n);
    off += static_cast<size_t>(n);
    if (off == size) off = 0;
    if (zc) done = read_completions(fd, done, &r);
  }
  // The buffer is reusable only once every zero-copy call is complete.
  while (zc && done < r.zc_calls) {
    pollfd p{fd, 0, 0};
    poll(&p, 1, 100);
    done = read_completions(fd, done, &r);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.cpu_s = thread_cpu_s() - cpu0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes = "64K,256K,1M,4M", modes = "copy,zerocopy", connect_addr;
  uint64_t total = 4ull << 30;
  int listen_port = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") sizes = next();
    else if (a == "--total") total = parse_size(next());
    else if (a == "--modes") modes = next();
    else if (a == "--listen") listen_port = std::atoi(next().c_str());
    else if (a == "--connect") connect_addr = next();
    else {
      std::fprintf(stderr, "usage: %s [--sizes 64K,1M] [--total 4G] [--modes copy,zerocopy] "
                           "[--listen PORT | --connect HOST:PORT]\n", argv[0]);
      return 2;
    }
  }
  if (listen_port >= 0) {  // remote receiver: one connection per (size, mode) run, until killed
    uint16_t bound = 0;
    const int lfd = listen_socket(static_cast<uint16_t>(listen_port), &bound);
    std::printf("listening on port %u\n", bound);
    std::fflush(stdout);
    for (;;) {
      const int fd = accept(lfd, nullptr, nullptr);
      if (fd < 0) die("accept");
      drain(fd);
      close(fd);
    }
  }
  std::printf("| write size | mode | GiB/s | sender CPU s/GiB | sendmsg calls | completions copied |\n");
  std::printf("|---:|---|---:|---:|---:|---:|\n");
  for (const auto& s : split(sizes)) {
    const uint64_t size = parse_size(s);
    std::vector<uint8_t> buf(size, 0x5a);
    for (const auto& mode : split(modes)) {
      const bool zc = mode == "zerocopy";
      int fd = -1;
      std::thread receiver;
      int lfd = -1;
      if (connect_addr.empty()) {
        uint16_t port = 0;
        lfd = listen_socket(0, &port);
        receiver = std::thread([lfd] {
          const int c = accept(lfd, nullptr, nullptr);
          if (c < 0) die("accept");
          drain(c);
          close(c);
        });
        fd = connect_to("127.0.0.1", port);
      } else {
        const auto colon = connect_addr.rfind(':');
        fd = connect_to(connect_addr.substr(0, colon),
                        static_cast<uint16_t>(std::atoi(connect_addr.c_str() + colon + 1)));
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const Result r = send_all(fd, buf, size, total, zc);
      shutdown(fd, SHUT_WR);
      if (receiver.joinable()) receiver.join();
      close(fd);
      if (lfd >= 0) close(lfd);
      const double gib = static_cast<double>(total) / (1ull << 30);
      std::printf("| %s | %s | %.2f | %.3f | %llu | %s |\n", s.c_str(), mode.c_str(),
                  gib / r.seconds, r.cpu_s / gib, static_cast<unsigned long long>(r.calls),
                  zc ? (std::to_string(r.completions_copied) + " of " + std::to_string(r.zc_calls)).c_str()
                     : "-");
      std::fflush(stdout);
    }
  }
  return 0;
}
