// Communicator: a group of ranks and the collectives among them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/compression.h"
#include "geoccl/config.h"
#include "geoccl/types.h"
#include "geoccl/work.h"

namespace geoccl {

class CommunicatorImpl;

// Per-call options; unset fields come from the communicator's Config.
struct OpOptions {
  std::optional<std::chrono::milliseconds> timeout;
  std::string algo;  // "" = config's choice; "ring", "rd" (recursive doubling), "tree", ...
  Priority priority = Priority::kGradient;
  // allreduce only: compression of the hops that cross domains (geoccl/compression.h). Unset:
  // the config's GEOCCL_WAN_COMPRESSION. Every rank must pass the same (kMismatch otherwise).
  // An explicit codec on anything but a float32 sum/avg is Error(kInvalidArgument); the config
  // default leaves such calls uncompressed.
  std::optional<Compression> compression;
  // Error feedback for a compressed allreduce: "" = none. Otherwise what the codec dropped on
  // this rank is kept under this key and added before encoding in the next allreduce with the
  // same key (a different element count starts afresh). Use one stable key per tensor or bucket.
  std::string feedback_key;
};

// Statistics of one peer connection, for metrics and `geoccl bench --verbose`.
// What one peer's link carried, transport-neutral, plus the TCP detail where TCP carries it.
struct PeerStats {
  int peer = -1;
  std::string transport;  // the device that carries this peer's frames: "tcp", "shm", "quic"
  // GEOCCL_TRANSPORT remote=auto: why the protocol decider chose `transport` for this peer's
  // pair of domains, with the figures of every candidate ("" when nothing was decided).
  std::string transport_choice;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  // Smoothed RTT where the transport measures one (TCP: the data streams' mean weighted by the
  // bytes each sent; before any sent, the control stream's).
  double rtt_ms = 0;
  // TCP: the rank whose relay carries this peer's connections, because the two could not reach
  // each other directly (Config::relay_after); -1: direct.
  int relay = -1;
  // TCP: bytes this rank forwarded, as a relay, on connections with this peer at one end.
  uint64_t relayed_bytes = 0;
  // Shared memory: of bytes_sent, those a ring step sent on straight from the ring they arrived
  // in (received, reduced and sent in one pass; docs/transport.md).
  uint64_t forwarded_bytes = 0;
  // TCP: the rank whose relay carries this peer's bulk data streams, a two-hop path much faster
  // than the direct one (GEOCCL_TWO_HOP; docs/transport.md "Two-hop paths"); -1: none. Frames
  // from `two_hop_min_bytes` on take it, smaller ones the direct data stream.
  int two_hop = -1;
  uint64_t two_hop_min_bytes = 0;
  // The bulk class's own link to the peer (Priority::kBulk): bytes and RTT.
  uint64_t bulk_bytes_sent = 0, bulk_bytes_received = 0;
  double bulk_rtt_ms = 0;

