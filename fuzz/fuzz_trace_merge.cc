// `geoccl trace merge`'s reader: any bytes as one or two rank files never crash; a refusal is
// Error(kProtocol); what merges is JSON whose event count is the inputs' and parses again.
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "geoccl/error.h"
#include "metrics/trace_merge.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t cut = all.find('\0');
  std::vector<std::string> files{all.substr(0, cut)};
  if (cut != std::string::npos) files.push_back(all.substr(cut + 1));
  try {
    const auto m = geoccl::metrics::merge_traces(files);
    const auto doc = nlohmann::json::parse(m.json);
    if (doc.at("traceEvents").size() != m.events) std::abort();
  } catch (const geoccl::Error& e) {
    if (e.code() != geoccl::ErrorCode::kProtocol) std::abort();
  }
  return 0;
}
