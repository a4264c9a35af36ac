// `geoccl probe`: measures the RTT matrix and per-path rates between the ranks of a job and prints
// the domains found (run under `geoccl run`, with or without --wan).
#pragma once

#include <cstddef>

namespace geoccl::tools {

// `rate_bytes`: bytes sent one way per pair to estimate its rate (0 = RTTs only).
int run_probe(size_t rate_bytes);

}  // namespace geoccl::tools
