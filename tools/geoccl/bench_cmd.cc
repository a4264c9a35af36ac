#include "bench_cmd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/half.h"
#include "cpu_clock.h"
#include "resources.h"
#include "geoccl/geoccl.h"

namespace geoccl::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Element access by value so one pattern works for every dtype. Pattern values are small
// integers, exact in every type.
void put(void* base, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = core::float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(base)[i] = core::float_to_bf16(static_cast<float>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
  }
}
double get(const void* base, size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kFloat16: return core::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16: return core::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kInt8: return static_cast<const int8_t*>(base)[i];
    case DataType::kUInt8: return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
  }
  return 0;
}
// Value of element i contributed by rank r.
double pattern(int r, size_t i) { return (r + 1) + static_cast<double>(i % 7); }

struct Case {
  size_t count = 0;        // elements per block / buffer
  size_t send_elems = 0, recv_elems = 0;
  double bus_factor = 1;
  std::function<Work(Communicator&, void*, void*)> run;
  // Expected value of recv element i on rank r.
  std::function<double(int r, size_t i)> expect;
  bool in_place = false;
};

// The bound on a compressed allreduce's relative RMS error (gaussian inputs, one call).
double error_bound(const Compression& z) {
  switch (z.codec) {
    case Codec::kFp16: return 2e-3;
    case Codec::kBf16: return 1.5e-2;
    case Codec::kInt8: return 3e-2;
    case Codec::kInt4: return 0.45;
    case Codec::kTopK: return z.topk_ratio >= 1.0 ? 2e-3 : 1.0;
    default: return 0;
  }
}

// Rank r's gaussian input for compressed runs (what gradients look like to a codec).
std::vector<float> gaussian(int r, size_t count) {
  std::mt19937 gen(7u + static_cast<uint32_t>(r));
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(count);
  for (auto& v : x) v = g(gen);
  return x;
}

Case make_case(const std::string& op, size_t bytes, DataType t, int n, int me) {
  const size_t es = dtype_size(t);
  Case c;
  const double sum_r = n * (n + 1) / 2.0;
  auto sum = [=](size_t i) { return sum_r + n * static_cast<double>(i % 7); };
  const int root = 0;
  if (op == "allreduce" || op == "reduce" || op == "broadcast") {
    c.count = bytes / es;
    c.send_elems = c.recv_elems = c.count;
    c.in_place = true;
    if (op == "allreduce") {
      c.bus_factor = 2.0 * (n - 1) / n;
      c.run = [=](Communicator& cm, void* b, void*) { return cm.allreduce(b, c.count, t, ReduceOp::kSum); };
      c.expect = [=](int, size_t i) { return sum(i); };
    } else if (op == "reduce") {
      c.run = [=](Communicator& cm, void* b, void*) { return cm.reduce(b, c.count, t, ReduceOp::kSum, root); };
      c.expect = [=](int r, size_t i) { return r == root ? sum(i) : pattern(r, i); };
    } else {
      c.run = [=](Communicator& cm, void* b, void*) { return cm.broadcast(b, c.count, t, root); };
      c.expect = [=](int, size_t i) { return pattern(root, i); };
    }
    return c;
  }
  // Sizes of the block-structured collectives are the total buffer (nccl-tests convention).
  c.count = bytes / es / static_cast<size_t>(n);
  const size_t total = c.count * static_cast<size_t>(n);
  c.bus_factor = (n - 1.0) / n;
  if (op == "allgather") {
    c.send_elems = c.count;
    c.recv_elems = total;
    c.run = [=](Communicator& cm, void* s, void* r) { return cm.allgather(s, r, c.count, t); };
    // Block b holds rank b's pattern over its own indices.
    c.expect = [=](int, size_t i) { return pattern(static_cast<int>(i / c.count), i % c.count); };
  } else if (op == "reduce_scatter") {
    c.send_elems = total;
    c.recv_elems = c.count;
    c.run = [=](Communicator& cm, void* s, void* r) { return cm.reduce_scatter(s, r, c.count, t, ReduceOp::kSum); };
    c.expect = [=](int r, size_t i) { return sum(static_cast<size_t>(r) * c.count + i); };
  } else if (op == "alltoall") {
    c.send_elems = c.recv_elems = total;
    c.run = [=](Communicator& cm, void* s, void* r) { return cm.alltoall(s, r, c.count, t); };
    // Rank src's block for me is its pattern at indices [me*count, ...).
    c.expect = [=](int r, size_t i) {
      return pattern(static_cast<int>(i / c.count), static_cast<size_t>(r) * c.count + i % c.count);
    };
  } else if (op == "gather") {
    c.bus_factor = 1;
    c.send_elems = c.count;
    c.recv_elems = total;
    c.run = [=](Communicator& cm, void* s, void* r) { return cm.gather(s, r, c.count, t, root); };
    c.expect = [=](int r, size_t i) {
      return r == root ? pattern(static_cast<int>(i / c.count), i % c.count) : 0.0;
    };
  } else if (op == "scatter") {
    c.bus_factor = 1;
    c.send_elems = total;
    c.recv_elems = c.count;
    c.run = [=](Communicator& cm, void* s, void* r) { return cm.scatter(s, r, c.count, t, root); };
    c.expect = [=](int r, size_t i) { return pattern(root, static_cast<size_t>(r) * c.count + i); };
  } else if (op == "barrier") {
    c.run = [=](Communicator& cm, void*, void*) { return cm.barrier(); };
    c.expect = nullptr;
  } else {
    throw std::invalid_argument("unknown op '" + op + "'");
  }
  (void)me;
  return c;
}

