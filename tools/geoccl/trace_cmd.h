// `geoccl trace merge DIR -o FILE`: the ranks' GEOCCL_TRACE files on one timeline.
#pragma once

#include <string>

namespace geoccl::tools {

// Reads DIR/rank-*.json, writes the merged trace to `out`, prints a summary; returns 0. Throws
// Error(kIo) for an unreadable directory or file or an unwritable output, Error(kInvalidArgument)
// when DIR holds no rank file, Error(kProtocol) for a file that is not a geoccl trace.
int run_trace_merge(const std::string& dir, const std::string& out);

}  // namespace geoccl::tools
