#include "testbed/control_command.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

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

TEST(ControlCommand, AdversaryCommands) {
  const auto t = parse_control_command("tamper a>b 3");
  EXPECT_EQ(t.verb, Verb::kTamper);
  EXPECT_EQ(t.segments, 3u);
  EXPECT_TRUE(t.link.matches("a", "b"));
  EXPECT_FALSE(t.link.matches("b", "a"));
  EXPECT_TRUE(t.changes_links());
  const auto r = parse_control_command("replay a-b 1");
  EXPECT_EQ(r.verb, Verb::kReplay);
  EXPECT_EQ(r.segments, 1u);
  EXPECT_TRUE(r.link.matches("b", "a"));
  const auto s = parse_control_command("sniff * EEffc000");
  EXPECT_EQ(s.verb, Verb::kSniff);
  EXPECT_EQ(s.pattern, (std::vector<std::uint8_t>{0xEE, 0xFF, 0xC0, 0x00}));
  EXPECT_TRUE(s.link.all());
  EXPECT_TRUE(parse_control_command("sniff a>b off").pattern.empty());
  EXPECT_FALSE(parse_control_command("stats").changes_links());
}

// Bad input to the adversary's commands names what is wrong.
TEST(ControlCommand, RejectsBadAdversaryCommandsClearly) {
  auto message = [](const char* line) {
    try {
      parse_control_command(line);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("tamper a>b"), "usage: tamper LINK N");
  EXPECT_EQ(message("replay a-b 1 2"), "usage: replay LINK N");
  EXPECT_EQ(message("sniff a-b"), "usage: sniff LINK HEX|off");
  for (const char* bad : {"tamper a>b 0", "tamper a>b -1", "tamper a>b 2x", "replay a-b 1000000001",
                          "replay a-b 99999999999"}) {
    EXPECT_NE(message(bad).find("count"), std::string::npos) << bad << ": " << message(bad);
  }
  for (const char* bad : {"sniff a-b abc", "sniff a-b zz", "sniff a-b 0x00",
                          "sniff a-b 00000000000000000000000000000000000000000000000000000000000000000000000000000000"
                          "00000000000000000000000000000000000000000000000000"}) {  // 65 bytes
    EXPECT_NE(message(bad).find("invalid sniff pattern"), std::string::npos) << bad << ": " << message(bad);
  }
  EXPECT_NE(message("tamper a-a 1").find("invalid link"), std::string::npos);
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
