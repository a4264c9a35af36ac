// Rendezvous: find the group through the store, then let the transport connect directly.
// Store round trips per rank: O(1) to publish itself, plus one lookup per lower-ranked peer (the
// peers it connects to); never O(n^2) from one rank.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "geoccl/config.h"
#include "geoccl/store.h"
#include "membership/group_params.h"
#include "security/secret.h"

namespace geoccl::membership {

struct RendezvousInfo {
  std::unique_ptr<StoreServer> server;  // set on rank 0 when it hosts the store
  std::unique_ptr<Store> store;         // the TCP store, or whatever cfg.store names
  std::string prefix;                   // key prefix unique to this communicator
  std::string session;                  // the session its keys are under (protocol::key_session)
  uint64_t session_id = 0;              // random, chosen by rank 0, checked in every handshake
  GroupParams params;                   // rank 0's; params.hash() is checked in every handshake
  int data_streams = 1;                 // params.data_streams (0: measured)
  // The group secret (GEOCCL_SECRET / GEOCCL_SECRET_FILE) when set: store values are sealed with
  // it (SealedStore) and connections authenticated (docs/security.md).
  std::optional<security::Key> secret;
};

// Where a rank that cannot join (its group parameters differ from rank 0's) leaves the reason,
// relative to the group's prefix, so that every rank fails with it.
inline constexpr const char* kSetupErrorKey = "setup-error";
// Counts the ranks that failed with that reason (each adds 1).
inline constexpr const char* kSetupErrorSeenKey = "setup-error-seen";

// Connects to the store and agrees on a session id and key prefix. Throws Error(kTimeout / kIo).
// The store is cfg.store when set (an external store: tcp://, a standalone `geoccl store`, or
// etcd://; no rank hosts one, so the store outlives any rank, rank 0 included, and the survivors
// of a failure can form their next group through it); else master_addr:master_port, which rank
// 0 hosts unless something already serves there (the store then dies with rank 0).
// A malformed cfg.store is Error(kInvalidArgument) naming GEOCCL_STORE.
//
// The store rank 0 hosts is owned by its job (session name, world size, a random job token):
// - a rank 0 that finds the port taken by an owned store throws Error(kProtocol), naming the
//   address and the other job; it joins an unowned (standalone, `geoccl store`) store;
// - a rank 0 whose cfg.store names an owned store (another job's rank 0 hosts it) throws
//   Error(kProtocol) likewise: an external store must be a standalone one;
// - any other rank throws Error(kInvalidArgument), naming the mismatch, when the owner's or rank
//   0's group parameters (world size, session) differ from its own.
// Groups that share one store on purpose use a standalone one (or etcd); on a store that outlives
// jobs, each job run needs its own GEOCCL_SESSION (or etcd prefix), since ranks find their group
// by counting the groups of their session created before.
// A rank whose group parameters (GroupParams: streams, chunk size, thresholds, algorithm,
// transport, topology, ...) differ from rank 0's throws Error(kInvalidArgument) naming each
// setting with both values, and leaves that message where setup_error() finds it.
RendezvousInfo join_store(const Config& cfg);

// The message a rank left when it could not join this group, if any (one store round trip).
std::optional<std::string> setup_error(const RendezvousInfo& info);
// The store's host waits (at most `limit`) until `ranks` ranks have counted themselves in
// kSetupErrorSeenKey, before it takes the store down with it. (An external store stays up: the
// reason stays readable without this wait.)
void await_setup_error_seen(const RendezvousInfo& info, int ranks, std::chrono::milliseconds limit);

// The address this rank's transport should listen on: cfg.bind_addr, else the local address
// that routes to the master, else 127.0.0.1.
std::string choose_bind_address(const Config& cfg);

}  // namespace geoccl::membership
