// The stall detector's decision, free of I/O: which streams of one peer to replace, from the
// figures TCP_INFO gives for each of them on one tick (tests/unit/tcp_stall_test.cc).
//
// A stream with data in flight that has had no acknowledgement for a while is either on a
// broken path or on a busy one. Broken (an outage, a dead route): nothing comes back on any
// stream to the peer, TCP sits in retransmission backoff and may wait seconds after the path
// returns; a fresh connection is the fast way back. Busy: the stream's segments wait in a
// queue shared with other flows, or were lost there and the stream waits out one retransmission
// timeout, while the peer's other streams are acknowledged; a fresh connection would start
// again from slow start, re-send what was in flight, and queue its handshake behind the same
// queue. So:
//   - the path shows life when any stream to the peer (control stream included) was acknowledged
//     within `timeout`;
//   - a stream is quiet when it has unacknowledged data it has waited for max(timeout, 8 smoothed
//     RTTs) to be acknowledged (one loss repaired by one retransmission takes a few round trips
//     on a long path). The wait counts from the last acknowledgement, or from when the stream was
//     last seen with nothing in flight if that is later: the kernel's time since the last ack of
//     a stream that was idle for a while and has just sent again is the length of its idleness;
//   - a quiet stream on a silent path is replaced (kPathSilent): the outage case, as fast as the
//     timeout allows;
//   - a quiet stream on a path that shows life is busy and left alone until it has been quiet
//     for the busy bound: kBusyTimeouts timeouts, or longer when the data in flight to the peer,
//     drained at the path's delivery rate, plus kBusyRtts of the path's largest smoothed RTT,
//     takes longer. Past that it is replaced (kStreamStuck): a single flow that a middlebox
//     blackholes still gets a new connection, later.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace geoccl::transport::tcp {

// One stream's figures on one tick (TcpConnection::stall_sample).
struct StallSample {
  bool open = false;                       // a socket to look at; closed streams are ignored
  uint64_t unacked_bytes = 0;              // sent, not yet acknowledged
  std::chrono::milliseconds since_ack{0};  // since the last acknowledgement received
  // How long the data in flight has waited for an acknowledgement: since_ack, or less when the
  // stream had nothing in flight more recently (0 with nothing in flight).
  std::chrono::milliseconds waiting{0};
  std::chrono::microseconds srtt{0};       // smoothed RTT (0: unknown)
  uint64_t delivery_bps = 0;               // the kernel's latest delivery-rate sample, bit/s
};

// How much longer than the timeout a quiet stream on a live path may stay quiet, at least.
inline constexpr int kBusyTimeouts = 10;
// Round trips added to the drain time of the data in flight.
inline constexpr int kBusyRtts = 4;

enum class StallReason {
  kPathSilent,   // no stream to the peer was acknowledged within the timeout
  kStreamStuck,  // the peer's other streams are acknowledged, this one not for the busy bound
};

struct StallDecision {
  size_t stream = 0;  // index into the samples given
  StallReason reason = StallReason::kPathSilent;
  std::chrono::milliseconds bound{0};  // the quiet time that was exceeded
};

// The streams of one peer (`streams`: every stream of the pair, control included, in any order)
// to replace now, in index order, with why. `timeout` <= 0: none (the detector is off).
std::vector<StallDecision> stalled_streams(std::span<const StallSample> streams,
                                           std::chrono::milliseconds timeout);

// Whether the path these streams share is down now: a stalled_streams decision of kPathSilent
// (a stream quiet past its bound, and none acknowledged within `timeout`).
bool path_silent(std::span<const StallSample> streams, std::chrono::milliseconds timeout);

// Whether the direct path to a rank is down after this tick, from its direct streams' samples
// and whether it was down before: down from the tick the streams show the outage (path_silent)
// until one of them is acknowledged within `timeout` again, or the open ones have nothing left
// unacknowledged (a stream replaced meanwhile is closed and shows nothing either way).
bool path_down_after(bool was_down, std::span<const StallSample> direct, std::chrono::milliseconds timeout);

// The quiet time after which a stream is replaced although the path shows life (the busy bound
// above), for the peer's streams `streams`.
std::chrono::milliseconds busy_bound(std::span<const StallSample> streams,
                                     std::chrono::milliseconds timeout);

}  // namespace geoccl::transport::tcp
