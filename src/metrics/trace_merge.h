// `geoccl trace merge`: the ranks' trace files (TraceWriter) on one timeline. Each file's events
// are shifted by its rank's clock offset to rank 0 (measured at start-up and written in the file),
// so that the merged timestamps are rank 0's clock; the result is one Chrome trace-event JSON
// document that Perfetto and chrome://tracing open.
#pragma once

#include <string>
#include <vector>

namespace geoccl::metrics {

struct MergedTrace {
  std::string json;
  int ranks = 0;
  size_t events = 0;
  std::vector<double> offsets_us;  // per input file, in input order
};

// Merges the texts of rank files. Throws Error(kProtocol) naming the file index for one that is
// not a trace written by geoccl (not JSON, no otherData.geoccl_rank / clock_offset_us, events
// that are not objects or have a non-numeric ts, a rank seen twice), Error(kInvalidArgument) for
// no input.
MergedTrace merge_traces(const std::vector<std::string>& files);

}  // namespace geoccl::metrics
