// One typed configuration: defaults, then GEOCCL_* environment variables, then explicit options.
// The fields a user has a reason to set have a variable each (docs/configuration.md); those that
// exist to compare variants or diagnose are set through the one GEOCCL_EXPERIMENT variable
// ("key=value,..."), named below by their key.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace geoccl {

struct Config {
  // Identity and rendezvous (torchrun's variables, GEOCCL_* overrides them).
  int rank = -1;        // RANK / GEOCCL_RANK
  int world_size = -1;  // WORLD_SIZE / GEOCCL_WORLD_SIZE
  int local_rank = 0;   // LOCAL_RANK / GEOCCL_LOCAL_RANK
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR / GEOCCL_MASTER_ADDR
  uint16_t master_port = 29500;           // MASTER_PORT / GEOCCL_MASTER_PORT
  std::string domain;                     // GEOCCL_DOMAIN: region label of this rank
  std::string session = "default";        // GEOCCL_SESSION: key prefix in the store
  // Membership epoch (no variable: set by ElasticGroup, geoccl/elastic.h): every frame carries it,
  // so frames of another epoch never match. Each epoch is its own communicator and session.
  uint32_t epoch = 0;
  // GEOCCL_STORE: the rendezvous store, outside every rank: "tcp://host:port" (`geoccl store`)
  // or "etcd://host:port/prefix". "" = rank 0 hosts one at master_addr:master_port (unless one
  // already serves there), which dies with rank 0.
  std::string store;

  // Security (docs/security.md). GEOCCL_SECRET: the group secret (at least 16 bytes; `geoccl
  // run` makes a fresh one per job), or GEOCCL_SECRET_FILE: a file holding it. With a secret
  // every TCP connection is mutually authenticated and every frame sealed with an AEAD.
  std::string secret;
  std::string secret_file;
  // GEOCCL_CIPHER: auto (AES-256-GCM where the CPU has AES-NI, else XChaCha20-Poly1305),
  // aes256gcm or xchacha20poly1305.
  std::string cipher = "auto";
  // GEOCCL_ALLOW_INSECURE=1: a multi-domain job without a secret runs without the warning.
  bool allow_insecure = false;
  // GEOCCL_SHM_TRUST_HOST=1: with a secret, ranks on one host still use shared memory: its
  // handshake is authenticated with the secret, its frames are not sealed (the host is trusted).
  // Off: with a secret, TCP carries every pair.
  bool shm_trust_host = false;

