// Client side of the wanem control socket: one command per connection, a
// line in, "ok\n<text>" or "error: <message>\n" back.
#pragma once

#include <string>

namespace geoccl::testbed {

// Returns the reply text after "ok\n"; throws std::runtime_error with the
// emulator's message on "error:", or when the socket cannot be reached.
std::string control_request(const std::string& socket_path, const std::string& command,
                            int timeout_ms = 5000);

}  // namespace geoccl::testbed
