// Parsing and printing of the physical quantities used by scenarios and the
// wanem control protocol: durations, bit rates, byte sizes and loss ratios.
//
// Kept strict on purpose: "1gbps" is rejected instead of guessing whether the
// user meant bits or bytes (tc's "bps" means *bytes* per second).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace geoccl::testbed {

// "20ms", "1.5s", "250us", "100ns", "2m". A bare number is rejected: a unit is
// required so that "20" can never silently mean 20 ns or 20 s.
std::int64_t parse_duration_ns(std::string_view text);

// "1gbit", "100mbit", "2.5Gbit", "500kbit", "9600bit". 0 (as "0" or "0bit")
// means "unlimited". Returns bits per second.
std::uint64_t parse_rate_bps(std::string_view text);

// "64KiB", "1MB", "1500B", "1500" (bytes). Returns bytes.
std::uint64_t parse_size_bytes(std::string_view text);

// "0.0005", "0.05%", "1%". Returns a probability in [0, 1].
double parse_loss(std::string_view text);

std::string format_duration(std::int64_t ns);
std::string format_rate(std::uint64_t bps);

}  // namespace geoccl::testbed
