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
//
// Mode "dead-reported": 4 members with a join window of 20 s; at step 3 rank 2 kills itself.
// Every survivor's Error must be kPeerLost naming rank 2, and the next epoch (3 members) must be
// formed in less than half the join window: the survivors' candidates report rank 2 dead, so the
// decider does not wait for it. With two labelled domains (GEOCCL_DOMAIN), the new epoch must
// plan with the paths epoch 0 measured, carried, not probed again. Then 3 steps in the new epoch,
// and every survivor exits 0.
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

// The members' bounds: the join window the mode needs, the others well inside the test's limit.
ElasticOptions options(std::chrono::milliseconds join_window, std::chrono::seconds give_up) {
  ElasticOptions o;
  o.join_window = join_window;
  o.connect_timeout = std::chrono::seconds(15);
  o.give_up = give_up;
  o.join_timeout = std::chrono::seconds(60);
  return o;
}

int mode_member() {
  Config cfg = Config::from_env();
  cfg.op_timeout = std::chrono::seconds(20);
  const ElasticOptions o = options(std::chrono::milliseconds(1000), std::chrono::seconds(15));
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

int mode_dead_reported() {
  constexpr int kVictim = 2;
  Config cfg = Config::from_env();
  cfg.op_timeout = std::chrono::seconds(30);
  const ElasticOptions o = options(std::chrono::seconds(20), std::chrono::seconds(30));
  ElasticGroup g(cfg, o);
  CHECK(g.size() == 4 && g.epoch() == 0, "epoch %u with %d members, wanted epoch 0 with 4",
        g.epoch(), g.size());
  const int epoch0_rank = g.rank();
  const TopologyInfo epoch0 = g.comm().topology();
  const bool two_domains = epoch0.names.size() == 2;
  if (two_domains)
    CHECK(epoch0.paths_source == "measured", "epoch 0's paths are '%s', wanted measured", epoch0.paths_source.c_str());
  int steps = 0;
  bool shrunk = false;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    if (!shrunk && steps == 3 && g.rank() == kVictim) {
      std::printf("epoch %u: rank %d kills itself\n", g.epoch(), kVictim);
      std::fflush(stdout);
      raise(SIGKILL);
    }
    try {
      step(g.comm(), 1000 + static_cast<size_t>(steps) * 4099);
      ++steps;
      if (shrunk && steps == 3) {
        std::printf("done: epoch %u, rank %d of %d (epoch 0 rank %d)\n", g.epoch(), g.rank(),
                    g.size(), epoch0_rank);
        return g_failures ? 1 : 0;
      }
    } catch (const Error& e) {
      std::string ranks;
      for (int r : e.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      std::printf("epoch %u rank %d: %s (ranks [%s])\n", g.epoch(), g.rank(), e.what(),
                  ranks.c_str());
      CHECK(!shrunk, "a failure after the shrink: %s", e.what());
      CHECK(e.code() == ErrorCode::kPeerLost, "wanted kPeerLost, got %s", e.what());
      CHECK(e.ranks() == std::vector<int>{kVictim}, "the error names ranks [%s], wanted [%d]",
            ranks.c_str(), kVictim);
      const auto t0 = Clock::now();
      g.next_epoch();
      const double took = ms_since(t0);
      std::printf(
          "shrink: epoch %u with %d members formed in %.0f ms (join window %lld ms; rank %d; %zu domains, "
          "paths %s)\n",
          g.epoch(), g.size(), took, static_cast<long long>(o.join_window.count()), g.rank(),
          g.comm().topology().names.size(), g.comm().topology().paths_source.c_str());
      CHECK(took < static_cast<double>(o.join_window.count()) / 2,
            "the transition took %.0f ms, not less than half the %lld ms join window", took,
            static_cast<long long>(o.join_window.count()));
      CHECK(g.size() == 3 && g.epoch() == 1, "epoch %u with %d members, wanted epoch 1 with 3",
            g.epoch(), g.size());
      CHECK(!g.joined(), "a survivor counted as a joiner");
      if (two_domains) {
        const TopologyInfo now = g.comm().topology();
        CHECK(now.names == epoch0.names, "the domains changed across the shrink");
        CHECK(now.paths_source == "carried", "epoch 1's paths are '%s', wanted carried", now.paths_source.c_str());
        // Rank 0 of both epochs is the same process: its figures are the ones carried.
        if (epoch0_rank == 0)
          CHECK(now.wan_one_way_ms == epoch0.wan_one_way_ms && now.wan_rate_mbps == epoch0.wan_rate_mbps,
                "the carried figures differ from what epoch 0 measured");
      }
      shrunk = true;
      steps = 0;
    }
  }
  std::fprintf(stderr, "not finished in time (shrunk: %d, steps %d)\n", shrunk, steps);
  return 1;
}

// Mode "dead-joiner": 3 members step, and call maybe_grow() only once the test has created
// GEOCCL_TEST_KILL_STAMP + ".grow": by then a joiner (mode "joiner") has written its candidate
// record and been killed. The grow must leave it out (it stopped beating) and take well under the
// 15 s connect timeout a member in the decision that never comes would cost; 3 members, 3 more
// steps, exit 0.
int mode_dead_joiner() {
  Config cfg = Config::from_env();
  cfg.op_timeout = std::chrono::seconds(30);
  const ElasticOptions o = options(std::chrono::milliseconds(1000), std::chrono::seconds(15));
  const std::string go = std::string(std::getenv("GEOCCL_TEST_KILL_STAMP")) + ".grow";
  ElasticGroup g(cfg, o);
  bool grown = false;
  int steps = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (Clock::now() < deadline) {
    // Every member looks for the file, and they agree through a step whether it was there.
    int64_t ready = access(go.c_str(), F_OK) == 0 ? 1 : 0;
    g.comm().allreduce(&ready, 1, DataType::kInt64, ReduceOp::kMin).wait();
    if (!grown && ready) {
      const uint32_t before = g.epoch();
      const auto t0 = Clock::now();
      const bool formed = g.maybe_grow();
      const double took = ms_since(t0);
      std::printf("grow with a dead joiner: epoch %u -> %u, %d members, %.0f ms (rank %d)\n", before, g.epoch(),
                  g.size(), took, g.rank());
      CHECK(formed && g.epoch() == before + 1, "no epoch formed at the boundary");
      CHECK(g.size() == 3 && !g.joined(), "the dead joiner is in epoch %u (%d members)", g.epoch(), g.size());
      CHECK(took < static_cast<double>(o.connect_timeout.count()) * 1000 / 2,
            "the grow took %.0f ms: a dead member's connect timeout is %lld s", took,
            static_cast<long long>(o.connect_timeout.count()));
      grown = true;
      steps = 0;
      continue;
    }
    step(g.comm(), 1000 + static_cast<size_t>(steps) * 4099);
    ++steps;
    if (grown && steps == 3) {
      std::printf("done: epoch %u, rank %d of %d\n", g.epoch(), g.rank(), g.size());
      return g_failures ? 1 : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "not finished in time (grown: %d)\n", grown);
  return 1;
}

// Mode "joiner": asks to join and waits to be admitted (the test kills it first).
int mode_joiner() {
  ElasticGroup g(Config::from_env(), options(std::chrono::milliseconds(1000), std::chrono::seconds(15)));
  std::fprintf(stderr, "the joiner was admitted to epoch %u\n", g.epoch());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "member";
  try {
    if (mode == "member") return mode_member();
    if (mode == "dead-reported") return mode_dead_reported();
    if (mode == "dead-joiner") return mode_dead_joiner();
    if (mode == "joiner") return mode_joiner();
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"), e.what());
    return 1;
  }
}
