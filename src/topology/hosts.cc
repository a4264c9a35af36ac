#include "topology/hosts.h"

#include <algorithm>
#include <map>

namespace geoccl::topology {

std::vector<int> group_hosts(const std::vector<std::string>& keys) {
  std::vector<int> host_of(keys.size());
  std::map<std::string, int> index;
  int next = 0;
  for (size_t r = 0; r < keys.size(); ++r) {
    if (keys[r].empty()) {
      host_of[r] = next++;
      continue;
    }
    auto [it, fresh] = index.try_emplace(keys[r], next);
    if (fresh) ++next;
    host_of[r] = it->second;
  }
  return host_of;
}

std::vector<int> host_leaders(const std::vector<int>& host_of) {
  const int hosts = host_of.empty() ? 0 : *std::max_element(host_of.begin(), host_of.end()) + 1;
  std::vector<int> leader(static_cast<size_t>(hosts), -1);
  for (size_t r = 0; r < host_of.size(); ++r) {
    int& l = leader[static_cast<size_t>(host_of[r])];
    if (l < 0) l = static_cast<int>(r);
  }
  return leader;
}

std::vector<double> rank_rtts_from_leaders(const std::vector<double>& measured, const std::vector<int>& host_of) {
  const size_t n = host_of.size();
  const auto leader = host_leaders(host_of);
  std::vector<double> out(n * n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      const int a = host_of[i], b = host_of[j];
      if (a == b) continue;
      const auto li = static_cast<size_t>(leader[static_cast<size_t>(a)]);
      const auto lj = static_cast<size_t>(leader[static_cast<size_t>(b)]);
      out[i * n + j] = std::max(measured[li * n + lj], measured[lj * n + li]);
    }
  return out;
}

}  // namespace geoccl::topology
