#include "protocol/liveness.h"

#include <algorithm>
#include <cstdio>

#include "protocol/wire.h"

namespace geoccl::protocol {

std::vector<uint8_t> encode_heartbeat(std::span<const SilentPeer> silent) {
  std::vector<uint8_t> v;
  Writer w(&v);
  const size_t n = std::min<size_t>(silent.size(), kMaxHeartbeatEntries);
  w.u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.u32(silent[i].rank);
    w.u32(silent[i].silent_ms);
  }
  return v;
}

bool decode_heartbeat(std::span<const uint8_t> in, uint32_t world_size, std::vector<SilentPeer>* out) {
  Reader r(in);
  uint32_t n = 0;
  if (!r.u32(&n) || n > kMaxHeartbeatEntries || n > world_size || r.remaining() != size_t{n} * 8) return false;
  std::vector<SilentPeer> v(n);
  for (auto& s : v)
    if (!r.u32(&s.rank) || !r.u32(&s.silent_ms) || s.rank >= world_size) return false;
  auto sorted = v;
  std::sort(sorted.begin(), sorted.end(), [](const SilentPeer& a, const SilentPeer& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].rank == sorted[i - 1].rank) return false;
  *out = std::move(v);
  return true;
}

bool power_of_two_apart(int a, int b, int size) {
  if (a == b || a < 0 || b < 0 || a >= size || b >= size) return false;
  const int d = (b - a + size) % size;
  const int dist = std::min(d, size - d);  // either way round the ring
  return (dist & (dist - 1)) == 0;         // a power of two
}

bool watches(int rank, int peer, int size) {
  if (rank == peer || rank < 0 || peer < 0 || rank >= size || peer >= size) return false;
  return size <= kWatchEveryPeerUpTo || power_of_two_apart(rank, peer, size);
}

std::vector<int> watched_peers(int rank, int size) {
  std::vector<int> out;
  for (int q = 0; q < size; ++q)
    if (watches(rank, q, size)) out.push_back(q);
  return out;
}

namespace {

std::string seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

Liveness::Liveness(int rank, int size, const LivenessOptions& o, TimePoint now)
    : rank_(rank), size_(size), o_(o), peers_(static_cast<size_t>(size)),
      watched_(watched_peers(rank, size)), domain_of_(static_cast<size_t>(size), 0), last_tick_(now) {
  for (auto& p : peers_) p.last_heard = now;
}

void Liveness::set_domains(std::vector<int> domain_of, std::vector<std::string> names) {
  if (domain_of.size() != static_cast<size_t>(size_)) return;
  domain_of_ = std::move(domain_of);
  domain_names_ = std::move(names);
}

void Liveness::heard(int peer, TimePoint now) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.last_heard = std::max(p.last_heard, now);
}

void Liveness::report(int peer, std::vector<SilentPeer> silent, TimePoint now) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  heard(peer, now);
  p.report_at = now;
  p.silent = std::move(silent);
}

void Liveness::host_answers(int peer, bool answers, TimePoint now) {
  auto& since = peers_[static_cast<size_t>(peer)].answering_since;
  if (!answers) since.reset();
  else if (!since) since = now;
}

std::vector<SilentPeer> Liveness::silent_peers(TimePoint now) const {
  std::vector<SilentPeer> out;
  for (int q : watched_) {
    const auto silent = now - peers_[static_cast<size_t>(q)].last_heard;
    if (silent <= 2 * o_.interval) continue;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent).count();
    out.push_back({static_cast<uint32_t>(q), static_cast<uint32_t>(std::min<int64_t>(ms, UINT32_MAX))});
  }
  return out;
}

bool Liveness::fresh(const Peer& q, TimePoint now) const {
  return q.report_at && now - *q.report_at <= 3 * o_.interval && now - q.last_heard <= 2 * o_.interval;
}

int Liveness::witness_hearing(int p, TimePoint now) const {
  for (int w : watched_) {
    if (w == p || !watches(w, p, size_)) continue;
    const Peer& q = peers_[static_cast<size_t>(w)];
    if (!fresh(q, now)) continue;
    const bool lists = std::any_of(q.silent.begin(), q.silent.end(),
                                   [p](const SilentPeer& s) { return s.rank == static_cast<uint32_t>(p); });
    if (!lists) return w;
  }
  return -1;
}

