// The protocol decider's rule (GEOCCL_TRANSPORT remote=auto): which transport carries the
// gradient class between two domains, from what the start-up probe measured on each candidate
// between the two domains' leaders (collectives/path_probe.cc). Pure: tested with invented
// figures in tests/unit/transport_choice_test.cc.
//
// The rule: the candidate whose burst (the probe's bytes, one way, in frames of the chunk size)
// finished first wins when it is faster by more than `margin`; within the margin, the one that
// spent less CPU per Gbit/s wins (both ends' CPU time over the burst); a candidate that could
// not be measured (not connected, e.g. UDP blocked) never wins. Ties go to the first (TCP).
#pragma once

#include <string>
#include <vector>

namespace geoccl::topology {

struct PathFigures {
  std::string transport;  // "tcp", "quic"
  bool ok = false;        // connected and measured
  double rtt_ms = 0;      // fastest of the probe's ping-pongs
  double burst_ms = 0;    // time from the first byte sent to the receiver's answer
  double mbps = 0;        // burst bytes over (burst time - one RTT)
  double cpu_s_per_gbit = 0;
};

struct TransportDecision {
  int chosen = 0;   // index into the candidates
  std::string why;  // one line: the figures and the reason
};

TransportDecision choose_transport(const std::vector<PathFigures>& candidates, double margin = 0.05);

// "tcp 20.1 ms 812 Mbit/s 0.52 CPU-s/Gbit" (or "quic: not connected").
std::string describe(const PathFigures& f);

}  // namespace geoccl::topology
