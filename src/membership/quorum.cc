#include "membership/quorum.h"

#include <algorithm>
#include <unordered_set>

#include "protocol/wire.h"

namespace geoccl::membership {
namespace {

void put_fields(protocol::Writer& w, const Candidate& c) {
  w.u64(c.uid);
  w.u32(static_cast<uint32_t>(c.prev_rank));
  w.str(c.label);
}

bool get_fields(protocol::Reader& r, Candidate* c, std::string* why) {
  uint32_t prev = 0;
  if (!r.u64(&c->uid) || !r.u32(&prev) || !r.str(&c->label, kMaxLabel)) {
    *why = "truncated member record or label longer than " + std::to_string(kMaxLabel);
    return false;
  }
  c->prev_rank = static_cast<int32_t>(prev);
  if (c->prev_rank < -1) {
    *why = "previous rank " + std::to_string(c->prev_rank) + " below -1";
    return false;
  }
  return true;
}

void put_dead(protocol::Writer& w, const std::vector<int32_t>& dead) {
  w.u32(static_cast<uint32_t>(dead.size()));
  for (int32_t d : dead) w.u32(static_cast<uint32_t>(d));
}

bool get_dead(protocol::Reader& r, std::vector<int32_t>* dead, std::string* why) {
  uint32_t n = 0;
  if (!r.u32(&n)) {
    *why = "truncated dead ranks";
    return false;
  }
  if (n > kMaxMembers) {
    *why = std::to_string(n) + " dead ranks, more than " + std::to_string(kMaxMembers);
    return false;
  }
  // Each takes 4 bytes: a count larger than the input allows is rejected before anything is
  // reserved.
  if (n > r.remaining() / 4) {
    *why = "truncated dead ranks";
    return false;
  }
  std::unordered_set<int32_t> seen;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t v = 0;
    r.u32(&v);
    const auto d = static_cast<int32_t>(v);
    if (d < 0) {
      *why = "dead rank " + std::to_string(d) + " below 0";
      return false;
    }
    if (!seen.insert(d).second) {
      *why = "dead rank " + std::to_string(d) + " listed twice";
      return false;
    }
    dead->push_back(d);
  }
  return true;
}

bool get_version(protocol::Reader& r, std::string* why) {
  uint16_t v = 0;
  if (!r.u16(&v)) {
    *why = "truncated version";
    return false;
  }
  if (v != kQuorumVersion) {
    *why = "membership record version " + std::to_string(v) + ", this build reads " +
           std::to_string(kQuorumVersion);
    return false;
  }
  return true;
}

template <class T>
std::optional<T> finish(protocol::Reader& r, T value, std::string* why, std::string& mine) {
  if (mine.empty() && r.remaining() != 0) mine = std::to_string(r.remaining()) + " trailing bytes";
  if (!mine.empty()) {
    if (why) *why = mine;
    return std::nullopt;
  }
  return value;
}

}  // namespace

int Decision::rank_of(uint64_t uid) const {
  for (size_t r = 0; r < members.size(); ++r)
    if (members[r].uid == uid) return static_cast<int>(r);
  return -1;
}

int Decision::first_survivor() const {
  for (size_t r = 0; r < members.size(); ++r)
    if (members[r].prev_rank >= 0) return static_cast<int>(r);
  return -1;
}

std::vector<uint8_t> encode_candidate(const Candidate& c) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u16(kQuorumVersion);
  put_fields(w, c);
  put_dead(w, c.dead);
  return out;
}

std::optional<Candidate> decode_candidate(std::span<const uint8_t> in, std::string* why) {
  protocol::Reader r(in);
  Candidate c;
  std::string mine;
  if (get_version(r, &mine) && get_fields(r, &c, &mine)) get_dead(r, &c.dead, &mine);
  return finish(r, std::move(c), why, mine);
}

std::vector<uint8_t> encode_decision(const Decision& d) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u16(kQuorumVersion);
  w.u32(d.epoch);
  w.u32(static_cast<uint32_t>(d.members.size()));
  for (const auto& m : d.members) put_fields(w, m);
  return out;
}

std::optional<Decision> decode_decision(std::span<const uint8_t> in, std::string* why) {
  protocol::Reader r(in);
  Decision d;
  std::string mine;
  uint32_t n = 0;
  if (get_version(r, &mine)) {
    if (!r.u32(&d.epoch) || !r.u32(&n))
      mine = "truncated decision";
    else if (n > kMaxMembers)
      mine = std::to_string(n) + " members, more than " + std::to_string(kMaxMembers);
  }
  std::unordered_set<uint64_t> uids;
  // Each member takes at least 16 bytes: a count larger than the input allows is rejected before
  // anything is reserved.
  if (mine.empty() && n > r.remaining() / 16) mine = "truncated member list";
  for (uint32_t i = 0; mine.empty() && i < n; ++i) {
    Candidate c;
    if (!get_fields(r, &c, &mine)) break;
    if (!uids.insert(c.uid).second) mine = "two members with one uid";
    d.members.push_back(std::move(c));
  }
  return finish(r, std::move(d), why, mine);
}

