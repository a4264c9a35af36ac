// Communicator: a group of ranks and the collectives among them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/config.h"
#include "geoccl/types.h"
#include "geoccl/work.h"

namespace geoccl {

class CommunicatorImpl;

// Per-call options; unset fields come from the communicator's Config.
struct OpOptions {
  std::optional<std::chrono::milliseconds> timeout;
  std::string algo;  // "" = config's choice; "ring", "rd" (recursive doubling), "tree", ...
};

// Statistics of one peer connection, for metrics and `geoccl bench --verbose`.
struct PeerStats {
  int peer = -1;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// All operations are asynchronous and return a Work. Buffers are raw memory with a count of
// elements of `dtype`; every rank must call the same operations in the same order with matching
// counts, dtypes and roots, or every rank gets Error(kMismatch). Invalid arguments throw
// Error(kInvalidArgument) from the call itself, before anything is sent.
class Communicator {
 public:
  // Connects to the group: rank 0 hosts the rendezvous store unless cfg.master_addr:port already
  // serves one. Blocks until every rank has connected, or throws Error (kTimeout, kProtocol, ...).
  explicit Communicator(Config cfg);
  // Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and GEOCCL_* variables.
  static std::unique_ptr<Communicator> from_env();
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const Config& config() const;

  // In place: `buf` holds `count` elements in, the reduction of all ranks' buffers out.
  Work allreduce(void* buf, size_t count, DataType dtype, ReduceOp op, const OpOptions& o = {});
  Work broadcast(void* buf, size_t count, DataType dtype, int root, const OpOptions& o = {});
  // recv holds size()*count elements; rank r's `send` lands at recv + r*count.
  Work allgather(const void* send, void* recv, size_t count, DataType dtype,
                 const OpOptions& o = {});
  // send holds size()*recv_count elements; rank r receives the reduction of block r.
  Work reduce_scatter(const void* send, void* recv, size_t recv_count, DataType dtype,
                      ReduceOp op, const OpOptions& o = {});
  // In place at root; other ranks' buffers are left as they were.
  Work reduce(void* buf, size_t count, DataType dtype, ReduceOp op, int root,
              const OpOptions& o = {});
  // recv (root only; may be null elsewhere) holds size()*count elements.
  Work gather(const void* send, void* recv, size_t count, DataType dtype, int root,
              const OpOptions& o = {});
  // send (root only; may be null elsewhere) holds size()*count elements.
  Work scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
               const OpOptions& o = {});
  // send and recv each hold size()*count elements; block j of send goes to rank j.
  Work alltoall(const void* send, void* recv, size_t count, DataType dtype,
                const OpOptions& o = {});
  Work barrier(const OpOptions& o = {});
  // Point to point; matched by (peer, tag) in issue order.
  Work send(const void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0,
            const OpOptions& o = {});
  Work recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0,
            const OpOptions& o = {});

  std::vector<PeerStats> peer_stats() const;

 private:
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace geoccl
