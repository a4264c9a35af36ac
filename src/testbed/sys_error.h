#pragma once
// The test bed's system-call failures: std::system_error carrying errno and what failed.

#include <cerrno>
#include <string>
#include <system_error>

namespace geoccl::testbed {

[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace geoccl::testbed
