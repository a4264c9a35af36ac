// The TCP transport's own socket tuning: the kernel's liveness bounds and congestion control.
// The generic helpers (addresses, connect, bounded I/O, options, buffer sizes) are
// runtime/socket.h; the TCP transport's code names them unqualified.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "runtime/socket.h"

namespace geoccl::transport::tcp {

using runtime::connect_with_timeout;
using runtime::listen_on;
using runtime::local_ip;
using runtime::local_port;
using runtime::pick_free_port;
using runtime::read_all;
using runtime::route_source_address;
using runtime::set_buffer_sizes;
using runtime::set_nodelay;
using runtime::set_nonblocking;
using runtime::split_host_port;
using runtime::tune_socket;
using runtime::write_all;

// The kernel's own liveness bounds of a peer socket (best effort, zero leaves one alone):
// TCP_USER_TIMEOUT (data unacknowledged longer ends the connection with ETIMEDOUT) and keepalive
// probes after `idle` without traffic, every `interval`, until the user timeout.
void set_liveness_options(int fd, std::chrono::milliseconds user_timeout, std::chrono::milliseconds idle,
                          std::chrono::milliseconds interval);
// Requests congestion control `name` (e.g. "bbr") on a socket. Returns the algorithm the kernel
// reports afterwards ("" if it cannot be read), which differs from `name` when it was refused.
std::string set_congestion_control(int fd, const std::string& name);
std::string congestion_control(int fd);

}  // namespace geoccl::transport::tcp
