// The local launcher behind `geoccl run`: starts N ranks with torchrun's environment, prefixes
// their output with the rank, and stops the group as soon as one rank fails.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace geoccl::tools {

struct LaunchSpec {
  int nranks = 1;
  std::vector<std::string> command;
  double timeout_s = 0;  // 0 = none; on expiry ranks are killed and the exit code is 124
  std::string master_addr = "127.0.0.1";
  int master_port = 0;   // 0 = a free port
  // `geoccl run --metrics`: rank r serves /metrics on metrics_base_port + r (0 = off).
  int metrics_base_port = 0;
  // A fresh group secret for this job (GEOCCL_SECRET, docs/security.md) unless the caller's
  // environment names one; `geoccl run --insecure` turns it off. The ranks are children of this
  // launcher on this host, so shared memory between them is trusted (GEOCCL_SHM_TRUST_HOST=1
  // unless set).
  bool secret = true;
  // Extra environment per rank (GEOCCL_DOMAIN, GEOCCL_BIND_ADDR, ...).
  std::function<std::map<std::string, std::string>(int rank)> rank_env;
  // Runs in the forked child before exec (e.g. enter the rank's network namespace).
  std::function<void(int rank)> in_child;
};

// Returns the first non-zero exit code of a rank (128+signal for a signalled rank), 124 on
// timeout, 130 when interrupted, else 0.
int launch(const LaunchSpec& spec);


}  // namespace geoccl::tools
