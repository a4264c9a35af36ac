// What a rank process holds, read from /proc and getrusage: the figures `geoccl bench
// --resources` reports per job size (bench/scale.sh) and per byte moved.
#pragma once

#include <string>

namespace geoccl::tools {

struct Resources {
  double rss_mb = 0;       // resident set (VmRSS), shared memory included
  double peak_rss_mb = 0;  // VmHWM
  double shmem_mb = 0;     // resident shared memory mapped by this process (RssShmem)
  int sockets = 0;         // open sockets (TCP, UDP, unix)
  int segments = 0;        // shared-memory segments mapped (memfd: the shm transport's rings)
  int threads = 0;
  double cpu_s = 0;        // user + system CPU time of the process so far
};

// This process's figures now. Fields the kernel does not report stay 0.
Resources read_resources();

}  // namespace geoccl::tools
