#include "testbed/scenario.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace geoccl::testbed {
namespace {

constexpr const char* kFull = R"(
name = "t"
seed = 9
mtu = 9000
queue = "10ms"
host_cc = "bbr"
ranks_per_domain = 2
uplink = "1gbit"

[domains.x]
ranks = 3
[domains.b]
uplink = "10gbit"
[domains.a]

[links.default]
rtt = "40ms"
loss = 0.0005

[links.a-b]
rtt = "100ms"
rate = "500mbit"
gilbert_elliott = { p = 0.01, r = 0.3, loss_bad = 0.5 }

[links."b>a"]
delay = "60ms"
jitter = "1ms"

[[events]]
at = "20s"
command = "set a-b loss 1%"

[[events]]
at = "10s"
command = "cut x-b 5s"
)";

TEST(Scenario, ParsesEveryField) {
  const Scenario s = parse_scenario(kFull);
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.seed, 9u);
  EXPECT_EQ(s.mtu, 9000u);
  EXPECT_EQ(s.host_cc, "bbr");
  ASSERT_EQ(s.domains.size(), 3u);
  // File order, not alphabetical.
  EXPECT_EQ(s.domains[0].name, "x");
  EXPECT_EQ(s.domains[0].ranks, 3);
  EXPECT_EQ(s.domains[1].name, "b");
  EXPECT_EQ(s.domains[1].uplink_bps, 10'000'000'000u);
  EXPECT_EQ(s.domains[2].ranks, 2);
  EXPECT_EQ(s.domains[2].uplink_bps, 1'000'000'000u);
  EXPECT_EQ(s.default_total_ranks(), 7);

  const LinkParams xa = s.link("x", "a");
  EXPECT_EQ(xa.delay_ns, 20'000'000);
  EXPECT_DOUBLE_EQ(xa.loss, 0.0005);
  EXPECT_EQ(xa.mtu, 9000u);
  EXPECT_EQ(xa.queue.ns, 10'000'000);
  EXPECT_EQ(xa.rate_bps, 0u);

  const LinkParams ab = s.link("a", "b");
  EXPECT_EQ(ab.delay_ns, 50'000'000);
  EXPECT_EQ(ab.rate_bps, 500'000'000u);
  EXPECT_TRUE(ab.ge.enabled);
  EXPECT_DOUBLE_EQ(ab.ge.loss_bad, 0.5);
  EXPECT_DOUBLE_EQ(ab.ge.loss_good, 0.0);

  const LinkParams ba = s.link("b", "a");  // pair entry, then the one-way entry
  EXPECT_EQ(ba.delay_ns, 60'000'000);
  EXPECT_EQ(ba.jitter_ns, 1'000'000);
  EXPECT_EQ(ba.rate_bps, 500'000'000u);

  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].at_ns, 10'000'000'000);  // sorted by time
  EXPECT_EQ(s.events[0].command.verb, ControlCommand::Verb::kCut);
  EXPECT_DOUBLE_EQ(*s.events[1].command.change.loss, 0.01);
}

void expect_error(const std::string& toml, const std::string& fragment) {
  try {
    parse_scenario(toml, "bad.toml");
    ADD_FAILURE() << "accepted: " << toml;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("bad.toml", 0), 0u) << e.what();
  }
}

TEST(Scenario, RejectsMistakesWithAClearMessage) {
  expect_error("[domains.a]\n[links.default]\nlos = 0.1\n", "unknown key 'los'");
  expect_error("[domains.a]\n[links.default]\nrtt = \"20\"\n", "unit");
  expect_error("[domains.a]\n[links.a-z]\nrtt = \"20ms\"\n", "unknown domain 'z'");
  expect_error("mtu = 1500\n", "[domains]");
  expect_error("[domains.A]\n", "domain name");
  expect_error("host_cc = \"vegas\"\n[domains.a]\n", "host_cc");
  expect_error("[domains.a]\n[domains.b]\n[[events]]\nat = \"1s\"\ncommand = \"stats\"\n", "events may only");
  expect_error("[domains.a]\n[links.default]\nloss = 2.0\n", "ratio");
  expect_error("[domains.a\n", "bad.toml:");
  expect_error("[domains.a]\n[links.default]\nrtt = \"1ms\"\ndelay = \"1ms\"\n", "not both");
}

TEST(Scenario, EventsMayArmTheAdversary) {
  const Scenario s = parse_scenario(
      "[domains.a]\n[domains.b]\n"
      "[[events]]\nat = \"2s\"\ncommand = \"tamper a>b 1\"\n"
      "[[events]]\nat = \"0s\"\ncommand = \"sniff a-b c0ffee\"\n"
      "[[events]]\nat = \"1s\"\ncommand = \"replay b>a 4\"\n",
      "adv.toml");
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[0].command.verb, ControlCommand::Verb::kSniff);
  EXPECT_EQ(s.events[0].command.pattern, (std::vector<std::uint8_t>{0xC0, 0xFF, 0xEE}));
  EXPECT_EQ(s.events[1].command.verb, ControlCommand::Verb::kReplay);
  EXPECT_EQ(s.events[1].command.segments, 4u);
  EXPECT_EQ(s.events[2].command.verb, ControlCommand::Verb::kTamper);
  expect_error("[domains.a]\n[domains.b]\n[[events]]\nat = \"1s\"\ncommand = \"tamper a>c 1\"\n",
               "unknown domain 'c'");
  expect_error("[domains.a]\n[domains.b]\n[[events]]\nat = \"1s\"\ncommand = \"sniff a-b xyz\"\n",
               "invalid sniff pattern 'xyz'");
  expect_error("[domains.a]\n[domains.b]\n[[events]]\nat = \"1s\"\ncommand = \"replay a-b 0\"\n",
               "invalid replay count '0'");
}

TEST(Scenario, MissingFileIsReported) {
  EXPECT_THROW(load_scenario("/nonexistent/scenario.toml"), std::runtime_error);
}

TEST(Scenario, ShippedScenariosLoad) {
  for (const char* name : {"seed", "three-regions", "lossy", "intercontinental", "wan-fast-test", "adversary"}) {
    SCOPED_TRACE(name);
    const Scenario s = load_scenario(std::string(GEOCCL_SCENARIO_DIR) + "/" + name + ".toml");
    EXPECT_EQ(s.name, name);
    EXPECT_GE(s.domains.size(), 2u);
  }
  const Scenario seed = load_scenario(std::string(GEOCCL_SCENARIO_DIR) + "/seed.toml");
  EXPECT_EQ(seed.domains.size(), 3u);
  EXPECT_EQ(seed.default_total_ranks(), 6);
  EXPECT_EQ(seed.link("a", "b").delay_ns, 10'000'000);
  EXPECT_DOUBLE_EQ(seed.link("a", "b").loss, 0.0005);
  // The sniffer of wan_adversary: from the start, both directions, mp_check marker's 16 bytes.
  const Scenario adv = load_scenario(std::string(GEOCCL_SCENARIO_DIR) + "/adversary.toml");
  ASSERT_EQ(adv.events.size(), 1u);
  EXPECT_EQ(adv.events[0].at_ns, 0);
  EXPECT_EQ(adv.events[0].command.verb, ControlCommand::Verb::kSniff);
  EXPECT_EQ(adv.events[0].command.pattern.size(), 16u);
  EXPECT_TRUE(adv.events[0].command.link.matches("b", "a"));
}

}  // namespace
}  // namespace geoccl::testbed
