#include "control_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace geoccl::testbed {

std::string control_request(const std::string& socket_path, const std::string& command,
                            int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    throw std::runtime_error("control socket path too long: " + socket_path);
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw std::system_error(errno, std::generic_category(),
                            "cannot reach the wanem control socket " + socket_path);
  }
  const std::string line = command + "\n";
  if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    throw std::system_error(errno, std::generic_category(), "cannot send to " + socket_path);
  }
  shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      reply.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      throw std::system_error(errno, std::generic_category(), "no reply from " + socket_path);
    }
  }
  if (reply.rfind("ok\n", 0) == 0) return reply.substr(3);
  if (reply.rfind("error: ", 0) == 0) {
    std::string msg = reply.substr(7);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    throw std::runtime_error(msg);
  }
  throw std::runtime_error("malformed reply from " + socket_path);
}

}  // namespace geoccl::testbed
