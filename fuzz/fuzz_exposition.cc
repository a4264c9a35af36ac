// The Prometheus text reader (`geoccl top`, tests): never crash, never read past the input; a
// refusal is Error(kProtocol); what parses, written again with the exporter's escaping, parses
// to the same samples.
#include <cmath>
#include <cstdlib>
#include <string>

#include "geoccl/error.h"
#include "metrics/exposition.h"
#include "metrics/registry.h"

using namespace geoccl::metrics;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<Sample> samples;
  try {
    samples = parse_exposition(text);
  } catch (const geoccl::Error& e) {
    if (e.code() != geoccl::ErrorCode::kProtocol) std::abort();
    return 0;
  }
  std::string again;
  for (const auto& s : samples) {
    again += s.name;
    if (!s.labels.empty()) {
      again += '{';
      for (size_t i = 0; i < s.labels.size(); ++i)
        again += (i ? "," : "") + s.labels[i].first + "=\"" +
                 escape_label_value(s.labels[i].second) + '"';
      again += '}';
    }
    again += ' ' + format_value(s.value) + '\n';
  }
  const auto back = parse_exposition(again);
  if (back.size() != samples.size()) std::abort();
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i].name != samples[i].name || back[i].labels != samples[i].labels) std::abort();
    const double a = back[i].value, b = samples[i].value;
    if (!(a == b || (std::isnan(a) && std::isnan(b)))) std::abort();
  }
  return 0;
}