  // Networking.
  std::string bind_addr;  // GEOCCL_BIND_ADDR: address peers connect to (default: auto)
  // GEOCCL_TRANSPORT: the transport of each path class (docs/transport.md). "auto" =
  // "host=shm,remote=tcp": shared memory between ranks on one host (same boot id and network
  // namespace), TCP otherwise; "tcp" = TCP everywhere; "quic" = QUIC between hosts; or a list
  // "host=shm|tcp,remote=tcp|quic".
  // Every rank must use the same value (a group parameter, checked when ranks connect).
  std::string transport = "auto";
  // GEOCCL_EXPERIMENT shm_ring: bytes of each direction's ring between two ranks on one host;
  // 0: by the number of ranks on the host (4 MiB up to 17 of them, then smaller, at least 256 KiB).
  size_t shm_ring_bytes = 0;
  // GEOCCL_EXPERIMENT quic_cc: ngtcp2's congestion control on QUIC connections (cubic, bbr, bbr2,
  // reno). bbr2 by measurement (docs/transport.md, "QUIC"): cubic collapses on the test bed's lossy
  // and queue-limited paths.
  std::string quic_cc = "bbr2";
  // GEOCCL_EXPERIMENT quic_window: flow-control window of a QUIC connection to a peer whose path is
  // not measured yet (ngtcp2 may grow it to twice that); measured paths get windows sized from
  // their bandwidth-delay product (transport/quic/flow_window.h).
  uint64_t quic_window_bytes = 32u << 20;
  // GEOCCL_EXPERIMENT quic_duplicate: a data frame of at most this many payload bytes goes out on
  // two QUIC streams at once and the first copy to arrive in full is used, so a random packet loss
  // costs it nothing unless it hits both copies (0 = never). Small operations (the 4 KiB allreduce)
  // then keep their latency on lossy paths; the cost is their bytes twice.
  uint64_t quic_duplicate_bytes = 16u << 10;
  // GEOCCL_EXPERIMENT quic_redial_ms: a QUIC connection with data in flight (or a receive waiting
  // on the peer) and nothing heard from the peer for this long is dialled again beside the old one
  // (by the higher rank of the pair); the first of the two to carry packets again wins and the
  // frames not yet acknowledged are re-sent on it, each delivered once. It bounds the recovery
  // after an outage, which QUIC's own retransmission timer, doubling through the outage, would
  // stretch to as much again. 0 = never re-dial.
  std::chrono::milliseconds quic_redial_after{2000};
  // GEOCCL_EXPERIMENT quic_0rtt: a re-dialled QUIC connection resumes the TLS session of the one it
  // replaces and re-sends its frames as 0-RTT early data (1), or takes a full handshake (0). An
  // acceptor with 0 refuses early data, and the dialler falls back to the full handshake.
  bool quic_zero_rtt = true;
  // GEOCCL_TRANSPORT remote=auto: how long QUIC may take to connect before the peers it missed
  // stay on TCP (GEOCCL_EXPERIMENT quic_connect_ms), and the decider probe's burst
  // (GEOCCL_EXPERIMENT transport_probe, one way per candidate and pair of domains).
  std::chrono::milliseconds quic_connect_budget{8000};
  uint64_t transport_probe_bytes = 16u << 20;
  // GEOCCL_EXPERIMENT tcp_cc: congestion control of peer sockets. "auto" = bbr when this rank
  // belongs to a labelled domain (a multi-region job) and the kernel offers it, else the system
  // default; "system" = leave it; any other name (bbr, cubic, reno) is requested for every peer
  // socket.
  std::string tcp_cc = "auto";
  // GEOCCL_TCP_STREAMS: data connections per peer pair; 0 = auto (4; frames to a peer of this
  // rank's own domain take the first only). Rank 0's value is used by every rank.
  int tcp_streams = 0;
  // GEOCCL_EXPERIMENT tcp_buf: SO_SNDBUF/SO_RCVBUF of peer sockets; -1 ("auto") = 32 MiB on WAN
  // jobs (GEOCCL_DOMAIN set), else kernel autotuning (0).
  int64_t tcp_buf_bytes = -1;
  // GEOCCL_EXPERIMENT notsent_lowat: TCP_NOTSENT_LOWAT of data sockets; -1 ("auto") = 1 MiB on WAN
  // jobs, else off (0).
  int64_t tcp_notsent_lowat = -1;
  bool tcp_zerocopy = false;  // GEOCCL_EXPERIMENT zerocopy: MSG_ZEROCOPY (see transport.md)
  size_t tcp_zerocopy_min_bytes = 256 << 10;  // GEOCCL_EXPERIMENT zerocopy_min: smallest such frame
  // GEOCCL_EXPERIMENT stripe: backlog | wide | rr (round robin); see docs/transport.md.
  std::string tcp_stripe = "backlog";
  // GEOCCL_EXPERIMENT resume: re-establish a data stream that breaks (reset by a middlebox, a NAT
  // timeout) and re-send the frames the peer has not acknowledged, instead of failing the group.
  // Costs one copy of every sent byte until the peer acknowledges it. "auto" = on for WAN jobs
  // (GEOCCL_DOMAIN set), off on a single site; on; off.
  std::string tcp_resume = "auto";
  // GEOCCL_EXPERIMENT lazy_connect: over TCP, a rank connects at start-up only the peers 1, 2, 4,
  // 8, ... apart round the ring of ranks, and every other peer when it first has a frame for it
  // (a send, a receive, a heartbeat), so the connections grow with the peers a rank talks to, not
  // with the job. "auto" = on past 32 ranks; on; off (the full mesh at start-up). A group
  // parameter.
  std::string lazy_connect = "auto";
  // GEOCCL_TCP_RESUME_TIMEOUT_MS: how long a broken stream or a cut link may take to come back
  // before the group fails with peer-unreachable; 0 = the operation deadline (op_timeout), so an
  // outage shorter than the deadline is ridden out. Read it through resume_timeout().
  std::chrono::milliseconds tcp_resume_timeout{0};
  // GEOCCL_EXPERIMENT stall_ms: a resumable connection (key resume) with data unacknowledged for
  // this long is replaced by a fresh one instead of waiting out TCP's retransmission backoff
  // after an outage; 0 = never.
  std::chrono::milliseconds tcp_stall_timeout{1000};
  // GEOCCL_EXPERIMENT relay_after_ms: a peer that a TCP connection attempt does not reach within
  // this time (no answer at all: a firewall, a cut path) is reached through a relay, a third rank
  // that reaches it (docs/transport.md "Relays"); 0 = never relay (wait for the direct path until
  // the connect timeout).
  std::chrono::milliseconds relay_after{5000};

  // Liveness (docs/transport.md "Liveness"). GEOCCL_HEARTBEAT_MS: every rank sends every peer a
  // heartbeat this often (0 = none: a stopped process is then found only by deadlines).
  std::chrono::milliseconds heartbeat_interval{1000};
  // GEOCCL_LIVENESS_WINDOW_MS: a peer silent this long while its host acknowledges what we send
  // fails the group with kPeerUnresponsive; silent with its host gone too, and no rank hearing
  // it, with kPeerLost. A link that is down (others hear the peer) is given the resume timeout.
  std::chrono::milliseconds liveness_window{10000};

  // The bulk priority class (Priority::kBulk, docs/transport.md "Channels"): a scavenger.
  // GEOCCL_BULK_RATE: most bit/s the bulk class may send on one WAN path ("200M", "1G", "0" =
  // no cap but what the delay controller allows); decimal k/M/G suffixes, optional "bit".
  uint64_t bulk_rate_bps = 0;
  // GEOCCL_EXPERIMENT bulk_delay_ms: queueing delay (RTT above the path's minimum) at which the
  // bulk class starts backing off.
  std::chrono::milliseconds bulk_target_delay{5};

