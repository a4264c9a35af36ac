#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace geoccl::core {
namespace {

LogLevel initial_level() {
  LogLevel l = LogLevel::kWarn;
  if (const char* e = std::getenv("GEOCCL_LOG_LEVEL")) parse_log_level(e, &l);
  return l;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

std::mutex& tag_mu() {
  static std::mutex mu;
  return mu;
}
std::string& tag() {
  static std::string t = "[geoccl]";
  return t;
}

}  // namespace

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel l) { level_ref().store(l, std::memory_order_relaxed); }

bool parse_log_level(std::string_view s, LogLevel* out) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [name, l] : kNames)
    if (s == name) {
      *out = l;
      return true;
    }
  return false;
}

void set_log_tag(int rank, const std::string& domain) {
  std::lock_guard lk(tag_mu());
  tag() = "[geoccl r" + std::to_string(rank) + (domain.empty() ? "" : " " + domain) + "]";
}

void log_line(LogLevel l, const std::string& msg) {
  static constexpr const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF"};
  const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::string t;
  {
    std::lock_guard lk(tag_mu());
    t = tag();
  }
  // One fprintf per line so concurrent lines do not interleave.
  std::fprintf(stderr, "%lld.%06lld %s %s %s\n", static_cast<long long>(now / 1000000),
               static_cast<long long>(now % 1000000), kNames[static_cast<int>(l)], t.c_str(),
               msg.c_str());
}

}  // namespace geoccl::core
