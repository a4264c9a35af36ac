#include "transport/quic/udp.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/tcp/address.h"
#include "runtime/socket.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace geoccl::transport::quic {

bool Endpoint::operator==(const Endpoint& o) const {
  if (addr.ss_family != o.addr.ss_family) return false;
  if (addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
    const auto& b = reinterpret_cast<const sockaddr_in&>(o.addr);
    return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
  }
  const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
  const auto& b = reinterpret_cast<const sockaddr_in6&>(o.addr);
  return a.sin6_port == b.sin6_port && std::memcmp(&a.sin6_addr, &b.sin6_addr, sizeof a.sin6_addr) == 0;
}

Endpoint resolve_endpoint(const std::string& endpoint) {
  std::string host;
  uint16_t port = 0;
  runtime::split_host_port(endpoint, &host, &port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  if (getaddrinfo(host.c_str(), p.c_str(), &hints, &res) != 0 || !res)
    throw Error(ErrorCode::kInvalidArgument, "cannot resolve '" + endpoint + "'");
  Endpoint e;
  std::memcpy(&e.addr, res->ai_addr, res->ai_addrlen);
  e.len = res->ai_addrlen;
  freeaddrinfo(res);
  return e;
}

std::string endpoint_string(const Endpoint& e) {
  char host[INET6_ADDRSTRLEN] = {0};
  uint16_t port = 0;
  if (e.addr.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(e.addr);
    inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    port = ntohs(a.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto& a = reinterpret_cast<const sockaddr_in6&>(e.addr);
  inet_ntop(AF_INET6, &a.sin6_addr, host, sizeof host);
  port = ntohs(a.sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

size_t max_udp_payload(const Endpoint& to, size_t cap) {
  const bool v6 = to.addr.ss_family == AF_INET6;
  size_t payload = 1452;
  const int fd = ::socket(to.addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::min(payload, cap);
  int mtu = 0;
  socklen_t len = sizeof mtu;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to.addr), to.len) == 0 &&
      getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU : IP_MTU, &mtu, &len) == 0 && mtu > 1280)
    payload = static_cast<size_t>(mtu) - (v6 ? 48 : 28);
  ::close(fd);
  return std::min(payload, cap);
}

UdpSocket::UdpSocket(const std::string& host, uint64_t buffer_bytes) : rbuf_(kMaxDatagram) {
  const Endpoint bind_to = resolve_endpoint(tcp::join_host_port(host, 0));
  fd_ = ::socket(bind_to.addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw Error(ErrorCode::kIo, std::string("UDP socket: ") + std::strerror(errno));
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&bind_to.addr), bind_to.len) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(ErrorCode::kIo, "UDP bind " + host + ": " + std::strerror(e));
  }
  local_.len = sizeof local_.addr;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&local_.addr), &local_.len);
  if (buffer_bytes > 0) runtime::set_buffer_sizes(fd_, buffer_bytes);
  const bool v6 = local_.addr.ss_family == AF_INET6;
  runtime::tune_socket(fd_, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_RECVERR : IP_RECVERR, 1, "IP_RECVERR");
  // Path MTU: do not fragment (QUIC sizes its own packets).
  runtime::tune_socket(fd_, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU_DISCOVER : IP_MTU_DISCOVER,
                   v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
  int one = 1;
  gso_ = setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &(one = 0), sizeof one) == 0;
  setsockopt(fd_, SOL_UDP, UDP_GRO, &(one = 1), sizeof one);
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

UdpSocket::SendResult UdpSocket::send(const Endpoint& to, std::span<const uint8_t> data, size_t segment,
                                      size_t* sent_bytes) {
  *sent_bytes = 0;
  auto one = [&](std::span<const uint8_t> d, size_t seg) -> SendResult {
    iovec iov{const_cast<uint8_t*>(d.data()), d.size()};
    msghdr m{};
    m.msg_name = const_cast<sockaddr_storage*>(&to.addr);
    m.msg_namelen = to.len;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(uint16_t))] = {};
    if (seg > 0 && seg < d.size()) {
      m.msg_control = ctl;
      m.msg_controllen = sizeof ctl;
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const auto s = static_cast<uint16_t>(seg);
      std::memcpy(CMSG_DATA(c), &s, sizeof s);
    }
    for (;;) {
      if (::sendmsg(fd_, &m, MSG_NOSIGNAL) >= 0) return SendResult::kSent;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return SendResult::kBlocked;
      // A refused or unreachable destination is reported again through the error queue; a
      // datagram lost to it is QUIC's to recover.
      if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH || errno == EMSGSIZE)
        return SendResult::kSent;
      if (seg > 0 && (errno == EIO || errno == EINVAL) && !gso_failed_) {
        // The device cannot offload segmentation: go on without GSO.
        gso_failed_ = true;
        gso_ = false;
        GEOCCL_LOG(kInfo, "QUIC: UDP GSO refused (" << std::strerror(errno) << "); sending packet by packet");
        return SendResult::kError;
      }
      return SendResult::kError;
    }
  };
  if (segment > 0 && segment < data.size() && gso_) {
    const SendResult r = one(data, segment);
    if (r == SendResult::kSent) *sent_bytes = data.size();
    if (r != SendResult::kError || gso_) return r;
  }
  const size_t step = segment > 0 ? segment : data.size();
  while (*sent_bytes < data.size()) {
    const size_t n = std::min(step, data.size() - *sent_bytes);
    const SendResult r = one(data.subspan(*sent_bytes, n), 0);
    if (r != SendResult::kSent) return r;
    *sent_bytes += n;
  }
  return SendResult::kSent;
}

size_t UdpSocket::receive(const std::function<void(const Endpoint&, std::span<const uint8_t>)>& on_packet,
                          size_t budget) {
  size_t packets = 0;
  for (size_t i = 0; i < budget; ++i) {
    Endpoint from;
    iovec iov{rbuf_.data(), rbuf_.size()};
    msghdr m{};
    m.msg_name = &from.addr;
    m.msg_namelen = sizeof from.addr;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t ctl[CMSG_SPACE(sizeof(int))] = {};
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    const ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN, or an error that the error queue explains
    }
    from.len = m.msg_namelen;
    size_t seg = static_cast<size_t>(n);
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int s = 0;
        std::memcpy(&s, CMSG_DATA(c), sizeof s);
        if (s > 0) seg = static_cast<size_t>(s);
      }
    for (size_t off = 0; off < static_cast<size_t>(n); off += seg) {
      on_packet(from, std::span<const uint8_t>(rbuf_.data() + off, std::min(seg, static_cast<size_t>(n) - off)));
      ++packets;
    }
  }
  return packets;
}

void UdpSocket::read_errors(const std::function<void(const Endpoint&, int, const std::string&)>& on_error) {
  for (int i = 0; i < 64; ++i) {
    uint8_t data[256];
    Endpoint to;
    iovec iov{data, sizeof data};
    msghdr m{};
    m.msg_name = &to.addr;
    m.msg_namelen = sizeof to.addr;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t ctl[512];
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    if (::recvmsg(fd_, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    to.len = m.msg_namelen;  // the destination of the datagram that failed
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (!((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
            (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)))
        continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      if (ee.ee_origin == SO_EE_ORIGIN_ICMP || ee.ee_origin == SO_EE_ORIGIN_ICMP6 ||
          ee.ee_origin == SO_EE_ORIGIN_LOCAL)
        on_error(to, static_cast<int>(ee.ee_errno), std::strerror(static_cast<int>(ee.ee_errno)));
    }
  }
}

}  // namespace geoccl::transport::quic
