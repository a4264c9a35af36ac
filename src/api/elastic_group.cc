// ElasticGroup: the store-driven shell around the membership decider (membership/quorum.h). It
// does the I/O the decider must not: registers this process as a candidate of an epoch, runs
// the decider when elected, waits (bounded) for the decision and builds that epoch's
// Communicator. Store keys, under "geoccl/<session>/elastic/":
//   latest                 u32: the newest decided epoch (joiners aim at latest + 1)
//   e<N>/count             counter: candidates that arrived at epoch N (index 1, 2, ...)
//   e<N>/c/<index>         a candidate record
//   e<N>/b/<index>         counter: the beats of candidate <index> while it waits for the decision
//   e<N>/decider           counter: the member of epoch N-1 that takes it to 1 decides
//   e<N>/decision          the decision record; e<N>/failed: the decider's reason it could not
// Only set/get/add/check are used, so any store backend serves.
#include "geoccl/elastic.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "core/logging.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "membership/quorum.h"
#include "membership/sealed_store.h"
#include "protocol/wire.h"
#include "security/secret.h"

namespace geoccl {

using Clock = std::chrono::steady_clock;
using membership::Candidate;
using membership::Decision;
using std::chrono::milliseconds;

namespace {

uint64_t random_uid() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
}

std::string host_pid() {
  char host[128] = {0};
  gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(getpid());
}

std::vector<uint8_t> u32_bytes(uint32_t v) {
  std::vector<uint8_t> out;
  protocol::Writer(&out).u32(v);
  return out;
}

milliseconds left(Clock::time_point deadline) {
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

}  // namespace

class ElasticGroupImpl {
 public:
  ElasticGroupImpl(Config cfg, ElasticOptions o)
      : cfg_(std::move(cfg)), o_(o), base_session_(cfg_.session),
        keys_("geoccl/" + base_session_ + "/elastic/"), uid_(random_uid()), label_(host_pid()) {
    // GEOCCL_STORE (etcd:// or tcp://) when set, else the standalone store at MASTER_ADDR:PORT.
    const std::string url =
        !cfg_.store.empty() ? cfg_.store : "tcp://" + cfg_.master_addr + ":" + std::to_string(cfg_.master_port);
    try {
      store_ = open_store(url, o_.connect_timeout);
    } catch (const Error& e) {
      throw Error(e.code(), "elastic group: no store at " + url +
                                " (elastic groups need a store outside every rank: `geoccl store --port P` or "
                                "GEOCCL_STORE=etcd://...): " + e.what());
    }
    // With a group secret the group's records (candidates, decisions, failures) are sealed like
    // every other store value (docs/security.md): a store dump shows none, and a record written
    // without the secret is refused when read (kProtocol naming the key).
    if (const auto secret = security::load_secret(cfg_))
      store_ = std::make_unique<membership::SealedStore>(std::move(store_), *secret);
  }

  // A group of this session exists already (a process restarted into it).
  bool group_exists() { return store_->check(keys_ + "latest"); }

  void bootstrap() {
    decision_.epoch = 0;
    make_comm(cfg_.rank, cfg_.world_size, 0, cfg_.connect_timeout);
    // Epoch 0's member list, for the deciders of later epochs and for joiners.
    std::vector<int64_t> uids(static_cast<size_t>(cfg_.world_size));
    const auto mine = static_cast<int64_t>(uid_);
    comm_->allgather(&mine, uids.data(), 1, DataType::kInt64).wait();
    for (int r = 0; r < cfg_.world_size; ++r)
      decision_.members.push_back({static_cast<uint64_t>(uids[static_cast<size_t>(r)]), r, "epoch 0 rank " + std::to_string(r)});
    decision_.members[static_cast<size_t>(cfg_.rank)].label = label_;
    if (cfg_.rank == 0) {
      store_->set(epoch_key(0) + "decision", membership::encode_decision(decision_));
      store_->set(keys_ + "latest", u32_bytes(0));
    }
    sync_members();
  }