  // Deadlines.
  std::chrono::milliseconds op_timeout{std::chrono::minutes(5)};       // GEOCCL_TIMEOUT_MS
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(2)};  // GEOCCL_CONNECT_TIMEOUT_MS
  // The resume timeout in force: tcp_resume_timeout if set, else op_timeout.
  std::chrono::milliseconds resume_timeout() const {
    return tcp_resume_timeout.count() > 0 ? tcp_resume_timeout : op_timeout;
  }

  // Algorithms.
  std::string algo = "auto";                // GEOCCL_ALGO: auto|ring|rd|tree|hier[-ring|-small|-direct]|flat
  // GEOCCL_TOPOLOGY: how domains are found. auto = labels (GEOCCL_DOMAIN) when set, else measure
  // the RTT matrix at start-up and cluster; labels; probe (measure even with labels); flat.
  std::string topology = "auto";
  size_t small_msg_bytes = 64 * 1024;  // GEOCCL_EXPERIMENT small_msg: below: latency algorithm
  // GEOCCL_EXPERIMENT wan_small_msg: across domains, allreduces up to this size use one direct
  // exchange between domain leaders (one WAN latency) instead of the hierarchical ring (2(k-1)
  // WAN latencies): on a WAN, latency dominates up to about a bandwidth-delay product.
  // Used only when the WAN paths were not measured (plan_probe=0); otherwise the
  // cost model over the measured paths chooses (collectives/cost_model.h).
  size_t wan_small_msg_bytes = 1 << 20;
  // GEOCCL_EXPERIMENT plan_probe: across domains, the leaders of every pair of domains measure the
  // pair's RTT and its rate in both directions at start-up (bursts of this many bytes each way at
  // once, twice: the first warms the connections), for the planner's cost model, two-hop paths
  // and re-planning (0 = off: size thresholds, no detours, no re-planning). A job of one domain
  // measures nothing. Every rank must use the same value.
  size_t plan_probe_bytes = 4 << 20;
  // GEOCCL_EXPERIMENT replan_ops: with measured paths, every this many collectives of the default
  // priority class the group agrees on what the leaders' transports saw of the paths since the last
  // check, and a change that persisted replan_persist checks becomes the cost model's figures and
  // the ring order from the next check on (collectives/path_monitor.h). 0 = off. Every rank must
  // use the same values.
  int replan_ops = 20;
  int replan_persist = 2;
  // GEOCCL_EXPERIMENT two_hop_gain: with measured paths, a pair of domains whose direct path is
  // this many times slower than the path through a third domain (its worse leg) sends its bulk data
  // that way, through a relay rank in the middle domain (collectives/detour.h; TCP only). 0 = off;
  // otherwise > 1. Every rank must use the same value.
  double two_hop_gain = 2.0;
  size_t chunk_bytes = 1 << 20;  // GEOCCL_EXPERIMENT chunk: pipelining unit
  // GEOCCL_WAN_COMPRESSION: the codec of the WAN hops of float32 sum/avg allreduces that do not
  // name one (OpOptions::compression): none|fp16|bf16|int8|int4|int2|int2-sr|topk:RATIO|
  // topk-int8:RATIO|topk-int4:RATIO|topk-int2:RATIO, optionally
  // "@allgather" or "@ring" (geoccl/compression.h). A group parameter: every rank must agree.
  std::string wan_compression = "none";
  // GEOCCL_EXPERIMENT compression_min: the config default compresses only buffers at least this
  // large (small allreduces are latency-bound, and are often counts or metrics); an explicit
  // OpOptions::compression applies at any size.
  size_t wan_compression_min_bytes = 64 << 10;

  // Observability (docs/metrics.md). GEOCCL_METRICS_PORT: this rank serves /metrics in the
  // Prometheus text format on this port (0 = off); GEOCCL_METRICS_BIND: the address it listens
  // on; GEOCCL_METRICS_LINK_BPS: the known capacity (bit/s) of this rank's inter-domain links,
  // for the utilization and limit series (0 = the rate the transport measures).
  int metrics_port = 0;
  std::string metrics_bind = "0.0.0.0";
  uint64_t metrics_link_bps = 0;
  // GEOCCL_TRACE: a directory where this rank writes its Chrome trace-event JSON ("" = off).
  std::string trace_dir;

  // Logging.
  std::string log_level = "warn";  // GEOCCL_LOG_LEVEL: trace|debug|info|warn|error|off

  // Defaults overridden by the environment. Throws Error(kInvalidArgument) for a malformed value.
  static Config from_env();
  // Applies GEOCCL_* / torchrun variables onto *this, GEOCCL_EXPERIMENT last. Throws
  // Error(kInvalidArgument) for a malformed value, an unknown GEOCCL_EXPERIMENT key, or a variable
  // that is no longer read (naming the GEOCCL_EXPERIMENT key that replaced it).
  void apply_env();
  // Throws Error(kInvalidArgument) when a field is out of range.
  void validate() const;
};

}  // namespace geoccl
