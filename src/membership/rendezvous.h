// Rendezvous: find the group through the store, then let the transport connect directly.
// Store round trips per rank: O(1) to publish itself, plus one lookup per lower-ranked peer (the
// peers it connects to); never O(n^2) from one rank.
#pragma once

#include <memory>
#include <string>

#include "geoccl/config.h"
#include "geoccl/store.h"

namespace geoccl::membership {

struct RendezvousInfo {
  std::unique_ptr<StoreServer> server;  // set on rank 0 when it hosts the store
  std::unique_ptr<StoreClient> store;
  std::string prefix;                   // key prefix unique to this communicator
  uint64_t session_id = 0;              // random, chosen by rank 0, checked in every handshake
  int data_streams = 1;                 // rank 0's choice, so that every rank agrees
};

// Connects to (or, on rank 0, starts) the store at master_addr:master_port and agrees on a
// session id and key prefix. Throws Error(kTimeout / kIo).
//
// The store rank 0 hosts is owned by its job (session name, world size, a random job token):
// - a rank 0 that finds the port taken by an owned store throws Error(kProtocol), naming the
//   address and the other job; it joins an unowned (standalone, `geoccl store`) store;
// - any other rank throws Error(kInvalidArgument), naming the mismatch, when the owner's or rank
//   0's group parameters (world size, session) differ from its own.
// Groups that share one store on purpose use a standalone one.
RendezvousInfo join_store(const Config& cfg);

// The address this rank's transport should listen on: cfg.bind_addr, else the local address
// that routes to the master, else 127.0.0.1.
std::string choose_bind_address(const Config& cfg);

}  // namespace geoccl::membership
