// The one-line command language that changes links while traffic flows. The
// same grammar serves the control socket (`geoccl wanem ctl SOCKET ...`) and
// the [[events]] of a scenario file, so it is documented and tested once.
//
//   cut LINK [DURATION]          cut until restored, or for DURATION
//   restore LINK                 end a cut now
//   set LINK KEY VALUE [...]     keys: rtt delay jitter rate queue loss mtu ge
//   tamper LINK N                flip a payload byte of the next N TCP segments with payload
//   replay LINK N                give the next N such segments their flow's previous payload
//   sniff LINK HEX|off           count segments whose TCP payload contains the bytes HEX
//   stats                        per-link counters
//   links                        current parameters of every link
//   help
//
// LINK is "a-b" (both directions), "a>b" (one direction) or "*" (all links).
// `set a-b rtt 40ms` sets 20 ms one-way delay in each direction; ge takes
// "off" or "P,R,LOSS_GOOD,LOSS_BAD".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "link_params.h"

namespace geoccl::testbed {

struct LinkSelector {
  std::string from;  // "*" for every link
  std::string to;
  bool both_directions = false;

  bool all() const { return from == "*"; }
  // Whether the directed link from -> to is selected.
  bool matches(const std::string& src, const std::string& dst) const {
    if (all()) return true;
    if (src == from && dst == to) return true;
    return both_directions && src == to && dst == from;
  }
  std::string to_string() const;
};

struct ControlCommand {
  enum class Verb { kCut, kRestore, kSet, kTamper, kReplay, kSniff, kStats, kLinks, kHelp };
  Verb verb = Verb::kHelp;
  LinkSelector link;
  std::int64_t duration_ns = 0;       // cut: 0 = until restore
  LinkChange change;                  // set
  std::uint32_t segments = 0;         // tamper, replay
  std::vector<std::uint8_t> pattern;  // sniff: empty = off

  // The verbs that change links (the ones a scenario's [[events]] may use).
  bool changes_links() const { return verb != Verb::kStats && verb != Verb::kLinks && verb != Verb::kHelp; }
};

// Throws std::runtime_error with a message fit for the user on bad input.
ControlCommand parse_control_command(std::string_view line);

std::string control_help();

// Validates a domain name: [a-z][a-z0-9_]{0,11}. Short, because it becomes
// part of a network namespace name.
bool is_valid_domain_name(std::string_view name);

}  // namespace geoccl::testbed
