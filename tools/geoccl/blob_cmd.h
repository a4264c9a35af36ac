// `geoccl blob`: move a file with the blob layer (geoccl/blob.h) from inside a rank (run it under
// `geoccl run` or any launcher that sets RANK/WORLD_SIZE/MASTER_*), with a progress bar on
// stderr; and `geoccl blob codecs`, the lossless ratio and speed of each codec on a file.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace geoccl::tools {

struct BlobSpec {
  std::string action;          // send, recv, bcast, codecs
  std::string path, dst_path;  // send/recv/codecs: path; bcast: source (root) and destination
  int peer = -1;               // send --to / recv --from: point to point; -1: broadcast
  int root = 0;                // recv / bcast without a peer
  std::string chunk = "4M";
  int window = 8;
  std::string codec = "auto";
  int zstd_level = 3;
  bool no_resume = false;
  bool quiet = false;
};

// Adds `blob` and its subcommands to `app`; returns the `blob` command.
CLI::App* add_blob_command(CLI::App& app, BlobSpec& spec);
// Runs the parsed command. Returns 0 on success; prints the error and returns 1 otherwise.
int run_blob(const BlobSpec& spec);

}  // namespace geoccl::tools
