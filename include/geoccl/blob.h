// Blobs and checkpoints: moving one large object (bytes or a file) from one rank to all others, or
// a file between two ranks, on the bulk priority class.
//
// The object goes in chunks (4 MiB by default). Each chunk carries an xxh3-64 hash of its raw
// bytes and is compressed losslessly (lz4 or zstd) only when that is faster end to end on the link
// measured by the transfer itself. Receivers verify every chunk before it counts as received and
// the whole object's hash before it is delivered; a chunk that fails is sent again. A file
// destination is written as `<path>.geoccl-part` next to a resume state `<path>.geoccl-state` and
// renamed to `<path>` only once the object's hash verified, so a rerun after a broken connection
// or a restart of the receiver sends only the chunks some receiver still lacks.
//
// Every participant calls the same function with the same root (peer); each call ends with
// success or the same typed Error code on every participant. Built only on the public
// Communicator operations: the broadcast crosses each WAN path once and then spreads inside each
// domain (the communicator's hierarchical broadcast).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/communicator.h"

namespace geoccl {

// A snapshot of one transfer, delivered to BlobOptions::progress on the calling thread after
// every window of chunks.
struct BlobProgress {
  uint64_t bytes_total = 0;     // size of the object
  uint64_t bytes_done = 0;      // raw bytes verified here (receivers) or sent and completed (root)
  uint64_t wire_bytes = 0;      // bytes posted for the object so far (after compression)
  double rate_bytes_per_s = 0;  // raw bytes per second since the call began
  double eta_s = 0;             // remaining bytes at that rate (0 when unknown or done)
  uint32_t chunks_refetched = 0;
};

struct BlobOptions {
  size_t chunk_bytes = 4u << 20;  // root's choice; receivers learn it (64 KiB .. 64 MiB)
  size_t window_chunks = 8;       // chunks described by one descriptor (1 .. 64)
  // "auto" (measured per window), or forced: "none", "lz4", "zstd" (level zstd_level).
  std::string codec = "auto";
  int zstd_level = 3;
  // Receivers: the size they expect; a different size at the root fails every rank with
  // kMismatch before any chunk moves.
  std::optional<uint64_t> expected_size;
  // File destinations: keep/use `<path>.geoccl-state` to resume. Off: start from scratch.
  bool resume = true;
  // Chunks failing verification are sent again up to this many extra rounds, then kProtocol.
  int max_refetch_rounds = 3;
  std::optional<std::chrono::milliseconds> timeout;  // per operation; default Config::op_timeout
  uint32_t tag = 0x424c4f42;                         // point to point only ("BLOB")
  std::function<void(const BlobProgress&)> progress;
  // The priority class every operation of the transfer runs on. Bulk (the default) runs beside
  // training; on kGradient the transfer queues with the gradients (every rank must then call it
  // in the same place of its gradient operations).
  Priority priority = Priority::kBulk;
};

struct BlobResult {
  uint64_t object_bytes = 0;
  uint64_t object_hash = 0;       // xxh3-64 of the whole object
  uint32_t chunks = 0;            // chunks of the object
  uint32_t chunks_sent = 0;       // chunk transmissions in this call (refetches included)
  uint32_t chunks_resumed = 0;    // chunks no participant needed: verified by an earlier run
  uint32_t chunks_refetched = 0;  // chunks that failed verification on this rank and came again
  uint32_t rounds = 0;            // 1 + refetch rounds
  uint64_t bytes_sent = 0;        // raw bytes of the chunks sent in this call
  uint64_t wire_bytes = 0;        // the same after compression: what crossed each path
  uint32_t chunks_by_codec[3] = {0, 0, 0};  // none, lz4, zstd (as sent)
  double seconds = 0;
};

// Broadcasts `data` (root) to every rank; receivers get it in `*out` (resized; `out` may be null
// at the root, `data` is ignored elsewhere). Throws Error: kInvalidArgument (root out of range,
// bad options), kMismatch (ranks disagree on root or size), kProtocol (a chunk failed
// verification more than max_refetch_rounds), or the communicator's error (kTimeout, kPeerLost,
// ...), the same code on every rank.
BlobResult broadcast_blob(Communicator& comm, int root, std::span<const uint8_t> data,
                          std::vector<uint8_t>* out, const BlobOptions& o = {});

// Broadcasts the file `src_path` from root to `dst_path` on every other rank (sent from the
// mapped file, received into a mapped destination). kInvalidArgument on every rank when the root
// cannot read the file, kIo when a receiver cannot create or size its destination.
BlobResult broadcast_blob_file(Communicator& comm, int root, const std::string& src_path,
                               const std::string& dst_path, const BlobOptions& o = {});

// A file from this rank to `peer`, which calls recv_file with this rank as its peer. Only the two
// ranks take part (matched by BlobOptions::tag).
BlobResult send_file(Communicator& comm, int peer, const std::string& path,
                     const BlobOptions& o = {});
BlobResult recv_file(Communicator& comm, int peer, const std::string& path,
                     const BlobOptions& o = {});

}  // namespace geoccl
