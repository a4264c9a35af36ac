#include "transport/address_card.h"

#include "protocol/wire.h"

namespace geoccl::transport {

namespace {
constexpr uint8_t kVersion = 1;
}  // namespace

const std::vector<uint8_t>* AddressCard::find(std::string_view name) const {
  for (const auto& [n, a] : entries)
    if (n == name) return &a;
  return nullptr;
}

std::vector<uint8_t> encode_address_card(const AddressCard& card) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u8(kVersion);
  w.u16(static_cast<uint16_t>(card.entries.size()));
  for (const auto& [name, address] : card.entries) {
    w.str(name);
    w.blob(address);
  }
  return out;
}

std::optional<AddressCard> decode_address_card(std::span<const uint8_t> in) {
  protocol::Reader r(in);
  uint8_t version = 0;
  uint16_t n = 0;
  if (!r.u8(&version) || version != kVersion || !r.u16(&n) || n > kMaxCardEntries) return std::nullopt;
  AddressCard card;
  card.entries.resize(n);
  for (size_t i = 0; i < card.entries.size(); ++i) {
    auto& [name, address] = card.entries[i];
    if (!r.str(&name, kMaxCardName) || !r.blob(&address, kMaxCardAddress)) return std::nullopt;
    for (size_t j = 0; j < i; ++j)
      if (card.entries[j].first == name) return std::nullopt;
  }
  if (r.remaining() != 0) return std::nullopt;
  return card;
}

}  // namespace geoccl::transport
