// A WAN scenario: which regions ("domains") exist, how their links behave and
// what happens to the links over time. Loaded from a TOML file; the format is
// documented in docs/testbed.md and examples live in bench/scenarios/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control_command.h"
#include "link_params.h"

namespace geoccl::testbed {

struct DomainSpec {
  std::string name;
  int ranks = 0;                // ranks placed in this domain by default
  std::uint64_t uplink_bps = 0; // shared egress rate of the domain, 0 = none
};

// A link override from the file, applied on top of the default link.
struct LinkOverride {
  LinkSelector link;  // a-b (pair) or a>b (one direction)
  LinkChange change;
};

struct ScheduledEvent {
  std::int64_t at_ns = 0;  // since the emulator started
  std::string text;        // the command as written, for logs
  ControlCommand command;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;  // file path, for messages
  std::uint64_t seed = 1;
  std::uint32_t mtu = 1500;
  QueueLimit queue{0, 20'000'000};  // default queue of every bottleneck
  std::string host_cc = "cubic";
  int ranks_per_domain = 1;
  std::vector<DomainSpec> domains;
  LinkParams default_link;
  std::vector<LinkOverride> overrides;  // pairs first, then one-way entries
  std::vector<ScheduledEvent> events;   // sorted by time

  // Effective parameters of the directed link from -> to.
  LinkParams link(const std::string& from, const std::string& to) const;
  const DomainSpec* find_domain(const std::string& name) const;
  int default_total_ranks() const;
  std::string describe() const;  // human-readable summary
};

// Throws std::runtime_error naming the file, and the line where known.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(const std::string& toml_text, const std::string& source = "<string>");

}  // namespace geoccl::testbed
