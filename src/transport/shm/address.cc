#include "transport/shm/address.h"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "geoccl/error.h"
#include "protocol/wire.h"

namespace geoccl::transport::shm {

namespace {
constexpr size_t kMaxField = 256;
}

HostId HostId::current() {
  HostId id;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, id.boot_id);
  struct stat st{};
  if (stat("/proc/self/ns/net", &st) == 0) {
    id.netns_dev = static_cast<uint64_t>(st.st_dev);
    id.netns_ino = static_cast<uint64_t>(st.st_ino);
  } else {
    id.boot_id.clear();  // no namespace identity: claim no host
  }
  return id;
}

std::string HostId::key() const {
  if (boot_id.empty()) return "";
  char ns[40];
  std::snprintf(ns, sizeof ns, "/%llx:%llx", static_cast<unsigned long long>(netns_dev),
                static_cast<unsigned long long>(netns_ino));
  return boot_id + ns;
}

std::vector<uint8_t> encode_address(const Address& a) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u32(kAddressMagic);
  w.u16(kAddressVersion);
  w.u16(0);
  w.str(a.host.boot_id);
  w.u64(a.host.netns_dev);
  w.u64(a.host.netns_ino);
  w.str(a.socket_name);
  return out;
}

bool decode_address(std::span<const uint8_t> in, Address* out) {
  protocol::Reader r(in);
  uint32_t magic = 0;
  uint16_t version = 0, reserved = 1;
  Address a;
  r.u32(&magic);
  r.u16(&version);
  r.u16(&reserved);
  r.str(&a.host.boot_id, kMaxField);
  r.u64(&a.host.netns_dev);
  r.u64(&a.host.netns_ino);
  r.str(&a.socket_name, sizeof(sockaddr_un{}.sun_path) - 1);
  if (!r.ok() || r.remaining() != 0 || magic != kAddressMagic || version != kAddressVersion ||
      reserved != 0 || a.socket_name.empty())
    return false;
  *out = std::move(a);
  return true;
}

socklen_t abstract_sockaddr(const std::string& name, sockaddr_un* out) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(out->sun_path) - 1);
  std::memcpy(out->sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

void fill_random(std::span<uint8_t> out) {
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorCode::kIo, std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
}

}  // namespace geoccl::transport::shm
