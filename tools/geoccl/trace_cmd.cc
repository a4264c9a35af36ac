#include "trace_cmd.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "geoccl/error.h"
#include "metrics/trace_merge.h"

namespace geoccl::tools {

int run_trace_merge(const std::string& dir, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("rank-", 0) == 0 && name.size() > 10 && name.ends_with(".json"))
      paths.push_back(it->path());
  }
  if (ec) throw Error(ErrorCode::kIo, "trace merge: cannot read " + dir + ": " + ec.message());
  if (paths.empty())
    throw Error(ErrorCode::kInvalidArgument, "trace merge: no rank-*.json in " + dir);
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> texts;
  for (const auto& p : paths) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) throw Error(ErrorCode::kIo, "trace merge: cannot read " + p.string());
    texts.push_back(ss.str());
  }
  metrics::MergedTrace m;
  try {
    m = metrics::merge_traces(texts);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) +
                              " (files in name order: " + paths.front().string() + " ...)");
  }
  std::ofstream o(out, std::ios::trunc);
  o << m.json;
  o.close();
  if (!o) throw Error(ErrorCode::kIo, "trace merge: cannot write " + out);
  std::printf("geoccl trace merge: %d ranks, %zu events -> %s\n", m.ranks, m.events, out.c_str());
  for (size_t i = 0; i < paths.size(); ++i)
    std::printf("  %s: clock offset %+.1f us\n", paths[i].filename().c_str(), m.offsets_us[i]);
  return 0;
}

}  // namespace geoccl::tools
