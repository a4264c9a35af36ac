// The geoccl::ErrorCode a callable throws (kOk when it returns), for tests of typed errors.
#pragma once

#include "geoccl/error.h"

namespace geoccl::test {

template <class F>
ErrorCode code_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

}  // namespace geoccl::test
