// CHECK(cond, fmt, ...) for the rank programs of the multi-process tests: reports a failed
// condition on stderr and counts it in g_failures (the program's exit status comes from it);
// gives up after 20.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// True in the ASan+UBSan build (GEOCCL_TEST_SANITIZED): a rank program may then check fewer
// sizes or repetitions of the same path, where its own arithmetic dominates the run time.
#ifdef GEOCCL_TEST_SANITIZED
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

int g_failures = 0;
#define CHECK(cond, ...)                                                           \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "CHECK failed %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
      if (++g_failures > 20) std::exit(1);                                         \
    }                                                                              \
  } while (0)

// The integer in environment variable `name`, or `dflt` when it is unset.
inline int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

// GEOCCL_TEST_DOMAINS="a,a,b,...": this rank's GEOCCL_DOMAIN is the RANK-th entry (throws
// std::out_of_range when the list is shorter).
inline void apply_test_domains() {
  const char* doms = std::getenv("GEOCCL_TEST_DOMAINS");
  if (!doms) return;
  std::vector<std::string> list(1);
  for (const char* p = doms; *p; ++p)
    if (*p == ',') list.emplace_back();
    else list.back() += *p;
  setenv("GEOCCL_DOMAIN", list.at(static_cast<size_t>(std::atoi(std::getenv("RANK")))).c_str(), 1);
}

// Wall-clock time in nanoseconds: comparable between the processes of one test.
inline int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace
