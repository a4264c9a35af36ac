// Faults a test injects into a real transfer, from environment variables read once per call.
// Test-only: nothing sets them in production.
//   GEOCCL_BLOB_TEST_CORRUPT=R:C     on rank R, flip one byte of chunk C as received in the first
//                                    round, before it is verified
//   GEOCCL_BLOB_TEST_EXIT_AFTER=R:N  on rank R, exit the process (status 75) once N chunks have
//                                    been verified and the resume state written (a crashed
//                                    receiver)
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace geoccl::blob {

struct TestHooks {
  int64_t corrupt_chunk = -1;  // chunk to corrupt on this rank, -1: none
  int64_t exit_after = -1;     // verified chunks after which this rank exits, -1: never
};

TestHooks test_hooks_from_env(int rank);
// "R:V" with R == rank -> V; nullopt for anything else (another rank, malformed).
std::optional<int64_t> parse_rank_value(std::string_view s, int rank);

}  // namespace geoccl::blob
