// A reader of the Prometheus text exposition format (what HttpExporter serves): the samples of
// a scrape, for `geoccl top` and the tests. Comments (# HELP, # TYPE) are skipped; timestamps
// after the value are accepted and dropped.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace geoccl::metrics {

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, unescaped
  double value = 0;

  // The value of label `key`, or "" when it has none.
  std::string label(std::string_view key) const;
};

// Every sample of `text`. Throws Error(kProtocol) naming the line for a malformed one (a bad
// name, an unterminated label set or string, an escape other than \\ \" \n, a value that is not
// a number, NaN or +-Inf). Never reads past `text`.
std::vector<Sample> parse_exposition(std::string_view text);

// The first sample named `name` whose labels include every pair of `match`, or nullopt.
std::optional<double> find_sample(
    const std::vector<Sample>& samples, std::string_view name,
    const std::vector<std::pair<std::string, std::string>>& match = {});

}  // namespace geoccl::metrics