  void join() {
    const auto raw = store_->get(keys_ + "latest", o_.connect_timeout);
    protocol::Reader r(raw);
    uint32_t latest = 0;
    if (!r.u32(&latest) || r.remaining() != 0)
      throw Error(ErrorCode::kProtocol, "elastic group: malformed '" + keys_ + "latest' in the store");
    form(latest + 1, -1, 0);
  }

  // `after_failure`: the current epoch failed (ElasticGroup::next_epoch), and this member reports
  // the ranks its failure says are dead; else a grow at a step boundary, where the epoch is
  // healthy and nobody is dead.
  uint32_t next_epoch(bool after_failure) {
    const int prev_rank = comm_ ? comm_->rank() : -1;
    const int prev_size = static_cast<int>(decision_.members.size());
    auto dead = comm_ && after_failure ? lost_ranks(*comm_) : std::vector<int32_t>{};
    comm_.reset();  // the old epoch's connections go (kept alive by whoever still holds it)
    form(decision_.epoch + 1, prev_rank, prev_size, std::move(dead));
    return decision_.epoch;
  }

  bool maybe_grow() {
    int64_t waiting = 0;
    if (comm_->rank() == 0) waiting = store_->check(epoch_key(decision_.epoch + 1) + "count") ? 1 : 0;
    if (comm_->size() > 1) comm_->broadcast(&waiting, 1, DataType::kInt64, 0).wait();
    if (!waiting) return false;
    next_epoch(/*after_failure=*/false);
    return true;
  }

  std::shared_ptr<Communicator> comm_;
  Decision decision_;
  std::vector<ElasticMember> members_;
  int my_rank_ = -1;

 private:
  std::string epoch_key(uint32_t n) const { return keys_ + "e" + std::to_string(n) + "/"; }

  // The ranks whose process is gone according to `e`: those it names with kPeerLost (an
  // unreachable or unresponsive peer may be alive and on its way to the next epoch).
  static std::vector<int32_t> dead_in(const Error& e) {
    if (e.code() != ErrorCode::kPeerLost) return {};
    return std::vector<int32_t>(e.ranks().begin(), e.ranks().end());
  }

  // The ranks of `c`'s epoch that its failure reports dead, for this member's candidate record.
  // A failed communicator ends every operation issued on it at once with its first failure, so a
  // barrier returns that failure; abort() before it keeps an earlier failure and fails a healthy
  // communicator (next_epoch() is for an epoch that failed; one called on a healthy epoch leaves
  // it anyway, and its peers then fail with kAborted), so the barrier never waits for peers.
  static std::vector<int32_t> lost_ranks(Communicator& c) {
    c.abort("forming the next membership epoch");
    try {
      c.barrier().wait(std::chrono::seconds(5));
    } catch (const Error& e) {
      return dead_in(e);
    }
    return {};
  }

  void sync_members() {
    members_.clear();
    for (const auto& m : decision_.members) members_.push_back({m.uid, m.prev_rank, m.label});
    my_rank_ = decision_.rank_of(uid_);
  }

  void make_comm(int rank, int size, uint32_t epoch, milliseconds connect_timeout) {
    Config c = cfg_;
    c.rank = rank;
    c.world_size = size;
    c.epoch = epoch;
    c.session = base_session_ + "/e" + std::to_string(epoch);
    c.connect_timeout = connect_timeout;
    comm_ = std::make_shared<Communicator>(std::move(c));
  }