// A bulk-class allreduce issued again each time it completes, beside the timed operations. Its
// buffer is zeros (they stay zeros) plus one vote: a rank sets it once its timed operations are
// done, and every rank stops after the first operation whose vote summed to non-zero, so all
// issue the same number.
class Background {
 public:
  Background(Communicator& comm, size_t bytes) : comm_(comm), buf_(std::max<size_t>(bytes / 4, 2), 0.f) {
    issue();
  }
  // Between timed operations: verifies a finished one and issues the next.
  void poll() {
    if (!finished_ && work_.test()) complete();
  }
  // Votes to stop and waits until every rank has; returns the operations completed.
  int stop() {
    done_ = true;
    while (!finished_) {
      work_.wait();
      complete();
    }
    return ops_;
  }
  int64_t bad() const { return bad_; }

 private:
  void issue() {
    buf_.back() = done_ ? 1.f : 0.f;
    work_ = comm_.allreduce(buf_.data(), buf_.size(), DataType::kFloat32, ReduceOp::kSum,
                            OpOptions{.priority = Priority::kBulk});
  }
  void complete() {
    work_.wait();  // rethrows a failure
    ++ops_;
    for (size_t i = 0; i + 1 < buf_.size(); i += 4093) bad_ += buf_[i] != 0.f;
    if (buf_.back() != 0.f) {
      finished_ = true;
      return;
    }
    issue();
  }

  Communicator& comm_;
  std::vector<float> buf_;
  Work work_;
  int ops_ = 0;
  int64_t bad_ = 0;
  bool done_ = false, finished_ = false;
};

}  // namespace

std::vector<size_t> parse_sizes(const std::string& s) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (tok.empty()) throw std::invalid_argument("empty size in '" + s + "'");
    size_t mult = 1;
    const char u = static_cast<char>(std::toupper(tok.back()));
    if (u == 'K') mult = 1024;
    if (u == 'M') mult = 1024 * 1024;
    if (u == 'G') mult = 1024ull * 1024 * 1024;
    if (mult != 1 || u == 'B') tok.pop_back();
    size_t idx = 0;
    const unsigned long long v = std::stoull(tok, &idx);
    if (idx != tok.size()) throw std::invalid_argument("bad size '" + tok + "'");
    out.push_back(static_cast<size_t>(v) * mult);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

