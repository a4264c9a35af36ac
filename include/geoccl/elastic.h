// Elastic membership: a group that survives the loss of members and admits new ones without
// restarting any process. Each membership epoch is its own Communicator among the members of
// that epoch, with ranks 0..n-1, rendezvoused on the same store under a session of its own
// ("<session>/e<N>", Config::epoch = N), so nothing of an old epoch is ever applied in a new one.
//
// Who is in epoch N+1 is decided through the store (membership/quorum.h): survivors after a
// failure (shrink), plus the processes waiting to join at an epoch boundary (grow), the same list
// on every member; a process that arrives after the decision waits for the next one. Nothing
// depends on a particular rank surviving, rank 0 included, provided the store does: etcd
// (GEOCCL_STORE=etcd://host:port/prefix), or a standalone store (`geoccl store --port P`, or a
// StoreServer) at GEOCCL_STORE=tcp://host:port or MASTER_ADDR:MASTER_PORT.
//
// Typical loop (docs/elastic.md):
//   ElasticGroup g(Config::from_env());
//   if (g.joined()) resync(g);
//   for (;;) {
//     try {
//       if (g.maybe_grow()) { resync(g); continue; }
//       step(g.comm());
//     } catch (const Error&) { g.next_epoch(); resync(g); }
//   }
// where resync gives every member the state of rank g.state_source() (a joiner has none). Every
// epoch begins the same way on every member, joiners included: resync, then maybe_grow() (so a
// boundary repeats its check after a grow), then steps.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "geoccl/communicator.h"
#include "geoccl/config.h"

namespace geoccl {

struct ElasticOptions {
  // After the first survivor arrives at a new epoch: how long the others may take. A transition
  // in which every member of the previous epoch arrives or was reported dead by a survivor (a
  // grow, nobody died, or the failure named every dead rank) does not wait.
  std::chrono::milliseconds join_window{3000};
  // A joiner (join(), or a member that came after a decision): the longest it waits to be
  // admitted (the members admit joiners at their next maybe_grow()).
  std::chrono::milliseconds join_timeout{std::chrono::minutes(5)};
  // Connecting each epoch's communicator (a member that dies meanwhile costs this long).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // Fewer candidates than this after the join window: keep waiting (up to give_up), then fail.
  int min_members = 1;
  std::chrono::milliseconds give_up{std::chrono::seconds(60)};
};

struct ElasticMember {
  uint64_t uid = 0;    // random, one per process
  int prev_rank = -1;  // rank in the previous epoch; -1: joined in this one (its state is stale)
  std::string label;   // "host:pid"
};

class ElasticGroupImpl;

class ElasticGroup {
 public:
  // Epoch 0 among cfg.world_size ranks (cfg.rank from the launcher), or, when the store already
  // holds this session's group (a restarted process), join() it. Throws Error (kTimeout when no
  // store answers within options.connect_timeout, or the Communicator's errors).
  explicit ElasticGroup(Config cfg, ElasticOptions options = {});
  // Waits (bounded by options.join_timeout) to be admitted into the running group of
  // cfg.session at an epoch boundary; cfg.rank and cfg.world_size are ignored.
  static std::unique_ptr<ElasticGroup> join(Config cfg, ElasticOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The current epoch's communicator. After next_epoch() or a maybe_grow() that returned true it
  // is another object; the shared pointer keeps an old one alive for whoever still holds it.
  Communicator& comm() const;
  std::shared_ptr<Communicator> shared_comm() const;
  uint32_t epoch() const;
  int rank() const;
  int size() const;
  // The members of the current epoch by rank.
  const std::vector<ElasticMember>& members() const;
  // This process is new in the current epoch (joined, restarted, or came too late to the last
  // decision): its state must be brought up to date from state_source().
  bool joined() const;
  // The lowest rank that continued from the previous epoch, or -1 when every member is new.
  int state_source() const;

  // After a failure of the current epoch (any Error of its communicator): forms the next epoch
  // among the members that arrive within the join window, plus waiting joiners, and returns its
  // number. The ranks the communicator's failure names with kPeerLost (Error::ranks()) are
  // reported dead, so the epoch is formed as soon as every other member has arrived rather than
  // when the window ends. Called on an epoch that has not failed, it aborts that epoch's
  // communicator (its peers' operations end with kAborted). Throws Error(kTimeout) when no epoch
  // could be formed within the options' bounds.
  uint32_t next_epoch();
  // At a step boundary, on every member of the epoch: true when processes wait to join, in which
  // case the next epoch has been formed with them and the caller calls it again (the first
  // operation of every epoch is this check, on old members and joiners alike). Costs one store check on rank 0 and an 8-byte
  // broadcast. Throws the communicator's Error when the epoch has failed (then next_epoch()).
  bool maybe_grow();

 private:
  ElasticGroup();
  std::unique_ptr<ElasticGroupImpl> impl_;
};

}  // namespace geoccl
