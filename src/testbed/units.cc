#include "units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace geoccl::testbed {
namespace {

struct NumberAndUnit {
  double value;
  std::string unit;  // lower-cased
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "2.5gbit" into 2.5 and "gbit". Rejects empty numbers, signs,
// non-finite values. std::from_chars stops at the first character that cannot
// continue the number, so "1e9bit" is 1e9 and "2.5gbit" is 2.5.
NumberAndUnit split(std::string_view text, const char* what) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value, std::chars_format::general);
  if (ec != std::errc() || ptr == begin || !std::isfinite(value) || value < 0 ||
      text.front() == '-' || text.front() == '+') {
    throw std::runtime_error("invalid " + std::string(what) + " '" + std::string(text) + "'");
  }
  std::string unit = lower(text.substr(static_cast<std::size_t>(ptr - begin)));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  return {value, unit};
}

}  // namespace

std::int64_t parse_duration_ns(std::string_view text) {
  const auto [value, unit] = split(text, "duration");
  double scale = 0;
  if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1e3;
  else if (unit == "ms") scale = 1e6;
  else if (unit == "s") scale = 1e9;
  else if (unit == "m" || unit == "min") scale = 60e9;
  else
    throw std::runtime_error("invalid duration '" + std::string(text) +
                             "': expected a unit ns, us, ms, s or m");
  const double ns = value * scale;
  if (ns > 9.2e18) throw std::runtime_error("duration '" + std::string(text) + "' too large");
  return static_cast<std::int64_t>(std::llround(ns));
}

std::uint64_t parse_rate_bps(std::string_view text) {
  const auto [value, unit] = split(text, "rate");
  double scale = 0;
  if (unit == "bit" || (unit.empty() && value == 0)) scale = 1;
  else if (unit == "kbit") scale = 1e3;
  else if (unit == "mbit") scale = 1e6;
  else if (unit == "gbit") scale = 1e9;
  else if (unit == "tbit") scale = 1e12;
  else
    throw std::runtime_error("invalid rate '" + std::string(text) +
                             "': expected a unit bit, kbit, mbit, gbit or tbit (per second)");
  const double bps = value * scale;
  if (bps > 1.8e19) throw std::runtime_error("rate '" + std::string(text) + "' too large");
  return static_cast<std::uint64_t>(std::llround(bps));
}

std::uint64_t parse_size_bytes(std::string_view text) {
  const auto [value, unit] = split(text, "size");
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "kib") scale = 1024;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else
    throw std::runtime_error("invalid size '" + std::string(text) +
                             "': expected B, KB, KiB, MB, MiB, GB or GiB");
  return static_cast<std::uint64_t>(std::llround(value * scale));
}

double parse_loss(std::string_view text) {
  auto [value, unit] = split(text, "loss");
  if (unit == "%") value /= 100;
  else if (!unit.empty())
    throw std::runtime_error("invalid loss '" + std::string(text) +
                             "': expected a ratio (0.001) or a percentage (0.1%)");
  if (value > 1) throw std::runtime_error("loss '" + std::string(text) + "' is above 100 %");
  return value;
}

std::string format_duration(std::int64_t ns) {
  char buf[64];
  if (ns % 1'000'000'000 == 0) std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ns / 1'000'000'000));
  else if (ns % 1'000'000 == 0) std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ns / 1'000'000));
  else if (ns % 1'000 == 0) std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(ns / 1'000));
  else std::snprintf(buf, sizeof buf, "%lldns", static_cast<long long>(ns));
  return buf;
}

std::string format_rate(std::uint64_t bps) {
  if (bps == 0) return "unlimited";
  char buf[64];
  if (bps >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.3ggbit", static_cast<double>(bps) / 1e9);
  else if (bps >= 1'000'000) std::snprintf(buf, sizeof buf, "%.3gmbit", static_cast<double>(bps) / 1e6);
  else if (bps >= 1'000) std::snprintf(buf, sizeof buf, "%.3gkbit", static_cast<double>(bps) / 1e3);
  else std::snprintf(buf, sizeof buf, "%llubit", static_cast<unsigned long long>(bps));
  return buf;
}

}  // namespace geoccl::testbed
