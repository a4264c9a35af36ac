// CHECK(cond, fmt, ...) for the rank programs of the multi-process tests: reports a failed
// condition on stderr and counts it in g_failures (the program's exit status comes from it);
// gives up after 20.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace {

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

}  // namespace
