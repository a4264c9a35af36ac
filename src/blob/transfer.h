// One blob transfer over a BlobChannel: the protocol both sides run.
//
//   1. opening vote (agree, int64): each participant's local status, root and size claim; every
//      participant decides alike (agreement.h) and fails alike.
//   2. object header (move, 64 bytes) from the root.
//   3. need vote (agree, bytes): each participant's status, then one byte per chunk: 1 where a
//      receiver lacks the chunk (a file destination resumes from its verified chunks).
//   4. rounds: the chunks some participant needs, in windows of window_chunks: the window
//      descriptor (sizes, codecs, hashes) and then each chunk at its exact wire size, two windows
//      in flight. Receivers verify each chunk (decompress, xxh3) before it counts; a failure vote
//      (like 3) after the round makes the failed chunks the next round's.
//   5. receivers check the whole object's hash and deliver it; a final status vote.
#pragma once

#include <span>
#include <string>

#include "blob/channel.h"
#include "blob/destination.h"
#include "geoccl/blob.h"

namespace geoccl::blob {

// A failure found before the transfer (bad options, unreadable source, invalid root): carried
// into the opening vote so that every participant fails with it.
struct LocalFailure {
  ErrorCode code = ErrorCode::kOk;
  std::string why;
};

// The failure an Error describes, its message without the code's name in front.
LocalFailure failure_of(const Error& e);

// Bad options -> kInvalidArgument with the reason; else kOk.
LocalFailure check_options(const BlobOptions& o);

// The root's side: `source` is the object (unused when `pre` failed).
BlobResult send_blob(BlobChannel& ch, int root, std::span<const uint8_t> source, LocalFailure pre,
                     const BlobOptions& o);
// A receiver's side. `comm_rank` selects the test hooks (test_hooks.h).
BlobResult receive_blob(BlobChannel& ch, int root, Destination& dest, LocalFailure pre,
                        const BlobOptions& o);

}  // namespace geoccl::blob
