// CPU time for the benchmarks' "CPU per byte" (geoccl bench, gloo_bench): this
// process's, every thread, user and system; and the test bed's link emulator's, which `geoccl
// run --wan` names in GEOCCL_WAN_EMULATOR_PID. Header-only, no dependency on geoccl.
#pragma once

#include <dirent.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace geoccl::tools {

// Seconds of CPU this process has used, all threads (nanosecond resolution).
inline double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Seconds of CPU the test bed's emulator has used (every live thread's run time from
// /proc/PID/task/TID/schedstat, nanoseconds; the emulator is one thread, so none is lost between
// two readings), or -1 when GEOCCL_WAN_EMULATOR_PID is unset or the process cannot be read.
inline double emulator_cpu_s() {
  const char* pid = std::getenv("GEOCCL_WAN_EMULATOR_PID");
  if (pid == nullptr || *pid == '\0') return -1;
  const std::string tasks = std::string("/proc/") + pid + "/task";
  DIR* d = opendir(tasks.c_str());
  if (d == nullptr) return -1;
  double total = 0;
  bool any = false;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = tasks + "/" + e->d_name + "/schedstat";
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      unsigned long long run_ns = 0;
      if (std::fscanf(f, "%llu", &run_ns) == 1) {
        total += static_cast<double>(run_ns) * 1e-9;
        any = true;
      }
      std::fclose(f);
    }
  }
  closedir(d);
  return any ? total : -1;
}

}  // namespace geoccl::tools
