// Liveness: heartbeats and the failure detector of one rank, as an I/O-free state machine
// (tests/unit/liveness_test.cc drives it with invented timestamps).
//
// Every rank sends each peer it watches (watched_peers: every peer up to 32 ranks) a heartbeat
// each `interval` (transport/liveness_monitor.h does the I/O). A heartbeat carries the sender's
// view of the group: the watched peers it has not heard from for more than two intervals, with
// how long. Hearing anything from a peer (a heartbeat, any frame)
// counts. A peer silent for the `window` is then told apart three ways:
//
//  - unresponsive: its host still acknowledges what we send (the transport reports that: TCP's
//    own acknowledgements on the control connection, or a peer on this host; for at least half
//    a window), but its process sends nothing: stopped (SIGSTOP), hung, a host that stopped scheduling it. The group fails
//    with kPeerUnresponsive.
//  - unreachable: its host does not answer, but a third rank we hear does hear it (its heartbeat
//    does not list the peer as silent): the link between us is down (a partition, an outage).
//    The transport keeps trying to re-establish the link; the group fails with kPeerUnreachable
//    only when the silence outlasts `link_bound` (GEOCCL_TCP_RESUME_TIMEOUT_MS).
//  - lost: its host does not answer and no rank hears it, while ranks of its own domain are
//    heard: its host is gone (a crash without a reset, a power cut). kPeerLost. When nobody in
//    its domain can be heard either (the whole domain is cut off, or a two-rank job), a
//    partition cannot be told from a death: the peer counts as unreachable, bounded by
//    `link_bound`, so that an outage that ends is survived.
//
// A process that ends gets EOF or a reset on its connections: the transport fails the group at
// once (kPeerLost), without waiting for the window.
//
// While a peer is silent, a warning names it every `warn_every`, saying which case it looks like
// and for how long.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/error.h"

namespace geoccl::protocol {

// ---- Heartbeat payload (FrameType::kHeartbeat):
//   u32 count, then count x { u32 rank, u32 silent_ms }: the peers the sender has not heard from
//   for more than two heartbeat intervals, and for how long (milliseconds, saturating).
inline constexpr uint32_t kMaxHeartbeatEntries = 8000;  // a heartbeat fits a 64 KiB control packet

struct SilentPeer {
  uint32_t rank = 0;
  uint32_t silent_ms = 0;
  bool operator==(const SilentPeer&) const = default;
};

std::vector<uint8_t> encode_heartbeat(std::span<const SilentPeer> silent);
// False for a malformed payload (truncated, trailing bytes, more than kMaxHeartbeatEntries
// entries, a rank of `world_size` or more, a rank listed twice).
bool decode_heartbeat(std::span<const uint8_t> in, uint32_t world_size, std::vector<SilentPeer>* out);
inline size_t max_heartbeat_payload() { return 4 + 8 * size_t{kMaxHeartbeatEntries}; }

// The peers a rank heartbeats and judges. Up to kWatchEveryPeerUpTo ranks: every other rank.
// Beyond: the ranks at distance 1, 2, 4, 8, ... either way round the ring of ranks (about
// 2 log2(size) of them), so that heartbeats per rank grow with the log of the job, not with it.
// Symmetric (q watches r when r watches q), and the same function on every rank: a rank knows
// whom any other rank watches. A rank that finds a watched peer failed fails the group and tells
// every peer it is connected to (the group's abort), and each of them tells its own: every rank
// learns of the failure, also where pairs are connected on demand (the ring's neighbours are
// always connected).
inline constexpr int kWatchEveryPeerUpTo = 32;
std::vector<int> watched_peers(int rank, int size);
bool watches(int rank, int peer, int size);
// Whether two distinct ranks are 1, 2, 4, 8, ... apart either way round the ring of `size` ranks
// (watches() beyond kWatchEveryPeerUpTo; also the pairs a TCP device connects at start-up when it
// connects the others on demand, and those of a Bruck allgather).
bool power_of_two_apart(int a, int b, int size);

struct LivenessOptions {
  std::chrono::milliseconds interval{1000};   // GEOCCL_HEARTBEAT_MS
  std::chrono::milliseconds window{10000};    // GEOCCL_LIVENESS_WINDOW_MS
  std::chrono::milliseconds link_bound{30000};  // GEOCCL_TCP_RESUME_TIMEOUT_MS
  std::chrono::milliseconds warn_every{5000};
};

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // The watched peers (watched_peers) are watched from `now` on (as if heard then); the others
  // are neither listed nor judged.
  Liveness(int rank, int size, const LivenessOptions& o, TimePoint now);
  const std::vector<int>& watched() const { return watched_; }

  // After topology discovery: the domain of every rank (index = rank) and the domains' names
  // (for messages; may be empty). Until then all ranks count as one domain.
  void set_domains(std::vector<int> domain_of, std::vector<std::string> names = {});

  // Something arrived from `peer`.
  void heard(int peer, TimePoint now);
  // `peer`'s heartbeat arrived, with the peers it does not hear.
  void report(int peer, std::vector<SilentPeer> silent, TimePoint now);
  // Whether `peer`'s host acknowledges what this rank sends it (the transport's view, sampled).
  // A peer counts as unresponsive only once its host has answered for half a window without a
  // word from the process: just after a link comes back the host answers before the process's
  // heartbeats are through.
  void host_answers(int peer, bool answers, TimePoint now);

  // The watched peers this rank has not heard from for more than two intervals: the next
  // heartbeat.
  std::vector<SilentPeer> silent_peers(TimePoint now) const;

  struct Action {
    enum class Kind { kWarn, kRecovered, kFail };
    Kind kind = Kind::kWarn;
    int peer = -1;
    ErrorCode code = ErrorCode::kOk;  // kFail
    std::string message;
  };
  // Decides. Call at least every interval; the decisions of a call made long after the previous
  // one (this process was not scheduled: the silence is ours) wait one more window.
  std::vector<Action> tick(TimePoint now);

  // What the detector thinks of a peer now (for logs, stats and tests).
  enum class State { kAlive, kSilent, kUnresponsive, kUnreachable, kLost };
  State state(int peer) const;
  static const char* state_name(State s);

  const LivenessOptions& options() const { return o_; }

 private:
  struct Peer {
    TimePoint last_heard{};
    std::optional<TimePoint> report_at;  // when its last heartbeat arrived
    std::vector<SilentPeer> silent;      // what that heartbeat said
    std::optional<TimePoint> answering_since;  // its host answers, continuously since then
    State state = State::kAlive;
    TimePoint warned_at{};  // last warning about this peer
    bool warned = false;
  };
  // Whether a third rank we hear and that watches `p` says it hears `p` (its last heartbeat is
  // fresh and does not list p as silent for a window): the rank that says so, or -1.
  int witness_hearing(int p, TimePoint now) const;
  // Whether some rank of p's domain other than p is heard, by us or by a rank we hear.
  bool domain_heard(int p, TimePoint now) const;
  bool fresh(const Peer& q, TimePoint now) const;
  std::string describe(int p) const;

  const int rank_, size_;
  const LivenessOptions o_;
  std::vector<Peer> peers_;
  std::vector<int> watched_;  // sorted
  std::vector<int> domain_of_;
  std::vector<std::string> domain_names_;
  TimePoint last_tick_;
  TimePoint grace_until_{};  // after a late tick: no decisions before this
};

}  // namespace geoccl::protocol
