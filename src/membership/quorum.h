// Quorum: who is in the next membership epoch. I/O-free: the shell (membership/elastic.cc) reads
// the candidates of epoch N from the store and feeds them in with a timestamp; the decider
// answers wait (until a deadline), decide (the member list, the same for everyone because one
// process publishes it) or fail. Unit tests drive it with time as an input (tests/unit/).
//
// Who decides: the first member of epoch N-1 to arrive at epoch N (elected through an atomic
// counter in the store). Joiners (new or restarted processes, and members that arrived after the
// previous decision) never decide: a group whose old members are all gone cannot be continued.
// Nothing depends on any particular old rank being alive, rank 0 included.
//
// The rule: the decider closes the epoch as soon as every member of N-1 is accounted for: it has
// arrived, or a candidate that continues from N-1 reported it dead (a grow at a step boundary, a
// transition nobody died in, or one whose dead were all named by the failure the survivors saw);
// else `join_window` after its own arrival; whichever is first, with every candidate it has seen
// by then: survivors (shrink) and joiners (grow). Below `min_members` it keeps waiting until
// `give_up`, then fails. New ranks: the survivors in the order of their old ranks, then the
// joiners in arrival order. A candidate that arrives after the decision is not in it and waits
// for the next epoch; one reported dead that arrives before the decision is in it like any other.
//
// A candidate reports dead only the ranks of N-1 whose process is gone: those its last failure
// named with kPeerLost. An unreachable or unresponsive peer may be alive and on its way, so it is
// waited for (up to the join window) like any member that has not arrived.
//
// A joiner may wait long for the members' next step boundary, and die meanwhile; in the decision
// it would cost every member a connect timeout. So each waiting candidate beats (a counter in the
// store), and with `silent_after` set the decider takes a joiner only once it has heard a beat of
// it since it first saw its record (heard()); a joiner not heard within `silent_after` of that is
// left out as dead. The decision waits for that (a beat period, about) only when joiners are in
// it. Members of N-1 come straight from their failure and are taken on arrival.
//
// Wire format of the records (little-endian, protocol/wire.h):
//   candidate: u16 version | u64 uid | i32 prev_rank | str label (<= kMaxLabel) |
//              u32 count (<= kMaxMembers) | count x i32 dead rank (>= 0, each once)
//   decision:  u16 version | u32 epoch | u32 count (<= kMaxMembers) | count x member fields
//              (u64 uid | i32 prev_rank | str label: a candidate without its dead ranks)
// Version 2 added the candidate's dead ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace geoccl::membership {

inline constexpr uint16_t kQuorumVersion = 2;
inline constexpr size_t kMaxLabel = 256;
inline constexpr uint32_t kMaxMembers = 1 << 16;

// One process asking to be in an epoch.
struct Candidate {
  uint64_t uid = 0;        // random, chosen once per process
  int32_t prev_rank = -1;  // its rank in the previous epoch; -1: a joiner
  std::string label;       // "host:pid", for logs and error messages
  // Ranks of the previous epoch this candidate knows to be dead (its failure said kPeerLost).
  // Not part of a decision's members.
  std::vector<int32_t> dead;

  bool operator==(const Candidate&) const = default;
};

// The member list of one epoch: members[r] has rank r.
struct Decision {
  uint32_t epoch = 0;
  std::vector<Candidate> members;

  bool operator==(const Decision&) const = default;
  // The rank of `uid` in this epoch, or -1 when it is not a member (it came too late).
  int rank_of(uint64_t uid) const;
  // The lowest rank that continues from the previous epoch (its state is current), or -1 when
  // every member is a joiner.
  int first_survivor() const;
};

std::vector<uint8_t> encode_candidate(const Candidate& c);
// nullopt for truncated input, trailing bytes, an over-long label, a prev_rank below -1, more
// than kMaxMembers dead ranks, a negative one or one listed twice, or another version; *why (if
// given) says which. Dead ranks are checked against the previous epoch by the decider.
std::optional<Candidate> decode_candidate(std::span<const uint8_t> in, std::string* why = nullptr);
std::vector<uint8_t> encode_decision(const Decision& d);
// As decode_candidate; also more than kMaxMembers members, or two with one uid.
std::optional<Decision> decode_decision(std::span<const uint8_t> in, std::string* why = nullptr);

struct QuorumParams {
  int prev_size = 0;  // members of the previous epoch
  std::chrono::milliseconds join_window{3000};
  std::chrono::milliseconds give_up{30000};  // after the decider's arrival, below min_members
  int min_members = 1;
  // A joiner first seen this long ago and not heard since is left out; 0: every joiner is taken.
  std::chrono::milliseconds silent_after{0};
};

class QuorumDecider {
 public:
  using Clock = std::chrono::steady_clock;
  struct Action {
    enum Kind { kWait, kDecide, kFail } kind = kWait;
    Decision decision;        // kDecide
    Clock::time_point until;  // kWait: poll again by then (or when a candidate arrives)
    std::string why;          // kDecide: why now; kFail: the error message
  };

  // The decider of `epoch`, arrived at `now`.
  QuorumDecider(uint32_t epoch, QuorumParams p, Clock::time_point now);

  // A candidate read from the store, in arrival order. Ignored (false): a second record of one
  // uid or of one previous rank, a previous rank outside the previous epoch, or anything after
  // the decision. Its dead ranks count when it continues from the previous epoch; a rank outside
  // that epoch, or its own, is not counted.
  bool observe(const Candidate& c);
  // A beat of candidate `uid` since its record was read (the shell saw its counter move).
  void heard(uint64_t uid);
  // What to do at `now`. Once it has returned kDecide, it returns the same decision again.
  [[nodiscard]] Action poll(Clock::time_point now);

  int survivors() const { return survivors_; }
  size_t candidates() const { return seen_.size(); }
  // Joiners left out of the decision as dead (silent_after).
  int silent_joiners() const { return silent_; }
  // Members of the previous epoch that have not arrived but were reported dead.
  int reported_dead() const;

 private:
  Decision decide() const;
  // With silent_after: marks the joiners not heard for it as silent; the time by which every
  // other joiner not yet heard will be heard or silent (nullopt: none left to wait for).
  std::optional<Clock::time_point> judge_joiners(Clock::time_point now);

  uint32_t epoch_;
  QuorumParams p_;
  Clock::time_point start_;
  std::vector<Candidate> seen_;
  struct Liveness {
    std::optional<Clock::time_point> first_seen;  // set by the first poll after its record
    bool heard = false;
    bool silent = false;
  };
  std::vector<Liveness> live_;  // by index in seen_
  int silent_ = 0;
  struct PrevMember {
    bool arrived = false;
    bool reported_dead = false;
  };
  std::vector<PrevMember> prev_;  // by rank in the previous epoch
  int survivors_ = 0;
  std::optional<Action> decided_;
};

}  // namespace geoccl::membership