  // TCP only: one data connection to the peer: the kernel's TCP_INFO (Linux) at the time of the
  // call and the connection's own counters. Zero where the kernel does not report a field.
  struct TcpStream {
    int index = 0;                   // data stream 1..S (0 is the control stream, not listed)
    std::string congestion_control;  // what the kernel runs on this socket ("bbr", "cubic", ...)
    double rtt_ms = 0;               // smoothed RTT
    double min_rtt_ms = 0;
    uint32_t cwnd_segments = 0;
    uint32_t mss = 0;
    uint64_t retransmits = 0;        // segments retransmitted over the connection's life
    uint64_t bytes_retransmitted = 0;
    uint64_t delivery_rate_bps = 0;  // bit/s, most recent sample
    uint64_t pacing_rate_bps = 0;    // bit/s
    uint64_t send_buffer = 0, receive_buffer = 0;  // SO_SNDBUF / SO_RCVBUF as the kernel holds them
    uint64_t frames_sent = 0, frames_received = 0, bytes_sent = 0;
    // Times this stream broke and was re-established (Config::tcp_resume), and frames re-sent.
    uint64_t reconnects = 0, frames_resent = 0;
    // The rank whose relay carries this stream (-1: direct): a relayed pair's, or a two-hop
    // path's for bulk data (GEOCCL_TWO_HOP).
    int via = -1;
  };
  // TCP only: aggregates over the data streams (min RTT the least, the rest sums) and each one.
  struct Tcp {
    int data_streams = 0;  // open
    int width = 0;         // those this rank's frames are spread over now
    uint64_t width_changes = 0;  // measured stream counts: widths settled on after a trial
    std::string congestion_control;  // of the first data stream
    double min_rtt_ms = 0;
    uint64_t cwnd_segments = 0;
    uint64_t retransmits = 0;
    uint64_t bytes_retransmitted = 0;
    uint64_t delivery_rate_bps = 0;
    uint64_t pacing_rate_bps = 0;
    std::vector<TcpStream> streams;
  } tcp;
  // QUIC only: ngtcp2's view of the connection (rtt_ms above is its smoothed RTT).
  struct Quic {
    std::string congestion_control;  // "cubic", "bbr", "bbr2", "reno"
    double min_rtt_ms = 0;
    uint64_t cwnd_bytes = 0;
    uint64_t bytes_in_flight = 0;
    uint64_t delivery_rate_bps = 0;  // bit/s
    uint64_t pacing_rate_bps = 0;
    uint64_t streams_opened = 0;     // data frame copies sent, one stream each
    uint64_t frames_duplicated = 0;  // small frames sent twice (Config::quic_duplicate_bytes)
    uint64_t reconnects = 0;         // replaced after a silence (Config::quic_redial_after)
    uint64_t frames_resent = 0;      // frames sent again on a replacing connection
    uint64_t zero_rtt = 0;           // replacing connections resumed with 0-RTT early data accepted
    uint64_t zero_rtt_refused = 0;   // replacing connections whose 0-RTT was refused (full handshake)
    double reconnect_ms = 0;         // dialler, last replacement: from its first packet from the peer
                                     // (the path is back) until every frame re-sent was acknowledged
    bool gso = false;                // UDP GSO in use on the device's socket
    // Flow control (src/transport/quic/flow_window.h): the receive windows this side gives the
    // peer, sized from the path's bandwidth-delay product once it is measured, and the figures
    // they were sized from (0 = not measured yet: Config::quic_window_bytes).
    uint64_t window_bytes = 0;         // connection window
    uint64_t stream_window_bytes = 0;  // each data frame's stream
    uint64_t max_window_bytes = 0;     // ngtcp2's auto-tuning ceiling, set when the connection was made
    uint64_t window_rtt_ns = 0;
    uint64_t window_rate_bps = 0;
  } quic;
};

// The domains (regions) the group spans, as found at start-up.
struct TopologyInfo {
  std::vector<int> domain_of;      // rank -> domain index
  std::vector<std::string> names;  // domain -> label ("" when discovered from RTTs)
  std::string source;              // "labels", "rtt" or "single"
  std::vector<double> rtt_ms;      // size*size matrix when measured, else empty
  std::string describe;            // one line for logs
  // Across domains (Config::plan_probe_bytes > 0): what the leaders measured between every pair
  // of domains at start-up, agreed by every rank (domains*domains, row-major; empty otherwise):
  // one-way delay (half the fastest RTT) and one flow's delivery rate from row to column.
  std::vector<double> wan_one_way_ms;
  std::vector<double> wan_rate_mbps;
  // Where the start-up figures came from: "measured", or "carried" from the previous epoch of an
  // elastic group (the same named domains, measured by rank 0's process within 30 minutes);
  // empty without figures.
  std::string paths_source;
  // Re-planning while the job runs (Config::replan_ops): how many times the figures above were
  // replaced, after which collective (counted in the default priority class; 0: never), and what
  // changed. The figures above are the ones in force.
  int replans = 0;
  uint64_t replanned_after_op = 0;
  std::string replan_change;
  std::vector<int> ring_order;  // the domains in the order of the ring across them, in force
  // Two-hop paths for bulk data (Config::two_hop_gain): one line per pair of domains that sends
  // through a third, with the figures that chose it. wan_rate_mbps holds the two-hop rate there.
  std::vector<std::string> two_hop;
};

// The planner's choice for an allreduce (Communicator::plan_allreduce): the algorithm, why, and
// the cost model's predicted time (negative when there is no model: one domain, or no paths).
struct AllreducePlan {
  std::string algo;
  std::string why;
  double predicted_ms = -1;
};

// What a sparse allgather moved on this rank (Communicator::sparse_allgather).
struct SparseResult {
  uint64_t piece_bytes = 0;     // this rank's encoded piece
  uint64_t bytes_sent = 0;      // to all peers: each piece copy and its 8-byte length
  uint64_t bytes_received = 0;  // from all peers, likewise
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
  // The membership epoch this communicator belongs to (Config::epoch): every frame it sends
  // carries it, and a frame of another epoch is a mismatch, never applied.
  uint32_t epoch() const;

