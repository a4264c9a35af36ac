// What the participants of a transfer agree on before any chunk moves, and how a failure on one
// participant becomes the same typed Error on all of them. Pure functions over the vectors the
// channel's agree() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/error.h"

namespace geoccl::blob {

// The opening vote: kOpeningSlots int64 per participant, each participant filling only its own.
inline constexpr size_t kOpeningSlots = 4;
struct OpeningVote {
  ErrorCode code = ErrorCode::kOk;  // local failure (bad options, source unreadable, ...)
  int root = -1;                    // the root (participant index) this participant was told
  int64_t size_claim = -1;          // the root: its object's size; others: expected size or -1
  int64_t chunk_bytes = 0;          // the root's chunk size; others 0
};
// Writes `v` into participant `me`'s slots of a zeroed vector of n * kOpeningSlots.
std::vector<int64_t> encode_opening(const OpeningVote& v, int me, int n);

struct Opening {
  ErrorCode code = ErrorCode::kOk;  // kOk: go ahead
  std::string why;                  // for the Error when code != kOk
  int failed = -1;                  // participant whose failure it is (-1: a disagreement)
  int root = -1;
  uint64_t object_bytes = 0;
  uint32_t chunk_bytes = 0;
};
// The verdict every participant computes alike from the agreed vector: the first participant's
// highest local error code; else kMismatch when the roots differ or a claimed size differs from
// the root's; else the root, its size and chunk size.
Opening decide_opening(std::span<const int64_t> agreed, int n);

// Status bytes: one per participant (its ErrorCode), each filling only its own.
// Throws Error with the highest code (of the first participant reporting it) when any is set;
// `local_why` is this participant's own reason, `rank_of` names the others in the message.
void raise_if_failed(std::span<const uint8_t> status, int me, const std::string& local_why,
                     const std::function<int(int)>& rank_of);

}  // namespace geoccl::blob
