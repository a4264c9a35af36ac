#include "runtime/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>
#include <mutex>
#include <set>

#include "core/logging.h"
#include "geoccl/error.h"

namespace geoccl::runtime {
namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point deadline) {
  const auto d = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return d < 0 ? 0 : static_cast<int>(std::min<int64_t>(d, 1 << 30));
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, ms_until(deadline));
    if (r > 0) return true;
    if (r == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

addrinfo* resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
  if (rc != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot resolve '" + host + "': " + gai_strerror(rc));
  return res;
}

}  // namespace

void split_host_port(const std::string& s, std::string* host, uint16_t* port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) throw Error(ErrorCode::kInvalidArgument, "expected host:port, got '" + s + "'");
  std::string h = s.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = s.substr(colon + 1);
  uint16_t v = 0;
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc() || ptr != p.data() + p.size())
    throw Error(ErrorCode::kInvalidArgument, "bad port in '" + s + "'");
  *host = h;
  *port = v;
}

int listen_on(const std::string& addr, uint16_t port, int backlog) {
  addrinfo* res = resolve(addr, port, true);
  int fd = -1;
  int err = 0;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    tune_socket(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR");
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    throw Error(ErrorCode::kIo, "cannot listen on " + addr + ":" + std::to_string(port) + ": " +
                                    std::strerror(err));
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

uint16_t pick_free_port() {
  // Below the kernel's ephemeral range: a port from inside it can be taken, between this call and
  // the bind that follows, as the source port of any process's outgoing connection (a connection
  // to it then meets that socket, or itself). Random, so that parallel launchers rarely collide.
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  if (low > 12000) {
    std::random_device rd;
    std::uniform_int_distribution<int> pick(10000, low - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const auto port = static_cast<uint16_t>(pick(rd));
      try {
        const int fd = listen_on("127.0.0.1", port, 1);
        ::close(fd);
        return port;
      } catch (const Error&) {
      }
    }
  }
  const int fd = listen_on("127.0.0.1", 0, 1);
  const uint16_t port = local_port(fd);
  ::close(fd);
  return port;
}

std::string local_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  else
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  return buf;
}

std::string route_source_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0) return "";
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // A UDP connect sends nothing; it only asks the routing table for the source address.
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) out = local_ip(fd);
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

int connect_with_timeout(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                         const std::function<void(int)>& before_connect) {
  const auto deadline = Clock::now() + timeout;
  addrinfo* res = nullptr;
  try {
    res = resolve(host, port, false);
  } catch (const Error&) {
    errno = EHOSTUNREACH;
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (before_connect) before_connect(fd);
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (wait_fd(fd, POLLOUT, deadline)) {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      }
    }
    if (rc != 0) {
      const int e = errno;
      close(fd);
      fd = -1;
      errno = e;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    try {
      set_nonblocking(fd, false);
    } catch (const Error&) {
      const int e = errno;
      close(fd);
      errno = e;
      return -1;
    }
  }
  return fd;
}

bool write_all(int fd, std::span<const uint8_t> data, Clock::time_point deadline) {
  size_t off = 0;
  while (off < data.size()) {
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, std::span<uint8_t> data, Clock::time_point deadline) {
  size_t off = 0;
  while (off < data.size()) {
    if (!wait_fd(fd, POLLIN, deadline)) return false;
    const ssize_t n = recv(fd, data.data() + off, data.size() - off, MSG_DONTWAIT);
    if (n == 0) {
      errno = ECONNRESET;
      return false;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

void set_nonblocking(int fd, bool on) {
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)) != 0)
    throw Error(ErrorCode::kIo, std::string(on ? "O_NONBLOCK" : "blocking mode") + " on fd " +
                                    std::to_string(fd) + ": " + std::strerror(errno));
}

void set_nodelay(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    throw Error(ErrorCode::kIo, "TCP_NODELAY on fd " + std::to_string(fd) + ": " + std::strerror(errno));
}

bool tune_socket(int fd, int level, int option, int value, const char* name) {
  if (setsockopt(fd, level, option, &value, sizeof value) == 0) return true;
  const int e = errno;
  static std::mutex mu;
  static std::set<std::string> warned;
  bool first;
  {
    std::lock_guard lk(mu);
    first = warned.insert(name).second;
  }
  if (first)
    GEOCCL_LOG(kWarn, "socket option " << name << "=" << value << " refused (" << std::strerror(e)
                                       << "); going on without it (logged once)");
  errno = e;
  return false;
}


std::pair<uint64_t, uint64_t> set_buffer_sizes(int fd, uint64_t bytes) {
  const int v = static_cast<int>(std::min<uint64_t>(bytes, 1u << 30));
  // SO_*BUFFORCE ignores net.core.{w,r}mem_max; it needs CAP_NET_ADMIN (we run as root on the
  // test bed and in most training containers). Without it the plain option is capped.
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v) != 0)
    tune_socket(fd, SOL_SOCKET, SO_SNDBUF, v, "SO_SNDBUF");
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof v) != 0)
    tune_socket(fd, SOL_SOCKET, SO_RCVBUF, v, "SO_RCVBUF");
  int snd = 0, rcv = 0;
  socklen_t len = sizeof snd;
  getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &len);
  len = sizeof rcv;
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
  return {static_cast<uint64_t>(snd), static_cast<uint64_t>(rcv)};
}

}  // namespace geoccl::runtime
