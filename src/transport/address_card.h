// A rank's address card: the address of each of its devices (one per device and priority class,
// named as the Router names them: "tcp", "tcp.bulk", "shm", "quic"), published in the store as
// one value, so that a peer reads all of them with one request instead of one per device and
// class.
//
//   u8 version (1) | u16 count | count x { str name (u32 length + bytes), blob address (u32 length + bytes) }
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace geoccl::transport {

struct AddressCard {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> entries;
  // The address published under `name`, or null.
  const std::vector<uint8_t>* find(std::string_view name) const;
};

inline constexpr size_t kMaxCardEntries = 64;
inline constexpr size_t kMaxCardName = 64;
inline constexpr size_t kMaxCardAddress = 4096;

std::vector<uint8_t> encode_address_card(const AddressCard& card);
// nullopt for bytes that are not a card of this version: more than kMaxCardEntries entries, a
// name or address over its bound, a name listed twice, or trailing bytes.
std::optional<AddressCard> decode_address_card(std::span<const uint8_t> in);

}  // namespace geoccl::transport
