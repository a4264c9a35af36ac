// Published transport addresses (tcp/address.h, shm/address.h, quic/address.h) and the address
// card that carries them (address_card.h): never crash; what decodes re-encodes to the same bytes.
#include <algorithm>
#include <cstdlib>
#include <span>

#include "transport/address_card.h"
#include "transport/quic/address.h"
#include "transport/shm/address.h"
#include "transport/tcp/address.h"

using namespace geoccl::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  std::string endpoint;
  if (tcp::decode_address(in, &endpoint)) {
    const auto again = tcp::encode_address(endpoint);
    if (!std::equal(again.begin(), again.end(), in.begin(), in.end())) std::abort();
  }
  shm::Address a;
  if (shm::decode_address(in, &a)) {
    shm::Address b;
    if (!shm::decode_address(shm::encode_address(a), &b) || b.socket_name != a.socket_name ||
        b.host.boot_id != a.host.boot_id || b.host.netns_ino != a.host.netns_ino ||
        b.host.netns_dev != a.host.netns_dev)
      std::abort();
  }
  quic::Address q;
  if (quic::decode_address(in, &q)) {
    const auto again = quic::encode_address(q);
    if (!std::equal(again.begin(), again.end(), in.begin(), in.end())) std::abort();
  }
  if (const auto card = decode_address_card(in)) {
    const auto again = encode_address_card(*card);
    if (!std::equal(again.begin(), again.end(), in.begin(), in.end())) std::abort();
  }
  return 0;
}
