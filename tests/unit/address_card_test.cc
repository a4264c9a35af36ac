// The address card a rank publishes (src/transport/address_card.h): every device's address in one
// store value. No sockets.
#include <gtest/gtest.h>

#include "transport/address_card.h"

using namespace geoccl::transport;

TEST(AddressCard, RoundTripsAndFindsByName) {
  AddressCard c;
  c.entries = {{"tcp", {1, 2, 3}}, {"tcp.bulk", {4}}, {"shm", {}}};
  const auto bytes = encode_address_card(c);
  const auto d = decode_address_card(bytes);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->entries, c.entries);
  ASSERT_TRUE(d->find("tcp.bulk"));
  EXPECT_EQ(*d->find("tcp.bulk"), std::vector<uint8_t>{4});
  EXPECT_EQ(d->find("quic"), nullptr);
  EXPECT_EQ(encode_address_card(*d), bytes);
  EXPECT_TRUE(decode_address_card(encode_address_card({})));
}

TEST(AddressCard, RejectsMalformedCards) {
  AddressCard c;
  c.entries = {{"tcp", {1, 2, 3}}, {"shm", {9}}};
  const auto good = encode_address_card(c);
  // Every truncation, a trailing byte, another version.
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_FALSE(decode_address_card(std::span(good.data(), n))) << n;
  auto longer = good;
  longer.push_back(0);
  EXPECT_FALSE(decode_address_card(longer));
  auto version = good;
  version[0] = 2;
  EXPECT_FALSE(decode_address_card(version));
  // A name listed twice, a name or an address over its bound, too many entries.
  c.entries = {{"tcp", {1}}, {"tcp", {2}}};
  EXPECT_FALSE(decode_address_card(encode_address_card(c)));
  c.entries = {{std::string(kMaxCardName + 1, 'x'), {1}}};
  EXPECT_FALSE(decode_address_card(encode_address_card(c)));
  c.entries = {{"tcp", std::vector<uint8_t>(kMaxCardAddress + 1, 7)}};
  EXPECT_FALSE(decode_address_card(encode_address_card(c)));
  c.entries.clear();
  for (size_t i = 0; i <= kMaxCardEntries; ++i) c.entries.push_back({"d" + std::to_string(i), {}});
  EXPECT_FALSE(decode_address_card(encode_address_card(c)));
}
