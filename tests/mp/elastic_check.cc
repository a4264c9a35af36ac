// One process of the elastic-membership tests (elastic_mp_test.cc), started with RANK,
// WORLD_SIZE, MASTER_* pointing at a standalone store the test hosts. Mode "member": it steps
// (maybe_grow, then an allreduce checked bit-exactly against a reference that depends only on the
// epoch's size) through the phases
//   A: epoch 0, 4 members; at step 3 the current rank 0 kills itself;
//   B: the 3 survivors form the next epoch, step on until the test starts a joiner;
//   C: the joiner is admitted (4 members again); at step 3 the current rank 0 kills itself;
//   D: 3 members again; after 5 steps every process exits 0.
// A survivor must see kPeerLost (printing how long after the kill, from GEOCCL_TEST_KILL_STAMP),
// then form the next epoch; each transition's duration is printed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "geoccl/elastic.h"
#include "geoccl/geoccl.h"

using namespace geoccl;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Element i of rank r's input: small integers, so every sum is exact in float32 whatever the
// order of reduction.
float input(int r, size_t i) { return static_cast<float>((r * 7 + static_cast<int>(i) * 3) % 11) - 5.f; }

// One checked allreduce (and an allgather of result hashes: every rank holds the same bits).
void step(Communicator& c, size_t count) {
  std::vector<float> buf(count), want(count, 0.f);
  for (size_t i = 0; i < count; ++i) {
    buf[i] = input(c.rank(), i);
    for (int r = 0; r < c.size(); ++r) want[i] += input(r, i);
  }
  c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  CHECK(std::memcmp(buf.data(), want.data(), count * sizeof(float)) == 0,
        "epoch %u: allreduce of %zu floats differs from the reference", c.epoch(), count);
  uint64_t h = 1469598103934665603ull;
  for (float f : buf) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  std::vector<int64_t> all(static_cast<size_t>(c.size()));
  const auto mine = static_cast<int64_t>(h);
  c.allgather(&mine, all.data(), 1, DataType::kInt64).wait();
  for (auto x : all) CHECK(x == all[0], "epoch %u: results differ between ranks", c.epoch());
}

int mode_member() {
  Config cfg = Config::from_env();
  cfg.op_timeout = std::chrono::seconds(20);
  ElasticOptions o;
  o.join_window = std::chrono::milliseconds(1000);
  o.connect_timeout = std::chrono::seconds(15);
  o.give_up = std::chrono::seconds(15);
  o.join_timeout = std::chrono::seconds(60);
  const char* stamp = std::getenv("GEOCCL_TEST_KILL_STAMP");
  const auto t_start = Clock::now();
  ElasticGroup g(cfg, o);
  const bool started_as_joiner = g.joined();
  std::printf("[%s] epoch %u: rank %d of %d (%.0f ms to start)\n", started_as_joiner ? "joiner" : "member",
              g.epoch(), g.rank(), g.size(), ms_since(t_start));
  char phase = started_as_joiner ? 'C' : 'A';
  int steps_in_phase = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    if ((phase == 'A' || phase == 'C') && steps_in_phase == 3 && g.rank() == 0) {
      if (FILE* f = stamp ? std::fopen(stamp, "w") : nullptr) {
        std::fprintf(f, "%lld\n", static_cast<long long>(wall_ns()));
        std::fclose(f);
      }
      std::printf("epoch %u: rank 0 kills itself\n", g.epoch());
      std::fflush(stdout);
      raise(SIGKILL);
    }
    try {
      const auto t0 = Clock::now();
      if (g.maybe_grow()) {
        std::printf("grow: epoch %u with %d members formed in %.0f ms (rank %d)\n", g.epoch(), g.size(),
                    ms_since(t0), g.rank());
        CHECK(phase == 'B' && g.size() == 4, "unexpected grow in phase %c to %d members", phase, g.size());
        phase = 'C';
        steps_in_phase = 0;
        continue;  // a new epoch begins at the boundary, with the check, on every member
      }
      step(g.comm(), 1000 + static_cast<size_t>(steps_in_phase) * 4099);
      ++steps_in_phase;
      if (phase == 'D' && steps_in_phase == 5) {
        std::printf("done: epoch %u, rank %d of %d\n", g.epoch(), g.rank(), g.size());
        return g_failures ? 1 : 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (const Error& e) {
      const int64_t seen = wall_ns();
      long long killed = 0;
      if (FILE* f = stamp ? std::fopen(stamp, "r") : nullptr) {
        if (std::fscanf(f, "%lld", &killed) != 1) killed = 0;
        std::fclose(f);
      }
      const double detect_ms = killed > 0 ? static_cast<double>(seen - killed) / 1e6 : -1;
      std::printf("epoch %u: %s (%.1f ms after the kill)\n", g.epoch(), e.what(), detect_ms);
      CHECK(e.code() == ErrorCode::kPeerLost, "wanted kPeerLost, got %s", e.what());
      CHECK(detect_ms >= 0 && detect_ms < 2000, "the failure took %.1f ms to be seen", detect_ms);
      CHECK(phase == 'A' || phase == 'C', "a failure in phase %c", phase);
      const uint32_t before = g.epoch();
      const auto t0 = Clock::now();
      g.next_epoch();
      std::printf("shrink: epoch %u -> %u with %d members formed in %.0f ms (rank %d, source %d)\n", before,
                  g.epoch(), g.size(), ms_since(t0), g.rank(), g.state_source());
      CHECK(g.size() == 3, "shrink to %d members, wanted 3", g.size());
      CHECK(g.epoch() > before && g.comm().epoch() == g.epoch(), "epoch did not advance");
      CHECK(g.state_source() == 0 && !g.joined(), "a survivor counted as a joiner");
      phase = phase == 'A' ? 'B' : 'D';
      steps_in_phase = 0;
    }
  }
  std::fprintf(stderr, "phase %c not finished in time\n", phase);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "member";
  try {
    if (mode == "member") return mode_member();
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
}
