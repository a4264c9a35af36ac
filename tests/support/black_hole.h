// A loopback address that never answers, for tests of paths without a direct answer: a listening
// socket with backlog 0 and one connection queued, never accepted, so the kernel drops every
// further SYN and a connection attempt gets no answer at all, as behind a firewall that drops.
#pragma once

#include <unistd.h>

#include <chrono>
#include <string>

#include "runtime/socket.h"
#include "transport/tcp/address.h"

namespace geoccl::test_support {

struct BlackHole {
  int listener = -1, filler = -1;
  std::string endpoint;
  BlackHole() {
    listener = runtime::listen_on("127.0.0.1", 0, 0);
    const uint16_t port = runtime::local_port(listener);
    endpoint = transport::tcp::join_host_port("127.0.0.1", port);
    filler = runtime::connect_with_timeout("127.0.0.1", port, std::chrono::seconds(2));
  }
  ~BlackHole() {
    if (filler >= 0) ::close(filler);
    ::close(listener);
  }
  BlackHole(const BlackHole&) = delete;
  BlackHole& operator=(const BlackHole&) = delete;
};

}  // namespace geoccl::test_support
