#include "transport/tcp/stall_probe.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>

namespace geoccl::transport::tcp {

StallSample stall_sample(int fd, std::chrono::steady_clock::time_point now,
                         std::chrono::steady_clock::time_point& idle_seen) {
  StallSample out;
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return out;
  out.open = true;
  if (ti.tcpi_unacked == 0) idle_seen = now;
  out.unacked_bytes = static_cast<uint64_t>(ti.tcpi_unacked) * std::max<uint32_t>(ti.tcpi_snd_mss, 1);
  out.since_ack = std::chrono::milliseconds(ti.tcpi_last_ack_recv);
  if (ti.tcpi_unacked > 0)
    out.waiting = std::min(out.since_ack, std::chrono::duration_cast<std::chrono::milliseconds>(now - idle_seen));
  out.srtt = std::chrono::microseconds(ti.tcpi_rtt);
  out.delivery_bps = ti.tcpi_delivery_rate * 8;
  return out;
}

}  // namespace geoccl::transport::tcp
