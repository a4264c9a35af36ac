// Thin helpers around Linux network namespaces and TUN devices.
//
// Namespaces are created with `ip netns add` so that they are the ordinary,
// named kind that `ip netns exec NAME ...` understands. Removal is done with
// two system calls instead (the same ones `ip netns del` makes), so that it is
// async-signal-safe and can run from a signal handler or a dying process.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace geoccl::testbed {

// Runs argv (searched in PATH) and waits; throws std::runtime_error with the
// command and its stderr when it fails. Returns stdout.
std::string run_command(const std::vector<std::string>& argv);

void create_netns(const std::string& name);
// Unmounts and unlinks /run/netns/NAME. Async-signal-safe; ignores a missing
// namespace. Returns false only if the namespace exists and could not be removed.
bool delete_netns(const char* name) noexcept;
bool netns_exists(const std::string& name);
std::vector<std::string> list_netns();

// Runs fn on a temporary thread that has joined namespace `name`, so the
// caller's own namespace never changes. Exceptions propagate to the caller.
void in_netns(const std::string& name, const std::function<void()>& fn);

// Opens a TUN device (IFF_TUN | IFF_NO_PI, non-blocking) in the calling
// thread's namespace and returns its fd.
int open_tun(const std::string& ifname);

// Writes a /proc/sys value of the calling thread's network namespace.
void write_proc(const std::string& path, const std::string& value);
std::string read_proc(const std::string& path);

}  // namespace geoccl::testbed
