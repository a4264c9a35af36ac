// The bytes a rank publishes for its shared-memory device, and whether another rank can use them.
//
// Two ranks share a host when they run under the same kernel boot (/proc/sys/kernel/random/
// boot_id) and in the same network namespace (the st_dev/st_ino of /proc/self/ns/net): the
// device's socket is an abstract unix socket, which exists per network namespace only, and the
// WAN test bed puts each region in its own namespace, so ranks of different regions are different
// hosts even on one machine. The hostname proves nothing (containers share it or not at will).
// What the address claims is then proven in the handshake: the dialler's token must be read back
// from the memory it shares (device.h).
//
// Address (little-endian): u32 magic "GSHA" | u16 version | u16 reserved(0) |
//                          str boot_id | u64 netns_dev | u64 netns_ino | str socket_name
// (str = u32 length + bytes).
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace geoccl::transport::shm {

struct HostId {
  std::string boot_id;  // empty when unreadable: then no host is the same as ours
  uint64_t netns_dev = 0, netns_ino = 0;

  // This process's boot id and network namespace.
  static HostId current();
  // "BOOT_ID/NETNS_DEV:NETNS_INO" (hex; at most 70 bytes), "" when the boot id is unknown.
  std::string key() const;
  bool same_host(const HostId& o) const {
    return !boot_id.empty() && boot_id == o.boot_id && netns_dev == o.netns_dev &&
           netns_ino == o.netns_ino;
  }
};

struct Address {
  HostId host;
  std::string socket_name;  // abstract unix socket (without the leading NUL)
};

inline constexpr uint32_t kAddressMagic = 0x41485347;  // "GSHA"
inline constexpr uint16_t kAddressVersion = 1;

std::vector<uint8_t> encode_address(const Address& a);
// False (and *out untouched) for bytes that are not a shared-memory address of this version.
bool decode_address(std::span<const uint8_t> in, Address* out);

// The sockaddr of abstract socket `name` (at most 107 bytes); returns its length for bind/connect.
socklen_t abstract_sockaddr(const std::string& name, sockaddr_un* out);

// Fills `out` from the kernel's random source. Throws Error(kIo).
void fill_random(std::span<uint8_t> out);

}  // namespace geoccl::transport::shm
