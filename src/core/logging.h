// Leveled logging to stderr, each line tagged with time, rank and domain. Level from
// GEOCCL_LOG_LEVEL (trace|debug|info|warn|error|off); the tag is set once the rank is known.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace geoccl::core {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel l);
// Returns false for an unknown name.
bool parse_log_level(std::string_view s, LogLevel* out);
void set_log_tag(int rank, const std::string& domain);
void log_line(LogLevel l, const std::string& msg);

}  // namespace geoccl::core

#define GEOCCL_LOG(level, expr)                                                \
  do {                                                                         \
    if (::geoccl::core::LogLevel::level >= ::geoccl::core::log_level()) {      \
      std::ostringstream geoccl_log_os_;                                       \
      geoccl_log_os_ << expr;                                                  \
      ::geoccl::core::log_line(::geoccl::core::LogLevel::level, geoccl_log_os_.str()); \
    }                                                                          \
  } while (0)
