// Checks the rank programs of the multi-process tests share: results equal on every rank, and
// a call that must fail with a given error code (counted in g_failures, check.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "geoccl/geoccl.h"

namespace {

// All ranks' buffers byte for byte equal (an allgather of the raw bytes).
template <typename T>
bool bit_identical(geoccl::Communicator& c, const std::vector<T>& buf) {
  const size_t bytes = buf.size() * sizeof(T);
  std::vector<uint8_t> all(bytes * static_cast<size_t>(c.size()));
  c.allgather(buf.data(), all.data(), bytes, geoccl::DataType::kUInt8).wait();
  for (int r = 1; r < c.size(); ++r)
    if (std::memcmp(all.data(), all.data() + bytes * static_cast<size_t>(r), bytes) != 0)
      return false;
  return true;
}

// 0 when f() throws Error(code); otherwise a failed CHECK naming `what`, and 1 when it did not
// throw at all.
template <class F>
int expect_code(F&& f, geoccl::ErrorCode code, const char* what) {
  try {
    f();
  } catch (const geoccl::Error& e) {
    CHECK(e.code() == code, "%s: got %s: %s", what,
          std::string(geoccl::error_code_name(e.code())).c_str(), e.what());
    return 0;
  }
  CHECK(false, "%s: no error", what);
  return 1;
}

}  // namespace
