// Hierarchical broadcast and allgather across domains: each WAN path is crossed once.
//
// Broadcast: the root sends the buffer directly to one rank (the leader) in every other domain,
// all in parallel, then each domain broadcasts inside from its leader (pipelined chain for large
// buffers, binomial tree for small ones).
//
// Allgather: every domain first gathers its own blocks on its leader; the leaders exchange their
// domains' blocks directly (each WAN path carries each block once), and each leader then
// broadcasts the complete output inside its domain.
#include <cstring>

#include "collectives/collectives.h"

namespace geoccl::collectives {
namespace {

// The rank that represents domain d: the root itself in the root's domain, else its first rank.
int leader_of(const topology::Topology& topo, int d, int root) {
  if (root >= 0 && topo.domain_of[static_cast<size_t>(root)] == d) return root;
  return topo.members[static_cast<size_t>(d)].front();
}

void broadcast_inside(OpContext& c, const std::vector<int>& local, int leader, void* buf,
                      size_t bytes, size_t small_bytes) {
  OpContext dom = c.sub(local);
  int root = 0;
  for (size_t i = 0; i < local.size(); ++i)
    if (local[i] == leader) root = static_cast<int>(i);
  if (bytes <= small_bytes)
    tree_broadcast(dom, buf, bytes, root);
  else
    chain_broadcast(dom, buf, bytes, root);
}

}  // namespace

void hierarchical_broadcast(OpContext& c, const topology::Topology& topo, void* buf, size_t bytes,
                            int root, size_t small_bytes) {
  if (bytes == 0) return;
  const int me = c.rank();
  const int my_domain = topo.domain_of[static_cast<size_t>(me)];
  const int my_leader = leader_of(topo, my_domain, root);
  auto data = std::span<uint8_t>(static_cast<uint8_t*>(buf), bytes);
  std::vector<RequestPtr> reqs;
  if (me == root) {
    for (int d = 0; d < topo.domains(); ++d)
      if (d != my_domain) c.send_chunked(leader_of(topo, d, root), data, &reqs);
  } else if (me == my_leader) {
    c.recv_chunked(root, data, &reqs);
  }
  c.wait_all(reqs);
  broadcast_inside(c, topo.members[static_cast<size_t>(my_domain)], my_leader, buf, bytes, small_bytes);
}

void hierarchical_allgather(OpContext& c, const topology::Topology& topo, const void* send,
                            void* recv, size_t block_bytes, size_t small_bytes) {
  if (block_bytes == 0) return;
  const int me = c.rank();
  const int my_domain = topo.domain_of[static_cast<size_t>(me)];
  const auto& local = topo.members[static_cast<size_t>(my_domain)];
  const int leader = local.front();
  auto* out = static_cast<uint8_t*>(recv);
  auto block = [&](int r) { return std::span<uint8_t>(out + static_cast<size_t>(r) * block_bytes, block_bytes); };
  if (block(me).data() != send) std::memcpy(block(me).data(), send, block_bytes);
  std::vector<RequestPtr> reqs;
  // 1. Gather the domain's blocks on its leader.
  if (me == leader) {
    for (int r : local)
      if (r != me) c.recv_chunked(r, block(r), &reqs);
  } else {
    c.send_chunked(leader, block(me), &reqs);
  }
  c.wait_all(reqs);
  // 2. Leaders exchange their domains' blocks.
  if (me == leader) {
    for (int d = 0; d < topo.domains(); ++d) {
      if (d == my_domain) continue;
      const int peer = topo.members[static_cast<size_t>(d)].front();
      for (int r : local) c.send_chunked(peer, block(r), &reqs);
      for (int r : topo.members[static_cast<size_t>(d)]) c.recv_chunked(peer, block(r), &reqs);
    }
    c.wait_all(reqs);
  }
  // 3. The leader broadcasts the whole output inside the domain.
  broadcast_inside(c, local, leader, recv, block_bytes * topo.domain_of.size(), small_bytes);
}

}  // namespace geoccl::collectives
