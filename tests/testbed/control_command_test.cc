#include "testbed/control_command.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace geoccl::testbed {
namespace {

using Verb = ControlCommand::Verb;

TEST(ControlCommand, CutPairForDuration) {
  const auto c = parse_control_command("cut a-b 5s");
  EXPECT_EQ(c.verb, Verb::kCut);
  EXPECT_EQ(c.duration_ns, 5'000'000'000);
  EXPECT_TRUE(c.link.matches("a", "b"));
  EXPECT_TRUE(c.link.matches("b", "a"));
  EXPECT_FALSE(c.link.matches("a", "c"));
}

TEST(ControlCommand, CutOneDirectionUntilRestore) {
  const auto c = parse_control_command("  cut a>b\n");
  EXPECT_EQ(c.duration_ns, 0);
  EXPECT_TRUE(c.link.matches("a", "b"));
  EXPECT_FALSE(c.link.matches("b", "a"));
}

TEST(ControlCommand, SetSeveralKeys) {
  const auto c = parse_control_command("set * loss 0.01 rate 100mbit rtt 40ms queue 64KiB ge 0.01,0.3,0,0.5");
  EXPECT_EQ(c.verb, Verb::kSet);
  EXPECT_TRUE(c.link.all());
  EXPECT_DOUBLE_EQ(*c.change.loss, 0.01);
  EXPECT_EQ(*c.change.rate_bps, 100'000'000u);
  EXPECT_EQ(*c.change.delay_ns, 20'000'000);  // rtt is split over both directions
  EXPECT_EQ(c.change.queue->bytes, 65536u);
  ASSERT_TRUE(c.change.ge.has_value());
  EXPECT_TRUE(c.change.ge->enabled);
  EXPECT_DOUBLE_EQ(c.change.ge->r, 0.3);
  EXPECT_FALSE(c.change.jitter_ns.has_value());
}

TEST(ControlCommand, QueueInTime) {
  const auto c = parse_control_command("set a-b queue 20ms");
  EXPECT_EQ(c.change.queue->ns, 20'000'000);
  EXPECT_EQ(c.change.queue->bytes_at(1'000'000'000), 2'500'000u);
}

TEST(ControlCommand, Rejects) {
  EXPECT_THROW(parse_control_command(""), std::runtime_error);
  EXPECT_THROW(parse_control_command("explode a-b"), std::runtime_error);
  EXPECT_THROW(parse_control_command("cut a-a"), std::runtime_error);
  EXPECT_THROW(parse_control_command("cut A-b"), std::runtime_error);
  EXPECT_THROW(parse_control_command("cut a-b 5"), std::runtime_error);  // unit missing
  EXPECT_THROW(parse_control_command("set a-b loss"), std::runtime_error);
  EXPECT_THROW(parse_control_command("set a-b color red"), std::runtime_error);
  EXPECT_THROW(parse_control_command("set a-b ge 0.1,0.2"), std::runtime_error);
  EXPECT_THROW(parse_control_command("stats now"), std::runtime_error);
}

}  // namespace
}  // namespace geoccl::testbed
