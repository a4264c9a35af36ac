// The protocol decider's rule (topology/transport_choice.h) on invented figures.
#include <gtest/gtest.h>

#include "topology/transport_choice.h"

using geoccl::topology::choose_transport;
using geoccl::topology::PathFigures;

namespace {

PathFigures fig(const char* name, double burst_ms, double cpu, bool ok = true) {
  PathFigures f;
  f.transport = name;
  f.ok = ok;
  f.rtt_ms = 40;
  f.burst_ms = burst_ms;
  f.mbps = 16.0 * 8 * 1024 * 1024 / ((burst_ms - 40) * 1e3);
  f.cpu_s_per_gbit = cpu;
  return f;
}

TEST(TransportChoice, TheClearlyFasterOneWins) {
  auto d = choose_transport({fig("tcp", 400, 0.2), fig("quic", 250, 1.0)});
  EXPECT_EQ(d.chosen, 1);
  EXPECT_NE(d.why.find("60 % faster than tcp"), std::string::npos) << d.why;
  d = choose_transport({fig("tcp", 250, 0.2), fig("quic", 400, 0.1)});
  EXPECT_EQ(d.chosen, 0);
}

TEST(TransportChoice, WithinTheMarginLessCpuWinsAndTiesStayOnTheFirst) {
  EXPECT_EQ(choose_transport({fig("tcp", 300, 0.9), fig("quic", 295, 0.3)}).chosen, 1);
  EXPECT_EQ(choose_transport({fig("tcp", 300, 0.3), fig("quic", 295, 0.9)}).chosen, 0);
  EXPECT_EQ(choose_transport({fig("tcp", 300, 0.5), fig("quic", 300, 0.5)}).chosen, 0);
}

TEST(TransportChoice, AnUnmeasuredCandidateNeverWins) {
  auto d = choose_transport({fig("tcp", 900, 2.0), fig("quic", 100, 0.1, false)});
  EXPECT_EQ(d.chosen, 0);
  EXPECT_NE(d.why.find("quic: not connected"), std::string::npos) << d.why;
  d = choose_transport({fig("tcp", 900, 2.0, false), fig("quic", 100, 0.1, false)});
  EXPECT_EQ(d.chosen, 0);
  EXPECT_NE(d.why.find("nothing measured"), std::string::npos) << d.why;
}

}  // namespace
