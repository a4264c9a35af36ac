// One rank of the sparse allgather multi-process tests (sparse_mp_test.cc starts N of them, real
// processes on loopback sockets, in the domains GEOCCL_TEST_DOMAINS names). Modes:
//   exact     for every value width (32, 8, 4, 2) and densities from none to all: every rank's
//             result equals, bit for bit, the dense reference (every rank's contribution, as it
//             reports having decoded it, spread into a dense vector, gathered with the dense
//             allgather and summed in rank order from zero), the 32-bit contributions are the
//             values given, all ranks' results are identical, and the bytes reported are the
//             piece's copies and lengths; at 1 % with 2-bit values the piece is > 100x smaller
//             than the dense float32 vector.
//   mismatch  the last rank passes another dense length: every rank fails with kMismatch.
//   invalid   an index out of range, a repeated index, a bad width: kInvalidArgument from the
//             call on every rank; the group goes on (a sparse allgather after it is exact).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "geoccl/geoccl.h"
#include "rank_checks.h"

using namespace geoccl;

namespace {

struct Pairs {
  std::vector<int64_t> idx;
  std::vector<float> val;
};

// Rank r's pairs: `m` distinct indices of [0, count) in a shuffled order, gaussian values with
// a few large ones; the same on every run.
Pairs pairs_of(int rank, size_t count, size_t m, uint32_t salt) {
  std::mt19937 gen(99u + static_cast<uint32_t>(rank) * 7919u + salt);
  std::vector<int64_t> all(count);
  std::iota(all.begin(), all.end(), int64_t{0});
  std::shuffle(all.begin(), all.end(), gen);
  Pairs p;
  p.idx.assign(all.begin(), all.begin() + static_cast<long>(m));
  std::normal_distribution<float> g(0.0f, 1.0f + static_cast<float>(rank));
  for (size_t j = 0; j < m; ++j) p.val.push_back(j % 101 == 0 ? 30.0f * g(gen) : g(gen));
  return p;
}

int mode_exact(Communicator& c) {
  const int me = c.rank(), n = c.size();
  uint32_t salt = 0;
  for (size_t count : {size_t{1}, size_t{5000}, size_t{1000000}}) {
    for (double density : {0.0, 0.01, 0.3, 1.0}) {
      if (count == 1000000 && density > 0.01 && kSanitized) continue;
      for (uint32_t bits : {32u, 8u, 4u, 2u}) {
        ++salt;
        // Rank 1 contributes nothing at every density: pieces of different sizes, one empty.
        const size_t m = me == 1 ? 0 : static_cast<size_t>(density * static_cast<double>(count));
        Pairs p = pairs_of(me, count, m, salt);
        const auto given = p.val;
        std::vector<float> out(count, -7.0f);
        SparseResult res;
        c.sparse_allgather(p.idx.data(), p.val.data(), m, out.data(), count, bits, &res).wait();
        if (bits == 32) CHECK(p.val == given, "32-bit values changed by the call");
        for (size_t j = 0; j < m; ++j)
          CHECK(std::signbit(p.val[j]) == std::signbit(given[j]), "decoded value lost its sign");
        // The dense reference.
        std::vector<float> mine(count, 0.0f);
        for (size_t j = 0; j < m; ++j) mine[static_cast<size_t>(p.idx[j])] = p.val[j];
        std::vector<float> all(count * static_cast<size_t>(n));
        c.allgather(mine.data(), all.data(), count, DataType::kFloat32).wait();
        std::vector<float> want(count, 0.0f);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) want[i] += all[static_cast<size_t>(r) * count + i];
        CHECK(std::memcmp(want.data(), out.data(), count * 4) == 0,
              "count %zu density %g bits %u: result differs from the dense reference", count,
              density, bits);
        CHECK(bit_identical(c, out), "count %zu bits %u: ranks differ", count, bits);
        CHECK(res.bytes_sent == static_cast<uint64_t>(n - 1) * (8 + res.piece_bytes),
              "bytes sent %llu for a piece of %llu",
              static_cast<unsigned long long>(res.bytes_sent),
              static_cast<unsigned long long>(res.piece_bytes));
        uint64_t recv_all = 0;
        std::vector<uint64_t> pieces(static_cast<size_t>(n));  // sent as int64: same bytes
        c.allgather(&res.piece_bytes, pieces.data(), 1, DataType::kInt64).wait();
        for (int r = 0; r < n; ++r)
          if (r != me) recv_all += 8 + pieces[static_cast<size_t>(r)];
        CHECK(res.bytes_received == recv_all, "bytes received %llu, pieces say %llu",
              static_cast<unsigned long long>(res.bytes_received),
              static_cast<unsigned long long>(recv_all));
        if (count == 1000000 && density == 0.01 && bits == 2 && me != 1) {
          const double x = static_cast<double>(count * 4) / static_cast<double>(res.piece_bytes);
          if (me == 0)
            std::printf("1 %% of 1M with 2-bit values: %llu bytes, %.0fx below dense fp32\n",
                        static_cast<unsigned long long>(res.piece_bytes), x);
          CHECK(x > 100, "piece only %.0fx smaller than dense fp32", x);
        }
      }
    }
  }
  return g_failures ? 1 : 0;
}

int mode_invalid(Communicator& c) {
  std::vector<float> out(100, 0.0f);
  std::vector<int64_t> idx{3, 100};
  std::vector<float> val{1.0f, 2.0f};
  expect_code([&] { c.sparse_allgather(idx.data(), val.data(), 2, out.data(), 100); },
              ErrorCode::kInvalidArgument, "index 100 of 100");
  idx = {3, -1};
  expect_code([&] { c.sparse_allgather(idx.data(), val.data(), 2, out.data(), 100); },
              ErrorCode::kInvalidArgument, "index -1");
  idx = {3, 3};
  expect_code([&] { c.sparse_allgather(idx.data(), val.data(), 2, out.data(), 100); },
              ErrorCode::kInvalidArgument, "repeated index");
  idx = {3, 4};
  expect_code([&] { c.sparse_allgather(idx.data(), val.data(), 2, out.data(), 100, 16); },
              ErrorCode::kInvalidArgument, "16-bit values");
  // The group goes on.
  idx = {static_cast<int64_t>(c.rank()), 50};
  val = {1.0f, 0.5f};
  c.sparse_allgather(idx.data(), val.data(), 2, out.data(), 100).wait();
  for (int r = 0; r < c.size(); ++r)
    CHECK(out[static_cast<size_t>(r)] == 1.0f, "element %d is %g", r, out[r]);
  CHECK(out[50] == 0.5f * static_cast<float>(c.size()), "element 50 is %g", out[50]);
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    apply_test_domains();
    Config cfg = Config::from_env();
    cfg.op_timeout = std::chrono::seconds(120);
    Communicator c(cfg);
    if (mode == "mismatch") {
      // Every rank is past its start-up before the failing call: a rank still finishing its own
      // would learn of the failure there, from its constructor.
      c.barrier().wait();
      const size_t count = c.rank() == c.size() - 1 ? 2000 : 1000;
      std::vector<float> out(count);
      std::vector<int64_t> idx{1};
      std::vector<float> val{1.0f};
      return expect_code(
                 [&] { c.sparse_allgather(idx.data(), val.data(), 1, out.data(), count).wait(); },
                 ErrorCode::kMismatch, "dense lengths differ") |
             (g_failures ? 1 : 0);
    }
    if (mode == "exact") return mode_exact(c);
    if (mode == "invalid") return mode_invalid(c);
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank error: %s\n", e.what());
    return 1;
  }
}