  // Takes part in epochs from `first` on until one is formed with this process in it:
  // `prev_rank` is its rank in the last formed epoch (of `prev_size` members), -1 for a joiner;
  // `dead`: the ranks of that epoch this process knows to be dead (its candidate reports them, so
  // the decider need not wait out the join window for them).
  void form(uint32_t first, int prev_rank, int prev_size, std::vector<int32_t> dead = {}) {
    auto deadline = Clock::now() + (prev_rank >= 0 ? o_.join_window + o_.give_up + o_.connect_timeout
                                                   : o_.join_timeout);
    for (uint32_t n = first;; ++n) {
      if (Clock::now() >= deadline)
        throw Error(ErrorCode::kTimeout, "elastic group: no epoch formed with this process (" + label_ +
                                             ") by epoch " + std::to_string(n));
      const std::string e = epoch_key(n);
      const int64_t index = store_->add(e + "count", 1);
      store_->set(e + "c/" + std::to_string(index),
                  membership::encode_candidate({uid_, prev_rank, label_, dead}));
      if (prev_rank >= 0 && store_->add(e + "decider", 1) == 1) decide(n, prev_size);
      std::optional<Decision> d =
          await_decision(n, prev_rank >= 0 ? o_.join_window + o_.give_up + std::chrono::seconds(5) : left(deadline),
                         e + "b/" + std::to_string(index));
      if (!d) continue;  // the decider went away: the next epoch number, elected anew
      const int rank = d->rank_of(uid_);
      if (rank < 0) {
        // Came after the decision: a joiner of the next one.
        GEOCCL_LOG(kInfo, "elastic: arrived after epoch " << n << " was decided; waiting for the next");
        prev_rank = -1;
        dead.clear();
        deadline = Clock::now() + o_.join_timeout;
        continue;
      }
      decision_ = *d;
      sync_members();
      try {
        make_comm(rank, static_cast<int>(d->members.size()), n, o_.connect_timeout);
        GEOCCL_LOG(kInfo, "elastic: epoch " << n << ": rank " << rank << " of " << d->members.size());
        return;
      } catch (const Error& err) {
        // A member of the decision died or never came: the next epoch among those who did.
        GEOCCL_LOG(kWarn, "elastic: epoch " << n << " could not connect (" << err.what() << "); forming the next");
        prev_rank = rank;
        prev_size = static_cast<int>(d->members.size());
        dead = dead_in(err);
        deadline = Clock::now() + o_.join_window + o_.give_up + o_.connect_timeout;
      }
    }
  }

  // The elected decider of epoch n: reads candidates until the quorum rule decides, publishes.
  void decide(uint32_t n, int prev_size) {
    const std::string e = epoch_key(n);
    membership::QuorumParams p;
    p.prev_size = prev_size;
    p.join_window = o_.join_window;
    p.give_up = o_.give_up;
    p.min_members = o_.min_members;
    p.silent_after = kSilentAfter;
    membership::QuorumDecider q(n, p, Clock::now());
    const auto window_end = Clock::now() + o_.join_window;
    std::set<int64_t> pending;
    int64_t counted = 0;
    // Joiners not heard yet since their record was read: index -> (uid, beats then).
    std::map<int64_t, std::pair<uint64_t, int64_t>> unheard;
    auto next_listen = Clock::now();
    for (;;) {
      const int64_t total = store_->add(e + "count", 0);
      for (int64_t i = counted + 1; i <= total; ++i) pending.insert(i);
      counted = std::max(counted, total);
      // Every pending record in one batch (a round trip to the store, not one per candidate).
      const std::vector<int64_t> ids(pending.begin(), pending.end());
      std::vector<std::string> keys;
      for (int64_t id : ids) keys.push_back(e + "c/" + std::to_string(id));
      auto records = store_->get_present(keys);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i >= records.size() || !records[i]) continue;
        std::string why;
        if (auto c = membership::decode_candidate(*records[i], &why)) {
          if (q.observe(*c) && c->prev_rank < 0)
            unheard[ids[i]] = {c->uid, store_->add(e + "b/" + std::to_string(ids[i]), 0)};
        } else
          GEOCCL_LOG(kWarn, "elastic: ignoring a malformed candidate " << keys[i] << ": " << why);
        pending.erase(ids[i]);
      }
      // A candidate that has taken its number but not yet written its record is waited for
      // (within the window): the decision includes everyone who registered in time.
      if (!pending.empty() && Clock::now() < window_end) {
        std::this_thread::sleep_for(milliseconds(5));
        continue;
      }
      const auto a = q.poll(Clock::now());
      if (a.kind == membership::QuorumDecider::Action::kDecide) {
        GEOCCL_LOG(kInfo, "elastic: epoch " << n << " decided: " << a.decision.members.size() << " members, " << a.why);
        store_->set(e + "decision", membership::encode_decision(a.decision));
        store_->set(keys_ + "latest", u32_bytes(n));
        return;
      }
      if (a.kind == membership::QuorumDecider::Action::kFail) {
        store_->set(e + "failed", std::vector<uint8_t>(a.why.begin(), a.why.end()));
        return;
      }
      // A joiner's beat since its record was read: it is alive (QuorumDecider::heard). After the
      // poll, which starts the decider's clock for the joiners it read.
      if (!unheard.empty() && Clock::now() >= next_listen) {
        next_listen = Clock::now() + kBeat / 2;
        for (auto it = unheard.begin(); it != unheard.end();) {
          if (store_->add(e + "b/" + std::to_string(it->first), 0) == it->second.second) {
            ++it;
            continue;
          }
          q.heard(it->second.first);
          it = unheard.erase(it);
        }
      }
      std::this_thread::sleep_until(std::min(a.until, Clock::now() + milliseconds(10)));
    }
  }

  // A waiting candidate beats every kBeat or so (one store round trip more); the decider leaves
  // out a joiner it has not heard for kSilentAfter since it read its record (quorum.h). Wide
  // enough for a store across a WAN and a loaded host.
  static constexpr milliseconds kBeat{100};
  static constexpr milliseconds kSilentAfter{3000};

  // The decision of epoch n, nullopt when none came within `limit`; throws the decider's reason
  // when it gave up. Meanwhile the candidate beats on `beat` (its liveness for the decider).
  std::optional<Decision> await_decision(uint32_t n, milliseconds limit, const std::string& beat) {
    const std::string e = epoch_key(n);
    const auto deadline = Clock::now() + limit;
    for (;;) {
      store_->add(beat, 1);
      try {
        const auto raw = store_->get(e + "decision", std::clamp(left(deadline), milliseconds(1), kBeat));
        std::string why;
        auto d = membership::decode_decision(raw, &why);
        if (!d) throw Error(ErrorCode::kProtocol, "elastic group: malformed decision of epoch " + std::to_string(n) + ": " + why);
        return d;
      } catch (const Error& err) {
        if (err.code() != ErrorCode::kTimeout) throw;
      }
      if (store_->check(e + "failed")) {
        const auto raw = store_->get(e + "failed", milliseconds(1000));
        throw Error(ErrorCode::kTimeout, "elastic group: " + std::string(raw.begin(), raw.end()));
      }
      if (Clock::now() >= deadline) return std::nullopt;
    }
  }

  Config cfg_;
  ElasticOptions o_;
  std::string base_session_, keys_;
  uint64_t uid_;
  std::string label_;
  std::unique_ptr<Store> store_;
};