bool Liveness::domain_heard(int p, TimePoint now) const {
  const int d = domain_of_[static_cast<size_t>(p)];
  for (int q = 0; q < size_; ++q) {
    if (q == p || domain_of_[static_cast<size_t>(q)] != d) continue;
    if (q == rank_) return true;
    if (watches(rank_, q, size_) && now - peers_[static_cast<size_t>(q)].last_heard <= 2 * o_.interval) return true;
    if (witness_hearing(q, now) >= 0) return true;
  }
  return false;
}

std::string Liveness::describe(int p) const {
  const int d = domain_of_[static_cast<size_t>(p)];
  const bool named = d >= 0 && static_cast<size_t>(d) < domain_names_.size() && !domain_names_[static_cast<size_t>(d)].empty();
  return "rank " + std::to_string(p) + " (domain " + (named ? domain_names_[static_cast<size_t>(d)] : std::to_string(d)) + ")";
}

std::vector<Liveness::Action> Liveness::tick(TimePoint now) {
  std::vector<Action> out;
  // A tick far behind its schedule means this process did not run: the silence is ours.
  if (now - last_tick_ > std::max<Clock::duration>(3 * o_.interval, o_.window / 2)) grace_until_ = now + o_.window;
  last_tick_ = now;
  const bool deciding = now >= grace_until_;
  bool failed = false;
  for (int i : watched_) {
    Peer& p = peers_[static_cast<size_t>(i)];
    const auto silent = now - p.last_heard;
    if (silent <= 2 * o_.interval) {
      if (p.warned) out.push_back({Action::Kind::kRecovered, i, ErrorCode::kOk, describe(i) + " heard again"});
      p.warned = false;
      p.state = State::kAlive;
      continue;
    }
    int witness = -1;
    State kind;
    const bool answers = p.answering_since.has_value();
    const bool answered_long = answers && now - *p.answering_since >= o_.window / 2;
    if (answers)
      kind = State::kUnresponsive;
    else if ((witness = witness_hearing(i, now)) >= 0)
      kind = State::kUnreachable;
    else if (domain_heard(i, now))
      kind = State::kLost;
    else
      kind = State::kUnreachable;
    const bool past_window = silent >= o_.window;
    p.state = past_window ? kind : State::kSilent;
    if (!deciding) continue;

    std::string why;
    switch (kind) {
      case State::kUnresponsive:
        why = describe(i) + " is unresponsive: no heartbeat for " + seconds(silent) +
              " while its host acknowledges what we send (process stopped or hung?)";
        break;
      case State::kUnreachable:
        why = "link to " + describe(i) + " down for " + seconds(silent) + ": its host does not answer" +
              (witness >= 0 ? "; rank " + std::to_string(witness) + " still hears it (partition)"
                            : "; no rank this one hears can tell whether it is alive");
        break;
      default:
        why = describe(i) + " is lost: silent for " + seconds(silent) +
              ", its host does not answer and no rank hears it (host down?)";
        break;
    }
    ErrorCode code = ErrorCode::kOk;
    if (kind == State::kUnresponsive && past_window && answered_long) code = ErrorCode::kPeerUnresponsive;
    if (kind == State::kLost && past_window) code = ErrorCode::kPeerLost;
    if (kind == State::kUnreachable && silent >= o_.link_bound) {
      code = ErrorCode::kPeerUnreachable;
      why += "; gave up after " + seconds(o_.link_bound) + " (GEOCCL_TCP_RESUME_TIMEOUT_MS)";
    }
    if (code != ErrorCode::kOk && !failed) {
      out.push_back({Action::Kind::kFail, i, code, why});
      failed = true;
      continue;
    }
    if (silent >= 3 * o_.interval && (!p.warned || now - p.warned_at >= o_.warn_every)) {
      out.push_back({Action::Kind::kWarn, i, ErrorCode::kOk, why});
      p.warned = true;
      p.warned_at = now;
    }
  }
  return out;
}

Liveness::State Liveness::state(int peer) const { return peers_[static_cast<size_t>(peer)].state; }

const char* Liveness::state_name(State s) {
  switch (s) {
    case State::kAlive: return "alive";
    case State::kSilent: return "silent";
    case State::kUnresponsive: return "unresponsive";
    case State::kUnreachable: return "unreachable";
    case State::kLost: return "lost";
  }
  return "?";
}

}  // namespace geoccl::protocol
