// The QUIC device's UDP socket: one per device, shared by every connection (they are told apart
// by connection ID), non-blocking, with large kernel buffers, and the kernel's batching where it
// has it:
//  - UDP GSO (UDP_SEGMENT): a run of equal-size packets to one peer leaves in one sendmsg() and
//    the kernel cuts it (up to kMaxSegments);
//  - UDP GRO (UDP_GRO): the kernel hands several packets of one flow up in one buffer, with
//    their size in a control message;
//  - IP_RECVERR: ICMP errors (port unreachable: nobody listens there any more) are read from
//    the error queue, so a dead peer is noticed at its next packet, not after an idle timeout.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace geoccl::transport::quic {

inline constexpr size_t kMaxSegments = 64;
inline constexpr size_t kMaxDatagram = 65527;  // what one GRO buffer can hold

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool operator==(const Endpoint& o) const;
};

// "ip:port" -> Endpoint. Throws Error(kInvalidArgument).
Endpoint resolve_endpoint(const std::string& endpoint);
std::string endpoint_string(const Endpoint& e);
// The largest UDP payload a datagram to `to` carries without fragmentation: the MTU of the
// route's interface less the IP and UDP headers (1452 when it cannot be read), at most `cap`.
size_t max_udp_payload(const Endpoint& to, size_t cap);

class UdpSocket {
 public:
  // Binds host:0 (any port). Throws Error(kIo).
  explicit UdpSocket(const std::string& host, uint64_t buffer_bytes);
  ~UdpSocket();
  UdpSocket(const UdpSocket&) = delete;
  UdpSocket& operator=(const UdpSocket&) = delete;

  int fd() const { return fd_; }
  const Endpoint& local() const { return local_; }
  bool gso() const { return gso_; }

  enum class SendResult { kSent, kBlocked, kError };
  // Sends `data` to `to`: one datagram, or with segment > 0 and GSO, datagrams of `segment`
  // bytes (the last may be shorter). kBlocked: the socket buffer is full (EAGAIN), retry on
  // EPOLLOUT. Without GSO a batch is sent packet by packet (kBlocked may then leave part sent:
  // *sent_bytes says how much).
  SendResult send(const Endpoint& to, std::span<const uint8_t> data, size_t segment, size_t* sent_bytes);

  // Reads what is queued: calls on_packet(from, bytes) for every packet (a GRO buffer is split).
  // Returns the packets read (stops at EAGAIN or after `budget` reads).
  size_t receive(const std::function<void(const Endpoint&, std::span<const uint8_t>)>& on_packet,
                 size_t budget = 64);
  // Reads the error queue: calls on_error(offender, errno value, text) for each ICMP error.
  void read_errors(const std::function<void(const Endpoint&, int, const std::string&)>& on_error);

 private:
  int fd_ = -1;
  Endpoint local_;
  bool gso_ = false;
  bool gso_failed_ = false;
  std::vector<uint8_t> rbuf_;
};

}  // namespace geoccl::transport::quic