ElasticGroup::ElasticGroup() = default;

ElasticGroup::ElasticGroup(Config cfg, ElasticOptions options)
    : impl_(std::make_unique<ElasticGroupImpl>(std::move(cfg), options)) {
  if (impl_->group_exists())
    impl_->join();
  else
    impl_->bootstrap();
}

std::unique_ptr<ElasticGroup> ElasticGroup::join(Config cfg, ElasticOptions options) {
  std::unique_ptr<ElasticGroup> g(new ElasticGroup());
  g->impl_ = std::make_unique<ElasticGroupImpl>(std::move(cfg), options);
  g->impl_->join();
  return g;
}

ElasticGroup::~ElasticGroup() = default;

Communicator& ElasticGroup::comm() const { return *impl_->comm_; }
std::shared_ptr<Communicator> ElasticGroup::shared_comm() const { return impl_->comm_; }
uint32_t ElasticGroup::epoch() const { return impl_->decision_.epoch; }
int ElasticGroup::rank() const { return impl_->my_rank_; }
int ElasticGroup::size() const { return static_cast<int>(impl_->members_.size()); }
const std::vector<ElasticMember>& ElasticGroup::members() const { return impl_->members_; }
bool ElasticGroup::joined() const {
  return impl_->my_rank_ >= 0 && impl_->members_[static_cast<size_t>(impl_->my_rank_)].prev_rank < 0;
}
int ElasticGroup::state_source() const { return impl_->decision_.first_survivor(); }
uint32_t ElasticGroup::next_epoch() { return impl_->next_epoch(/*after_failure=*/true); }
bool ElasticGroup::maybe_grow() { return impl_->maybe_grow(); }

}  // namespace geoccl
