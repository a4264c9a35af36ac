// The stall detector's reading of a socket (stall.h is the decision, free of I/O): TCP's view of
// one socket at one moment, for a stream (TcpConnection) or a relay's tunnel (relay.h).
#pragma once

#include <chrono>

#include "transport/tcp/stall.h"

namespace geoccl::transport::tcp {

// The figures of socket `fd` at `now`: one TCP_INFO read. `idle_seen`: when the socket was last
// seen with nothing in flight, kept by the caller and updated here. Not open when the read fails.
StallSample stall_sample(int fd, std::chrono::steady_clock::time_point now,
                         std::chrono::steady_clock::time_point& idle_seen);

}  // namespace geoccl::transport::tcp