namespace {

// Every rank's figures (set-up time and resources.h) gathered to rank 0, which prints one line
// per figure: "# resources NAME max X mean Y rank0 Z".
void report_resources(Communicator& comm, double setup_s) {
  const Resources r = read_resources();
  const std::vector<std::pair<const char*, double>> mine = {
      {"setup_s", setup_s},     {"rss_mb", r.rss_mb},   {"peak_rss_mb", r.peak_rss_mb},
      {"shmem_mb", r.shmem_mb}, {"sockets", r.sockets}, {"segments", r.segments},
      {"threads", r.threads},   {"cpu_s", r.cpu_s}};
  const size_t k = mine.size(), n = static_cast<size_t>(comm.size());
  std::vector<double> send(k), all(k * n);
  for (size_t i = 0; i < k; ++i) send[i] = mine[i].second;
  comm.allgather(send.data(), all.data(), k, DataType::kFloat64).wait();
  if (comm.rank() != 0) return;
  for (size_t i = 0; i < k; ++i) {
    double mx = 0, sum = 0;
    for (size_t r = 0; r < n; ++r) {
      mx = std::max(mx, all[r * k + i]);
      sum += all[r * k + i];
    }
    std::printf("# resources %-12s max %10.3f mean %10.3f rank0 %10.3f\n", mine[i].first, mx,
                sum / static_cast<double>(n), all[i]);
  }
  std::fflush(stdout);
}

}  // namespace

