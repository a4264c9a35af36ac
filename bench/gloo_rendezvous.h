// Gloo rendezvous for the bench programs (gloo_bench, train_step): a connected gloo::Context
// from RANK / WORLD_SIZE / GEOCCL_RUN_ID / MASTER_PORT / GEOCCL_BIND_ADDR, met through a
// gloo::rendezvous::FileStore.
//
// Why a FileStore and not a TCP store: Debian's Gloo has no TCPStore, and MASTER_PORT may
// already be taken by geoccl's own rendezvous store on rank 0. Local runs and the WAN test bed
// (one network namespace per domain) share one filesystem, which is all a FileStore needs.

#pragma once

#include <gloo/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace geoccl_bench {

struct GlooEnv {
  int rank = 0;
  int world_size = 1;
  std::string run_id;          // names the rendezvous directory
  bool run_id_unique = false;  // true when the launcher guarantees a fresh id per launch
  std::string bind_addr;       // address the Gloo TCP device binds its listening socket to
};

// RANK and WORLD_SIZE (required, 0 <= RANK < WORLD_SIZE), then the run id and bind address as
// below. Throws UsageError.
GlooEnv ReadGlooEnv();
// The given rank and world size; the run id from GEOCCL_RUN_ID, else MASTER_PORT (one of them is
// required); GEOCCL_BIND_ADDR, default 127.0.0.1. Throws UsageError.
GlooEnv ReadGlooEnv(int rank, int world_size);

// Owns the per-run rendezvous directory /tmp/<dir_prefix>-<uid>/<run id>/.
//
// Gloo's FileStore refuses to set a key whose file already exists, so leftovers from a crashed
// earlier run with the same id would make rendezvous fail. Instead of deleting at start-up
// (which races with peers that already wrote their keys), rank 0 publishes a fresh random
// "generation" (atomically, via rename) and every rank prefixes its keys with it. Peers accept
// a generation only if it was written after they started (minus a slack for launch skew), so a
// stale generation file is never used (that check is skipped when GEOCCL_RUN_ID makes the
// directory unique to this launch anyway). Rank 0 removes the directory when it is destroyed, and
// garbage-collects sibling directories from runs that died more than an hour ago.
class FileRendezvous {
 public:
  static constexpr auto kLaunchSkew = std::chrono::seconds(30);
  static constexpr auto kStaleAge = std::chrono::hours(1);

  FileRendezvous(const GlooEnv& env, std::string_view dir_prefix,
                 std::chrono::milliseconds timeout);
  ~FileRendezvous();

  FileRendezvous(const FileRendezvous&) = delete;
  FileRendezvous& operator=(const FileRendezvous&) = delete;

  gloo::rendezvous::Store& store() { return *store_; }

 private:
  std::filesystem::path GenerationFile() const { return dir_ / "generation"; }
  std::string PublishGeneration();
  std::string AwaitGeneration(std::chrono::milliseconds timeout) const;
  void CollectGarbage(const std::filesystem::path& root) const;

  int rank_;
  bool check_freshness_;
  std::filesystem::path dir_;
  std::string generation_;
  std::unique_ptr<gloo::rendezvous::FileStore> file_store_;
  std::unique_ptr<gloo::rendezvous::PrefixStore> store_;
};

// A full mesh of Gloo TCP pairs between all ranks, with `timeout` as the context's default.
// The rendezvous directory lives (and is removed by rank 0) with the session.
class GlooSession {
 public:
  GlooSession(const GlooEnv& env, std::string_view dir_prefix, std::chrono::milliseconds timeout);

  const std::shared_ptr<gloo::Context>& context() const { return context_; }

 private:
  FileRendezvous rendezvous_;  // declared first: outlives the context
  std::shared_ptr<gloo::Context> context_;
};

}  // namespace geoccl_bench
