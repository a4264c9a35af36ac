// Striping of one peer's data frames over several TCP streams: the I/O-free parts, unit-tested
// without sockets (tests/unit/tcp_stripe_test.cc).
//
// Sender: every data frame to a peer gets the next per-pair frame number (carried in the frame
// header) and goes on the data stream with the fewest bytes still queued (user-space queue plus
// what the kernel has not sent yet), so a stream slowed by loss or a small window takes fewer
// frames instead of stalling the others. Ties rotate, so an idle pool is used round robin.
//
// Receiver: frames of one stream arrive in order, frames of different streams in any order; each
// is matched by its number to its posted receive (protocol/recv_window.h) and read straight into
// its destination. A frame whose receive is not posted yet stays in its stream's kernel buffer
// (that stream stops reading) until it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace geoccl::transport::tcp {

// Index of the stream to put the next frame on: the least `queued[i]`, ties broken by the first
// index at or after `rotate` (mod size). `queued` must not be empty.
inline size_t pick_stream(std::span<const uint64_t> queued, size_t rotate) {
  const size_t n = queued.size();
  size_t best = rotate % n;
  for (size_t j = 1; j < n; ++j) {
    const size_t i = (rotate + j) % n;
    if (queued[i] < queued[best]) best = i;
  }
  return best;
}

}  // namespace geoccl::transport::tcp