int run_bench(const BenchSpec& spec) {
  const auto dt = parse_dtype(spec.dtype);
  if (!dt) throw std::invalid_argument("unknown dtype '" + spec.dtype + "'");
  const DataType t = *dt;
  Config cfg = Config::from_env();
  if (cfg.world_size < 0) {  // run directly, not under `geoccl run`
    cfg.world_size = 1;
    cfg.rank = 0;
  }
  if (spec.algo != "auto") cfg.algo = spec.algo;
  std::optional<Compression> z;
  if (!spec.compression.empty()) {
    z = Compression::parse(spec.compression);
    if (spec.op != "allreduce" || t != DataType::kFloat32)
      throw std::invalid_argument("--compression applies to allreduce on f32 only");
  }
  const auto setup_t0 = std::chrono::steady_clock::now();
  Communicator comm(cfg);
  // Start-up: from the constructor's call to a communicator with its first plan (rank 0's view;
  // every rank leaves the constructor within one set-up collective of the others).
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_t0).count();
  const int n = comm.size(), me = comm.rank();
  const size_t es = dtype_size(t);
  nlohmann::json results = nlohmann::json::array();
  bool all_ok = true;
  if (me == 0) std::printf("# setup %.3f s\n", setup_s);
  if (me == 0)
    std::printf("# geoccl bench: op=%s dtype=%s ranks=%d iters=%d warmup=%d algo=%s%s%s\n"
                "%12s %12s %12s %12s %12s %10s %10s %9s %8s\n",
                spec.op.c_str(), spec.dtype.c_str(), n, spec.iters, spec.warmup, spec.algo.c_str(),
                z ? " compression=" : "",
                z ? (z->name() + (spec.error_feedback ? " (error feedback)" : "")).c_str() : "",
                "bytes", "count", "median_us", "min_us", "max_us", "algbw_GB/s", "busbw_GB/s",
                "cpu_ns/B", "correct");
  std::optional<Background> background;
  if (spec.background_bytes) background.emplace(comm, spec.background_bytes);
  for (size_t bytes : spec.sizes) {
    Case c = make_case(spec.op, bytes, t, n, me);
    std::vector<double> exact;  // compressed runs: the exact sum of the gaussian inputs
    if (z) {
      OpOptions o;
      o.compression = z;
      if (spec.error_feedback) o.feedback_key = "bench/" + std::to_string(bytes);
      c.run = [=](Communicator& cm, void* b, void*) {
        return cm.allreduce(b, c.count, t, ReduceOp::kSum, o);
      };
      exact.assign(c.count, 0.0);
      for (int r = 0; r < n; ++r) {
        const auto x = gaussian(r, c.count);
        for (size_t i = 0; i < c.count; ++i) exact[i] += x[i];
      }
    }
    std::vector<uint8_t> send_init(std::max<size_t>(c.send_elems, 1) * es);
    if (z) {
      const auto x = gaussian(me, c.count);
      std::memcpy(send_init.data(), x.data(), c.count * sizeof(float));
    } else {
      for (size_t i = 0; i < c.send_elems; ++i) put(send_init.data(), i, t, pattern(me, i));
    }
    const auto stats_before = comm.compression_stats();
    std::vector<uint8_t> send = send_init;
    std::vector<uint8_t> recv(std::max<size_t>(c.recv_elems, 1) * es, 0);
    std::vector<double> times;
    // CPU of the timed calls (every thread of the rank), and the emulator's over their span.
    double cpu_s = 0, emulator_s = -1;
    for (int it = 0; it < spec.warmup + spec.iters; ++it) {
      if (c.in_place)
        std::copy(send_init.begin(), send_init.end(), send.begin());
      if (it == spec.warmup && me == 0) emulator_s = emulator_cpu_s();
      const double cpu0 = process_cpu_s();
      const auto t0 = Clock::now();
      c.run(comm, send.data(), recv.data()).wait();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (it >= spec.warmup) {
        times.push_back(us);
        cpu_s += process_cpu_s() - cpu0;
      }
      if (background) background->poll();
    }
    if (emulator_s >= 0) emulator_s = emulator_cpu_s() - emulator_s;
    // The background keeps running until the last size is timed.
    int background_ops = 0;
    int64_t background_bad = 0;
    if (background && bytes == spec.sizes.back()) {
      background_ops = background->stop();
      background_bad = background->bad();
    }
    // The slowest rank defines each iteration's time.
    comm.allreduce(times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax).wait();
    comm.allreduce(&cpu_s, 1, DataType::kFloat64, ReduceOp::kSum).wait();
    // Verify the last iteration's output.
    const void* out = c.in_place ? send.data() : recv.data();
    int64_t bad = 0;
    double rel_error = 0;
    if (z) {
      // Bit-identical on every rank (allgather of the bytes), and within the codec's bound.
      const size_t nb = c.count * sizeof(float);
      std::vector<uint8_t> all(nb * static_cast<size_t>(n));
      comm.allgather(out, all.data(), nb, DataType::kUInt8).wait();
      for (int r = 1; r < n; ++r)
        if (std::memcmp(all.data(), all.data() + nb * static_cast<size_t>(r), nb) != 0) ++bad;
      double e = 0, w = 0;
      for (size_t i = 0; i < c.count; ++i) {
        const double d = static_cast<const float*>(out)[i] - exact[i];
        e += d * d;
        w += exact[i] * exact[i];
      }
      rel_error = std::sqrt(e / std::max(w, 1e-300));
      if (!std::isfinite(rel_error) || (!spec.error_feedback && rel_error > error_bound(*z))) ++bad;
    } else if (c.expect) {
      for (size_t i = 0; i < c.recv_elems; ++i)
        if (get(out, i, t) != c.expect(me, i)) ++bad;
    }
    bad += background_bad;
    comm.allreduce(&bad, 1, DataType::kInt64, ReduceOp::kSum).wait();
    const bool ok = bad == 0;
    // What this rank encoded per call, summed over ranks: the WAN bytes the codec left.
    const auto stats_after = comm.compression_stats();
    uint64_t encoded = (stats_after.bytes_encoded - stats_before.bytes_encoded) /
                       static_cast<uint64_t>(spec.warmup + spec.iters);
    comm.allreduce(&encoded, 1, DataType::kInt64, ReduceOp::kSum).wait();
    all_ok = all_ok && ok;
    std::sort(times.begin(), times.end());
    const double med = times.empty() ? 0 : times[times.size() / 2];
    const double mn = times.empty() ? 0 : times.front(), mx = times.empty() ? 0 : times.back();
    const double p99 = times.empty() ? 0 : times[std::min(times.size() - 1, (times.size() * 99) / 100)];
    const size_t eff_bytes = c.count * es * (c.in_place ? 1 : static_cast<size_t>(n));
    const double algbw = med > 0 ? static_cast<double>(eff_bytes) / (med * 1e-6) / 1e9 : 0;
    const double busbw = algbw * c.bus_factor;
    // CPU per byte of user data: every rank's CPU in the timed calls over the bytes all ranks
    // passed (the size column, per rank), so one copy of each byte costs memcpy's figure.
    const double user_bytes = static_cast<double>(eff_bytes) * n * std::max(spec.iters, 1);
    const double cpu_ns_per_byte = user_bytes > 0 ? cpu_s * 1e9 / user_bytes : 0;
    const double emulator_ns_per_byte = emulator_s >= 0 && user_bytes > 0 ? emulator_s * 1e9 / user_bytes : -1;
    if (me == 0) {
      std::printf("%12zu %12zu %12.1f %12.1f %12.1f %10.3f %10.3f %9.3f %8s", eff_bytes, c.count, med,
                  mn, mx, algbw, busbw, cpu_ns_per_byte, ok ? "yes" : "NO");
      if (emulator_ns_per_byte >= 0) std::printf("  emulator_cpu_ns/B %.3f", emulator_ns_per_byte);
      if (z)
        std::printf("  rel_error %.3g, encoded %.2f MB per call (all ranks)", rel_error,
                    static_cast<double>(encoded) / 1e6);
      if (background) std::printf("  p99_us %.1f", p99);
      if (background_ops)
        std::printf("  background: %d bulk allreduces of %zu B", background_ops, spec.background_bytes);
      std::printf("\n");
      std::fflush(stdout);
      nlohmann::json r = {{"backend", "geoccl"}, {"op", spec.op}, {"dtype", spec.dtype},
                          {"bytes", bytes}, {"count", c.count}, {"world_size", n},
                          {"iters", spec.iters}, {"algo", spec.algo},
                          {"time_us_median", med}, {"time_us_min", mn}, {"time_us_max", mx},
                          {"time_us_p99", p99},
                          {"algbw_gbps", algbw}, {"busbw_gbps", busbw},
                          {"cpu_ns_per_byte", cpu_ns_per_byte}, {"correct", ok}};
      if (emulator_ns_per_byte >= 0) r["emulator_cpu_ns_per_byte"] = emulator_ns_per_byte;
      if (z) {
        r["compression"] = z->name();
        r["error_feedback"] = spec.error_feedback;
        r["rel_error"] = rel_error;
        r["encoded_bytes_per_call"] = encoded;
        r["feedback_bytes_rank0"] = stats_after.feedback_bytes;
      }
      if (spec.background_bytes) {
        r["background_bytes"] = spec.background_bytes;
        if (background_ops) r["background_ops"] = background_ops;
      }
      results.push_back(r);
    }
  }
  if (spec.resources) report_resources(comm, setup_s);
  if (spec.verbose)
    for (const auto& s : comm.peer_stats()) {
      std::printf("# rank %d -> peer %d: %s, sent %llu B, received %llu B\n", me, s.peer,
                  s.transport.c_str(), static_cast<unsigned long long>(s.bytes_sent),
                  static_cast<unsigned long long>(s.bytes_received));
      if (s.transport != "tcp") continue;
      // TCP_INFO of the data streams (aggregate, then one line per stream).
      std::printf("#   %d data stream(s), frames over %d, cc %s, rtt %.2f ms (min %.2f), cwnd %llu seg, "
                  "retrans %llu seg / %llu B, delivery %.1f Mbit/s, pacing %.1f Mbit/s\n",
                  s.tcp.data_streams, s.tcp.width, s.tcp.congestion_control.c_str(), s.rtt_ms, s.tcp.min_rtt_ms,
                  static_cast<unsigned long long>(s.tcp.cwnd_segments),
                  static_cast<unsigned long long>(s.tcp.retransmits),
                  static_cast<unsigned long long>(s.tcp.bytes_retransmitted),
                  static_cast<double>(s.tcp.delivery_rate_bps) / 1e6,
                  static_cast<double>(s.tcp.pacing_rate_bps) / 1e6);
      for (const auto& t : s.tcp.streams)
        std::printf("#   stream %d: %s rtt %.2f ms cwnd %u mss %u retrans %llu delivery %.1f "
                    "Mbit/s pacing %.1f Mbit/s sndbuf %llu rcvbuf %llu frames sent %llu recv %llu "
                    "reconnects %llu resent %llu\n",
                    t.index, t.congestion_control.c_str(), t.rtt_ms, t.cwnd_segments, t.mss,
                    static_cast<unsigned long long>(t.retransmits),
                    static_cast<double>(t.delivery_rate_bps) / 1e6,
                    static_cast<double>(t.pacing_rate_bps) / 1e6,
                    static_cast<unsigned long long>(t.send_buffer),
                    static_cast<unsigned long long>(t.receive_buffer),
                    static_cast<unsigned long long>(t.frames_sent),
                    static_cast<unsigned long long>(t.frames_received),
                    static_cast<unsigned long long>(t.reconnects),
                    static_cast<unsigned long long>(t.frames_resent));
    }
  if (me == 0 && !spec.json_path.empty()) {
    std::ofstream f(spec.json_path);
    f << results.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + spec.json_path);
  }
  return all_ok ? 0 : 1;
}

}  // namespace geoccl::tools
