#include "metrics/trace_merge.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "geoccl/error.h"

namespace geoccl::metrics {

namespace {
[[noreturn]] void bad_trace(size_t i, const std::string& why) {
  throw Error(ErrorCode::kProtocol, "trace file " + std::to_string(i) + ": " + why);
}
}  // namespace

MergedTrace merge_traces(const std::vector<std::string>& files) {
  if (files.empty()) throw Error(ErrorCode::kInvalidArgument, "trace merge: no trace files");
  using nlohmann::json;
  MergedTrace out;
  json events = json::array();
  json offsets = json::object();
  std::set<int64_t> ranks;
  for (size_t i = 0; i < files.size(); ++i) {
    json doc = json::parse(files[i], nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object()) bad_trace(i, "not a JSON object");
    const auto other = doc.find("otherData");
    if (other == doc.end() || !other->is_object()) bad_trace(i, "no otherData (not written by geoccl)");
    const auto rank = other->find("geoccl_rank");
    const auto offset = other->find("clock_offset_us");
    if (rank == other->end() || !rank->is_number_integer()) bad_trace(i, "no otherData.geoccl_rank");
    if (offset == other->end() || !offset->is_number()) bad_trace(i, "no otherData.clock_offset_us");
    const double off = offset->get<double>();
    if (!std::isfinite(off) || std::fabs(off) > 1e15) bad_trace(i, "clock offset out of range");
    if (!ranks.insert(rank->get<int64_t>()).second)
      bad_trace(i, "rank " + std::to_string(rank->get<int64_t>()) + " twice");
    const auto evs = doc.find("traceEvents");
    if (evs == doc.end() || !evs->is_array()) bad_trace(i, "no traceEvents array");
    for (auto& e : *evs) {
      if (!e.is_object()) bad_trace(i, "an event is not an object");
      const auto ts = e.find("ts");
      if (ts != e.end()) {
        if (!ts->is_number()) bad_trace(i, "an event's ts is not a number");
        const double t = ts->get<double>() - off;
        if (!std::isfinite(t) || std::fabs(t) > 9e15) bad_trace(i, "an event's ts is out of range");
        *ts = static_cast<int64_t>(std::llround(t));
      }
      events.push_back(std::move(e));
    }
    offsets[std::to_string(rank->get<int64_t>())] = off;
    out.offsets_us.push_back(off);
  }
  out.ranks = static_cast<int>(ranks.size());
  out.events = events.size();
  json merged = {{"displayTimeUnit", "ms"},
                 {"otherData",
                  {{"geoccl_ranks", out.ranks},
                   {"clock", "rank 0 system_clock_us"},
                   {"clock_offsets_us", offsets}}},
                 {"traceEvents", std::move(events)}};
  out.json = merged.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return out;
}

}  // namespace geoccl::metrics
