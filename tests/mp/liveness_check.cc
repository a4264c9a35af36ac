// One rank of the liveness multi-process tests (liveness_mp_test.cc starts N of them, real
// processes on loopback sockets). Modes:
//   freeze       every rank runs allreduces; the victim (GEOCCL_TEST_VICTIM) writes the time to
//                GEOCCL_TEST_STAMP and stops itself (SIGSTOP). The others must fail with
//                kPeerUnresponsive within the liveness window (plus a margin), not before it.
//   random-kill  every rank runs the same random sequence of collectives and point-to-point
//                transfers (GEOCCL_TEST_SEED); the victim, a random rank, dies (SIGKILL) at a
//                random point of a random operation. Every survivor must end with kPeerLost
//                within 10 s of the death.
//   outage       allreduces of GEOCCL_TEST_MIB MiB in a loop for GEOCCL_TEST_RUN_S seconds while
//                the scenario cuts a WAN link (the test bed's [[events]]); every result is
//                checked exactly. Prints the iteration times; fails when the slowest one exceeds
//                GEOCCL_TEST_MAX_ITER_MS.
//   partition    allreduces in a loop while the scenario cuts a region from the others for good:
//                every rank must end with kPeerUnreachable (a partition, not a death) within
//                GEOCCL_TEST_RUN_S seconds.
// GEOCCL_TEST_DOMAINS="a,a,b,b" gives rank r the r-th domain label.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "geoccl/geoccl.h"

using namespace geoccl;
using Clock = std::chrono::steady_clock;

namespace {

void write_stamp(int64_t ns) {
  const char* path = std::getenv("GEOCCL_TEST_STAMP");
  if (!path) return;
  const std::string tmp = std::string(path) + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fprintf(f, "%lld\n", static_cast<long long>(ns));
    std::fclose(f);
    std::rename(tmp.c_str(), path);
  }
}

int64_t read_stamp() {
  const char* path = std::getenv("GEOCCL_TEST_STAMP");
  long long v = 0;
  if (FILE* f = path ? std::fopen(path, "r") : nullptr) {
    if (std::fscanf(f, "%lld", &v) != 1) v = 0;
    std::fclose(f);
  }
  return v;
}

// Runs `f` and checks that it throws Error(code); prints how long after the stamp it came.
int expect_after_stamp(const std::function<void()>& f, ErrorCode code, double min_ms, double max_ms, int me,
                       const char* what) {
  try {
    f();
  } catch (const Error& e) {
    const int64_t at = wall_ns(), stamp = read_stamp();
    const double ms = stamp > 0 ? static_cast<double>(at - stamp) / 1e6 : -1;
    std::printf("rank %d: %s %.0f ms after the victim %s: %s\n", me, std::string(error_code_name(e.code())).c_str(),
                ms, what, e.what());
    CHECK(e.code() == code, "wanted %s", std::string(error_code_name(code)).c_str());
    CHECK(stamp > 0, "the victim left no stamp");
    CHECK(ms >= min_ms && ms <= max_ms, "detected after %.0f ms, wanted [%.0f, %.0f]", ms, min_ms, max_ms);
    return g_failures ? 1 : 0;
  }
  std::fprintf(stderr, "rank %d: no error\n", me);
  return 1;
}

int mode_freeze(Config cfg) {
  const int me = cfg.rank, victim = env_int("GEOCCL_TEST_VICTIM", cfg.world_size - 1);
  const double window = static_cast<double>(cfg.liveness_window.count());
  std::vector<float> buf(256 << 10, 1.f);
  return expect_after_stamp(
      [&] {
        Communicator c(cfg);
        for (int i = 0;; ++i) {
          if (me == victim && i == 20) {
            write_stamp(wall_ns());
            raise(SIGSTOP);  // the test kills us once the others are done
          }
          c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum).wait();
        }
      },
      // Silence counts from the last heartbeat, up to one interval before the stop.
      ErrorCode::kPeerUnresponsive, window - static_cast<double>(cfg.heartbeat_interval.count()) - 100,
      window + 2500, me, "stopped");
}