QuorumDecider::QuorumDecider(uint32_t epoch, QuorumParams p, Clock::time_point now)
    : epoch_(epoch), p_(p), start_(now), prev_(static_cast<size_t>(std::max(p.prev_size, 0))) {}

bool QuorumDecider::observe(const Candidate& c) {
  if (decided_) return false;
  for (const auto& s : seen_)
    if (s.uid == c.uid) return false;
  if (c.prev_rank >= 0) {
    if (c.prev_rank >= p_.prev_size || prev_[static_cast<size_t>(c.prev_rank)].arrived)
      return false;
    prev_[static_cast<size_t>(c.prev_rank)].arrived = true;
    ++survivors_;
    // Only a member of the previous epoch saw its failure; a rank outside it names nobody.
    for (int32_t d : c.dead)
      if (d >= 0 && d < p_.prev_size && d != c.prev_rank)
        prev_[static_cast<size_t>(d)].reported_dead = true;
  }
  seen_.push_back(c);
  live_.emplace_back();
  return true;
}

void QuorumDecider::heard(uint64_t uid) {
  for (size_t i = 0; i < seen_.size(); ++i)
    if (seen_[i].uid == uid && live_[i].first_seen) live_[i].heard = true;
}

std::optional<QuorumDecider::Clock::time_point> QuorumDecider::judge_joiners(Clock::time_point now) {
  std::optional<Clock::time_point> wait;
  if (p_.silent_after.count() <= 0) return wait;
  for (size_t i = 0; i < seen_.size(); ++i) {
    Liveness& l = live_[i];
    if (seen_[i].prev_rank >= 0 || l.heard || l.silent) continue;
    if (!l.first_seen) l.first_seen = now;
    const auto by = *l.first_seen + p_.silent_after;
    if (now >= by) {
      l.silent = true;
      ++silent_;
    } else {
      wait = wait ? std::min(*wait, by) : by;
    }
  }
  return wait;
}

int QuorumDecider::reported_dead() const {
  return static_cast<int>(std::count_if(prev_.begin(), prev_.end(), [](const PrevMember& m) {
    return m.reported_dead && !m.arrived;
  }));
}

Decision QuorumDecider::decide() const {
  Decision d;
  d.epoch = epoch_;
  for (const auto& c : seen_)
    if (c.prev_rank >= 0) d.members.push_back(c);
  std::sort(d.members.begin(), d.members.end(),
            [](const Candidate& a, const Candidate& b) { return a.prev_rank < b.prev_rank; });
  for (size_t i = 0; i < seen_.size(); ++i)
    if (seen_[i].prev_rank < 0 && !live_[i].silent) d.members.push_back(seen_[i]);
  for (auto& m : d.members) m.dead.clear();  // a candidate's report, not part of the member
  return d;
}

QuorumDecider::Action QuorumDecider::poll(Clock::time_point now) {
  if (decided_) return *decided_;
  Action a;
  const std::optional<Clock::time_point> joiners_by = judge_joiners(now);
  const int have = static_cast<int>(seen_.size()) - silent_;
  const auto window_end = start_ + p_.join_window;
  const int dead = reported_dead();
  if (survivors_ == p_.prev_size && have >= p_.min_members) {
    a.why = "every member of the previous epoch arrived";
  } else if (survivors_ + dead == p_.prev_size && have >= p_.min_members) {
    a.why = "every member of the previous epoch arrived or was reported dead (" +
            std::to_string(survivors_) + " arrived, " + std::to_string(dead) + " dead)";
  } else if (now >= window_end && have >= p_.min_members) {
    a.why = "join window closed with " + std::to_string(survivors_) + " of " +
            std::to_string(p_.prev_size) + " previous members";
  } else if (now >= start_ + p_.give_up) {
    a.kind = Action::kFail;
    a.why = "epoch " + std::to_string(epoch_) + ": only " + std::to_string(have) + " candidates after " +
            std::to_string(p_.give_up.count()) + " ms, fewer than the minimum of " +
            std::to_string(p_.min_members);
    return a;
  } else {
    a.until = now < window_end ? window_end : start_ + p_.give_up;
    if (joiners_by) a.until = std::min(a.until, *joiners_by);
    return a;
  }
  if (joiners_by) {  // a joiner not yet heard: its beat, or its silence, first
    a.kind = Action::kWait;
    a.until = *joiners_by;
    a.why.clear();
    return a;
  }
  a.kind = Action::kDecide;
  a.decision = decide();
  a.why += " (" + std::to_string(a.decision.members.size() - static_cast<size_t>(survivors_)) + " joiners";
  if (silent_ > 0) a.why += ", " + std::to_string(silent_) + " left out: not heard for " + std::to_string(p_.silent_after.count()) + " ms";
  a.why += ")";
  decided_ = a;
  return a;
}

}  // namespace geoccl::membership
