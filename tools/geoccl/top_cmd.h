// `geoccl top ENDPOINT...`: a refreshing terminal table of the ranks' /metrics endpoints.
#pragma once

#include <string>
#include <vector>

namespace geoccl::tools {

struct TopSpec {
  std::vector<std::string> endpoints;  // host:port or http://host:port[/metrics]
  double interval_s = 1.0;
  int iterations = 0;  // 0 = until interrupted
  bool plain = false;  // no screen clearing (logs, pipes)
};

// Polls every endpoint each interval and redraws the table. Returns 0 (interrupted or done).
// Throws Error(kInvalidArgument) for a malformed endpoint or interval.
int run_top(const TopSpec& spec);

}  // namespace geoccl::tools