int mode_random_kill(Config cfg) {
  const int me = cfg.rank, n = cfg.world_size;
  const uint64_t seed = static_cast<uint64_t>(env_int("GEOCCL_TEST_SEED", 1));
  std::mt19937_64 g(seed);  // the same sequence on every rank
  const int victim = static_cast<int>(g() % static_cast<uint64_t>(n));
  const int kill_at = static_cast<int>(g() % 12);
  const int kill_after_us = static_cast<int>(g() % 20000);
  struct Step {
    int kind;
    size_t count;
  };
  std::vector<Step> steps(200);
  for (auto& s : steps) s = {static_cast<int>(g() % 7), size_t{256} << (g() % 13)};  // 1 KiB .. 4 MiB of f32
  std::vector<float> a(size_t{4} << 20), b(static_cast<size_t>(n) * (size_t{4} << 20));
  cfg.op_timeout = std::chrono::seconds(30);
  return expect_after_stamp(
      [&] {
        Communicator c(cfg);
        for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
          const Step& s = steps[static_cast<size_t>(i)];
          const size_t k = s.count;
          Work w;
          switch (s.kind) {
            case 0: w = c.allreduce(a.data(), k, DataType::kFloat32, ReduceOp::kSum); break;
            case 1: w = c.broadcast(a.data(), k, DataType::kFloat32, i % n); break;
            case 2: w = c.allgather(a.data(), b.data(), k, DataType::kFloat32); break;
            case 3: w = c.reduce_scatter(b.data(), a.data(), k, DataType::kFloat32, ReduceOp::kSum); break;
            case 4: w = c.alltoall(b.data(), a.data(), k / static_cast<size_t>(n) + 1, DataType::kFloat32); break;
            case 5: w = c.barrier(); break;
            default: {  // a ring of sends and receives
              Work r = c.recv(b.data(), k, DataType::kFloat32, (me + n - 1) % n);
              c.send(a.data(), k, DataType::kFloat32, (me + 1) % n).wait();
              w = std::move(r);
            }
          }
          if (me == victim && i == kill_at) {
            std::this_thread::sleep_for(std::chrono::microseconds(kill_after_us));
            write_stamp(wall_ns());
            raise(SIGKILL);
          }
          w.wait();
        }
      },
      ErrorCode::kPeerLost, -1e9, 10000, me, "was killed");
}

int mode_outage(const Config& cfg) {
  const int me = cfg.rank, n = cfg.world_size;
  const size_t count = static_cast<size_t>(env_int("GEOCCL_TEST_MIB", 16)) << 18;
  const auto run_for = std::chrono::seconds(env_int("GEOCCL_TEST_RUN_S", 30));
  const double max_ms = env_int("GEOCCL_TEST_MAX_ITER_MS", 0);
  Communicator c(cfg);
  std::vector<float> buf(count);
  std::vector<double> ms;
  const auto t0 = Clock::now();
  // The last element is a vote: a rank whose time is up adds 1, and all stop together after the
  // iteration where the sum is non-zero (every rank runs the same number of iterations).
  const size_t data = count - 1;
  for (int i = 0;; ++i) {
    // Small integers: every sum is exact, so any lost, doubled or misplaced byte shows.
    const float mine = static_cast<float>((me + 1) * (i % 7 + 1));
    for (size_t k = 0; k < data; ++k) buf[k] = mine + static_cast<float>(k % 3);
    buf[data] = Clock::now() - t0 >= run_for ? 1.f : 0.f;
    const auto s0 = Clock::now();
    c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    const float want_base = static_cast<float>((i % 7 + 1) * n * (n + 1) / 2);
    size_t bad = 0;
    for (size_t k = 0; k < data; ++k) bad += buf[k] != want_base + static_cast<float>(n * (k % 3));
    CHECK(bad == 0, "iteration %d: %zu wrong elements", i, bad);
    if (buf[data] != 0.f) break;
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], worst = sorted.back();
  size_t worst_at = 0;
  for (size_t i = 0; i < ms.size(); ++i)
    if (ms[i] == worst) worst_at = i;
  std::printf("rank %d: %zu iterations of %zu MiB, median %.0f ms, slowest %.0f ms (iteration %zu), outage cost %.0f ms\n",
              me, ms.size(), count >> 18, median, worst, worst_at, worst - median);
  if (max_ms > 0) CHECK(worst <= max_ms, "slowest iteration %.0f ms, limit %.0f ms", worst, max_ms);
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

int mode_partition(const Config& cfg) {
  const int me = cfg.rank;
  const auto limit = std::chrono::seconds(env_int("GEOCCL_TEST_RUN_S", 60));
  std::vector<float> buf(size_t{1} << 18, 1.f);
  const auto t0 = Clock::now();
  try {
    Communicator c(cfg);
    while (Clock::now() - t0 < limit) c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  } catch (const Error& e) {
    std::printf("rank %d: %s after %.1f s: %s\n", me, std::string(error_code_name(e.code())).c_str(),
                std::chrono::duration<double>(Clock::now() - t0).count(), e.what());
    CHECK(e.code() == ErrorCode::kPeerUnreachable, "wanted peer unreachable");
    return g_failures ? 1 : 0;
  }
  std::fprintf(stderr, "rank %d: no error within %lld s\n", me, static_cast<long long>(limit.count()));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "freeze";
  try {
    apply_test_domains();
    Config cfg = Config::from_env();
    if (mode == "freeze") return mode_freeze(cfg);
    if (mode == "random-kill") return mode_random_kill(cfg);
    if (mode == "outage") return mode_outage(cfg);
    if (mode == "partition") return mode_partition(cfg);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
    return 3;
  }
}
