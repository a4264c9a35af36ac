#include "testbed/units.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace geoccl::testbed {
namespace {

TEST(Units, Durations) {
  EXPECT_EQ(parse_duration_ns("20ms"), 20'000'000);
  EXPECT_EQ(parse_duration_ns("1.5s"), 1'500'000'000);
  EXPECT_EQ(parse_duration_ns("250us"), 250'000);
  EXPECT_EQ(parse_duration_ns("2m"), 120'000'000'000);
  EXPECT_THROW(parse_duration_ns("20"), std::runtime_error);  // unit required
  EXPECT_THROW(parse_duration_ns("-1s"), std::runtime_error);
  EXPECT_THROW(parse_duration_ns("ms"), std::runtime_error);
  EXPECT_THROW(parse_duration_ns(""), std::runtime_error);
}

TEST(Units, Rates) {
  EXPECT_EQ(parse_rate_bps("1gbit"), 1'000'000'000u);
  EXPECT_EQ(parse_rate_bps("2.5Gbit"), 2'500'000'000u);
  EXPECT_EQ(parse_rate_bps("100mbit"), 100'000'000u);
  EXPECT_EQ(parse_rate_bps("0"), 0u);
  EXPECT_THROW(parse_rate_bps("1gbps"), std::runtime_error);  // bits or bytes? refuse
  EXPECT_THROW(parse_rate_bps("100"), std::runtime_error);
}

TEST(Units, SizesAndLoss) {
  EXPECT_EQ(parse_size_bytes("1500"), 1500u);
  EXPECT_EQ(parse_size_bytes("64KiB"), 65536u);
  EXPECT_EQ(parse_size_bytes("1MB"), 1'000'000u);
  EXPECT_DOUBLE_EQ(parse_loss("0.05%"), 0.0005);
  EXPECT_DOUBLE_EQ(parse_loss("0.01"), 0.01);
  EXPECT_THROW(parse_loss("150%"), std::runtime_error);
  EXPECT_THROW(parse_loss("0.1x"), std::runtime_error);
}

TEST(Units, Formatting) {
  EXPECT_EQ(format_duration(20'000'000), "20ms");
  EXPECT_EQ(format_duration(1'500'000), "1500us");
  EXPECT_EQ(format_rate(1'000'000'000), "1gbit");
  EXPECT_EQ(format_rate(0), "unlimited");
}

}  // namespace
}  // namespace geoccl::testbed
