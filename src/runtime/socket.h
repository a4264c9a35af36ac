// Small POSIX socket helpers: addresses, listening, connecting with a deadline, bounded blocking
// I/O and the socket options everything relies on. Used by the transports and the rendezvous
// store alike; the TCP transport's own tuning is transport/tcp/socket_util.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>

namespace geoccl::runtime {

// Parses "host:port" / "[v6]:port". Throws Error(kInvalidArgument).
void split_host_port(const std::string& s, std::string* host, uint16_t* port);

// A listening socket on addr:port (port 0 = any), non-blocking, CLOEXEC. Throws Error(kIo).
int listen_on(const std::string& addr, uint16_t port, int backlog = 512);
uint16_t local_port(int fd);
// A port that was free on 127.0.0.1 a moment ago (for launchers and tests), below the ephemeral
// range where the system has room. Throws Error(kIo).
uint16_t pick_free_port();
std::string local_ip(int fd);

// The local address the kernel would use to reach `host` (no packet is sent). "" on failure.
std::string route_source_address(const std::string& host);

// Connects with a deadline; returns a blocking socket or -1 (errno set). `before_connect`, if
// given, runs on the fresh socket before connect() (socket options that shape the handshake).
int connect_with_timeout(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                         const std::function<void(int)>& before_connect = {});

// Blocking-socket I/O bounded by a deadline. Return false on EOF, error or timeout (errno=ETIMEDOUT).
bool write_all(int fd, std::span<const uint8_t> data, std::chrono::steady_clock::time_point deadline);
bool read_all(int fd, std::span<uint8_t> data, std::chrono::steady_clock::time_point deadline);

// Options the code relies on: both throw Error(kIo) when the kernel refuses them.
void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);
// Best-effort tuning (SO_REUSEADDR, buffer sizes, TCP_NOTSENT_LOWAT...): returns whether the
// kernel took the option (errno set when not). The first refusal of each `name` is logged as a
// warning, later ones are not.
bool tune_socket(int fd, int level, int option, int value, const char* name);
// Sets SO_SNDBUF and SO_RCVBUF to `bytes`, with the FORCE variants (CAP_NET_ADMIN) when the
// system maximum (net.core.wmem_max / rmem_max) is lower, and falls back to the plain options
// (capped by the maximum, best effort: see tune_socket) without the capability. This turns the kernel's autotuning off for the
// socket. Returns what the kernel holds afterwards (it doubles the request for bookkeeping).
std::pair<uint64_t, uint64_t> set_buffer_sizes(int fd, uint64_t bytes);

}  // namespace geoccl::runtime