  // Fails the group on purpose: every pending Work, on this rank and on every peer it can reach,
  // ends with Error(kAborted) naming this rank and `reason`, within about a round trip (the
  // peers are told by an abort frame). Operations queued behind them, and every operation issued
  // later, fail at once with the same error; destroying the communicator afterwards does not
  // wait for peers. Any thread, any number of times (only the first failure is kept).
  void abort(const std::string& reason = "");

  // What allreduce(count, dtype, o) would run, and its predicted time (same on every rank).
  AllreducePlan plan_allreduce(size_t count, DataType dtype, const OpOptions& o = {}) const;
  // The cost model's time (ms) for a float32 allreduce of `count` values with `codec` on the hops
  // across domains (none: uncompressed), on the path figures in force: what compression "auto"
  // compares (docs/compression.md). A compressed call is modelled as a hierarchical ring of the
  // codec's encoded bytes (times k/2 for the allgather form), its CPU time left out; where the
  // call would not run a hierarchical plan (GEOCCL_ALGO), as the uncompressed call. 0 without
  // measured paths (one domain, plan_probe=0).
  double predicted_allreduce_ms(size_t count, const Compression& codec) const;
  // In place: `buf` holds `count` elements in, the reduction of all ranks' buffers out.
  Work allreduce(void* buf, size_t count, DataType dtype, ReduceOp op, const OpOptions& o = {});
  Work broadcast(void* buf, size_t count, DataType dtype, int root, const OpOptions& o = {});
  // recv holds size()*count elements; rank r's `send` lands at recv + r*count.
  Work allgather(const void* send, void* recv, size_t count, DataType dtype,
                 const OpOptions& o = {});
  // send holds size()*recv_count elements; rank r receives the reduction of block r. The two
  // buffers must not overlap (kInvalidArgument).
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
  // Sparse allgather: this rank contributes `nnz` pairs (indices[i], values[i]) of a float32
  // vector of `count` elements (indices distinct, in [0, count), any order), and every rank's
  // `out` (count elements) becomes the sum of all ranks' pairs, zero elsewhere, bit-identical on
  // every rank. On the wire each rank's pairs stay sparse: indices delta-coded, values as
  // float32 (value_bits 32) or sign + magnitude codes of 8, 4 or 2 bits per block of 4096
  // (docs/compression.md, "Sparse allgather"); the dense vector is built once, at the end, from
  // the pieces in rank order. `values` is replaced, before the call returns, by the values as
  // every rank decodes them (the quantized ones below 32 bits): what this rank actually
  // contributed, for error feedback. `result` (may be null) is filled before the Work completes.
  // Every rank must pass the same count and value_bits (kMismatch otherwise).
  // Error(kInvalidArgument) from the call for a bad index, a repeated one, or a bad width.
  Work sparse_allgather(const int64_t* indices, float* values, size_t nnz, float* out, size_t count,
                        uint32_t value_bits = 32, SparseResult* result = nullptr, const OpOptions& o = {});
  // Point to point. A pair's messages of one class are matched in issue order, whatever their
  // tag: the n-th receive from a peer takes its n-th send, and a tag that differs fails the
  // group with kMismatch. Each completes when its message has gone or arrived: a receive still
  // waiting for its sender holds back no later operation of the class (collectives complete in
  // issue order among themselves).
  Work send(const void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0,
            const OpOptions& o = {});
  Work recv(void* buf, size_t count, DataType dtype, int peer, uint32_t tag = 0,
            const OpOptions& o = {});

  // Receives the next message with `tag` from whichever peer's message is there first (torch's
  // recvAnysource): among the peers whose next point-to-point message on this priority class
  // has arrived with this tag, the lowest rank. Work::source() tells who sent it. The count
  // must match the sender's (kMismatch otherwise). Later operations of the same class start
  // once the source is known.
  Work recv_any(void* buf, size_t count, DataType dtype, uint32_t tag = 0, const OpOptions& o = {});

  std::vector<PeerStats> peer_stats() const;
  // The domains and the plan's figures in force now (a copy: re-planning may replace them).
  TopologyInfo topology() const;
  // What compressed allreduces did on this rank, and the memory of its error-feedback residuals.
  CompressionStats compression_stats() const;
  // Drops the residual kept under `key` ("" = all of them); a later call with it starts afresh.
  void forget_feedback(const std::string& key = "");

 private:
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace geoccl
