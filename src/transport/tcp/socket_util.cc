#include "transport/tcp/socket_util.h"

#include <netinet/in.h>
#include <linux/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace geoccl::transport::tcp {

void set_liveness_options(int fd, std::chrono::milliseconds user_timeout, std::chrono::milliseconds idle,
                          std::chrono::milliseconds interval) {
  auto clamp_int = [](int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, 1, INT32_MAX)); };
  if (user_timeout.count() > 0)
    tune_socket(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, clamp_int(user_timeout.count()), "TCP_USER_TIMEOUT");
  if (idle.count() <= 0 || interval.count() <= 0) return;
  const int secs_idle = clamp_int((idle.count() + 999) / 1000), secs_intvl = clamp_int((interval.count() + 999) / 1000);
  tune_socket(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE");
  tune_socket(fd, IPPROTO_TCP, TCP_KEEPIDLE, secs_idle, "TCP_KEEPIDLE");
  tune_socket(fd, IPPROTO_TCP, TCP_KEEPINTVL, secs_intvl, "TCP_KEEPINTVL");
  // Probes until the user timeout ends the connection (it takes precedence over the count).
  // Linux takes at most 127 (MAX_TCP_KEEPCNT); past that the user timeout decides alone.
  tune_socket(fd, IPPROTO_TCP, TCP_KEEPCNT,
              static_cast<int>(std::clamp<int64_t>(user_timeout.count() / 1000 / secs_intvl, 1, 127)), "TCP_KEEPCNT");
}


std::string set_congestion_control(int fd, const std::string& name) {
  setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size()));
  return congestion_control(fd);
}

std::string congestion_control(int fd) {
  char buf[32] = {};
  socklen_t len = sizeof buf;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, sizeof buf));
}



}  // namespace geoccl::transport::tcp
