// One rank of the multi-process tests. Started N times (by mp_test.cc or `geoccl run`) with
// RANK/WORLD_SIZE/MASTER_* set. Mode "collectives" checks every collective for every dtype and op
// against a reference computed independently on each rank; the other modes provoke one failure
// and exit 0 only when this rank saw the expected typed error in time.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "core/half.h"
#include "geoccl/geoccl.h"
#include "membership/group_params.h"
#include "membership/sealed_store.h"
#include "protocol/frame.h"
#include "protocol/handshake.h"
#include "protocol/liveness.h"
#include "protocol/wire.h"
#include "security/auth.h"
#include "security/sealer.h"
#include "security/secret.h"
#include "transport/quic/flow_window.h"
#include "transport/address_card.h"
#include "transport/tcp/address.h"
#include "runtime/socket.h"

using namespace geoccl;
using Clock = std::chrono::steady_clock;

namespace {


const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kInt8,   DataType::kUInt8,
                           DataType::kInt32,   DataType::kInt64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMin,
                         ReduceOp::kMax};

// Inputs are small integers, so every partial result is exact in every dtype and the reference
// does not depend on the order in which an algorithm combines them.
int64_t input(int r, size_t i, DataType t, ReduceOp op) {
  const int64_t k = static_cast<int64_t>((static_cast<size_t>(r) * 7 + i * 3) % 7);
  if (op == ReduceOp::kProd) {
    const int64_t m = static_cast<int64_t>((static_cast<size_t>(r) + i) % 3);
    if (t == DataType::kUInt8) return m == 0 ? 2 : 1;
    return m == 0 ? 2 : (m == 1 ? 1 : -1);
  }
  return t == DataType::kUInt8 ? k : k - 3;
}

void put(void* b, size_t i, DataType t, int64_t v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(b)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(b)[i] = static_cast<double>(v); break;
    case DataType::kFloat16: static_cast<uint16_t*>(b)[i] = core::float_to_half(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(b)[i] = core::float_to_bf16(static_cast<float>(v)); break;
    case DataType::kInt8: static_cast<int8_t*>(b)[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(b)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(b)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(b)[i] = v; break;
  }
}

// The expected element, written into a buffer of dtype t at index 0 (bit pattern compared).
void expected(std::vector<uint8_t>& out, size_t i, DataType t, ReduceOp op, int n, size_t elem) {
  int64_t acc = input(0, elem, t, op);
  for (int r = 1; r < n; ++r) {
    const int64_t v = input(r, elem, t, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op != ReduceOp::kAvg) return put(out.data(), i, t, acc);
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(static_cast<void*>(out.data()))[i] = static_cast<float>(acc) / static_cast<float>(n); return;
    case DataType::kFloat64: static_cast<double*>(static_cast<void*>(out.data()))[i] = static_cast<double>(acc) / n; return;
    case DataType::kFloat16: reinterpret_cast<uint16_t*>(out.data())[i] = core::float_to_half(static_cast<float>(acc) / static_cast<float>(n)); return;
    case DataType::kBFloat16: reinterpret_cast<uint16_t*>(out.data())[i] = core::float_to_bf16(static_cast<float>(acc) / static_cast<float>(n)); return;
    default: {
      // Integer average: wrap the sum to the type first (as the kernel does), then truncate.
      std::vector<uint8_t> tmp(8);
      put(tmp.data(), 0, t, acc);
      int64_t wrapped = 0;
      switch (t) {
        case DataType::kInt8: wrapped = *reinterpret_cast<int8_t*>(tmp.data()); break;
        case DataType::kUInt8: wrapped = tmp[0]; break;
        case DataType::kInt32: wrapped = *reinterpret_cast<int32_t*>(tmp.data()); break;
        default: wrapped = acc;
      }
      put(out.data(), i, t, wrapped / n);
    }
  }
}

uint64_t fnv(const std::vector<uint8_t>& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string what(const char* op, DataType t, ReduceOp o, size_t count) {
  return std::string(op) + " " + std::string(dtype_name(t)) + " " + std::string(reduce_op_name(o)) +
         " count=" + std::to_string(count);
}

// Every rank must hold bit-identical bytes.
void check_identical(Communicator& c, const std::vector<uint8_t>& b, const std::string& w) {
  std::vector<int64_t> mine = {static_cast<int64_t>(fnv(b))}, all(static_cast<size_t>(c.size()));
  c.allgather(mine.data(), all.data(), 1, DataType::kInt64).wait();
  for (auto h : all) CHECK(h == all[0], "%s: results differ between ranks", w.c_str());
}

// allreduce of `count` elements with each of `algos`: equal to the reference on every rank and
// bit-identical across ranks.
void check_allreduce(Communicator& c, DataType t, ReduceOp op, size_t count,
                     const std::vector<const char*>& algos) {
  const int n = c.size(), me = c.rank();
  const size_t es = dtype_size(t);
  std::vector<uint8_t> want(count * es + 1);
  for (size_t i = 0; i < count; ++i) expected(want, i, t, op, n, i);
  want.resize(count * es);
  for (const char* algo : algos) {
    std::vector<uint8_t> buf(count * es);
    for (size_t i = 0; i < count; ++i) put(buf.data(), i, t, input(me, i, t, op));
    OpOptions o;
    o.algo = algo;
    c.allreduce(buf.data(), count, t, op, o).wait();
    CHECK(buf == want, "%s algo=%s", what("allreduce", t, op, count).c_str(), algo);
    check_identical(c, buf, what("allreduce", t, op, count));
  }
}

void check_reductions(Communicator& c, const std::vector<size_t>& counts,
                      const std::vector<DataType>& types = {std::begin(kTypes), std::end(kTypes)},
                      const std::vector<ReduceOp>& ops = {std::begin(kOps), std::end(kOps)}) {
  const int n = c.size(), me = c.rank();
  for (DataType t : types)
    for (ReduceOp op : ops)
      for (size_t count : counts) {
        const size_t es = dtype_size(t);
        std::vector<uint8_t> want(count * es + 1);
        for (size_t i = 0; i < count; ++i) expected(want, i, t, op, n, i);
        want.resize(count * es);
        // allreduce with every algorithm that applies.
        if (c.topology().names.size() > 1)
          check_allreduce(c, t, op, count, {"hier-ring", "hier-small", "hier-direct", "hier-leaders", "ring", "rd"});
        else
          check_allreduce(c, t, op, count, {"ring", "rd"});
        // reduce to the last rank.
        {
          const int root = n - 1;
          std::vector<uint8_t> buf(count * es);
          for (size_t i = 0; i < count; ++i) put(buf.data(), i, t, input(me, i, t, op));
          const auto orig = buf;
          c.reduce(buf.data(), count, t, op, root).wait();
          CHECK(buf == (me == root ? want : orig), "%s", what("reduce", t, op, count).c_str());
        }
        // reduce_scatter: block b of rank r's input is input(r, b*count + i).
        {
          std::vector<uint8_t> in(count * es * static_cast<size_t>(n)), out(count * es);
          for (size_t i = 0; i < count * static_cast<size_t>(n); ++i) put(in.data(), i, t, input(me, i, t, op));
          std::vector<uint8_t> w(count * es + 1);
          for (size_t i = 0; i < count; ++i) expected(w, i, t, op, n, static_cast<size_t>(me) * count + i);
          w.resize(count * es);
          c.reduce_scatter(in.data(), out.data(), count, t, op).wait();
          CHECK(out == w, "%s", what("reduce_scatter", t, op, count).c_str());
        }
      }
}

void check_data_movement(Communicator& c, const std::vector<size_t>& counts,
                         const std::vector<DataType>& types = {std::begin(kTypes), std::end(kTypes)}) {
  const int n = c.size(), me = c.rank();
  const auto un = static_cast<size_t>(n);
  auto val = [](int r, size_t i) { return static_cast<int64_t>((static_cast<size_t>(r) * 31 + i) % 100); };
  for (DataType t : types)
    for (size_t count : counts) {
      const size_t es = dtype_size(t);
      auto fill = [&](std::vector<uint8_t>& b, int r, size_t first, size_t len) {
        for (size_t i = 0; i < len; ++i) put(b.data(), i, t, val(r, first + i));
      };
      auto block = [&](int r, size_t first) {
        std::vector<uint8_t> b(count * es);
        fill(b, r, first, count);
        return b;
      };
      const std::string w = std::string(dtype_name(t)) + " count=" + std::to_string(count);
      {  // broadcast from the middle rank
        const int root = n / 2;
        auto buf = me == root ? block(root, 0) : std::vector<uint8_t>(count * es, 0xAB);
        c.broadcast(buf.data(), count, t, root).wait();
        CHECK(buf == block(root, 0), "broadcast %s", w.c_str());
      }
      {  // allgather
        auto mine = block(me, 0);
        std::vector<uint8_t> out(count * es * un), want;
        for (int r = 0; r < n; ++r) {
          auto b = block(r, 0);
          want.insert(want.end(), b.begin(), b.end());
        }
        c.allgather(mine.data(), out.data(), count, t).wait();
        CHECK(out == want, "allgather %s", w.c_str());
        // Small allgathers take Bruck's steps on one site: the ring too, at every size.
        std::fill(out.begin(), out.end(), uint8_t{0});
        c.allgather(mine.data(), out.data(), count, t, OpOptions{.algo = "ring"}).wait();
        CHECK(out == want, "ring allgather %s", w.c_str());
      }
      {  // gather to rank 0, scatter from rank n-1
        auto mine = block(me, 0);
        std::vector<uint8_t> out(me == 0 ? count * es * un : 0), want;
        for (int r = 0; r < n; ++r) {
          auto b = block(r, 0);
          want.insert(want.end(), b.begin(), b.end());
        }
        c.gather(mine.data(), me == 0 ? out.data() : nullptr, count, t, 0).wait();
        if (me == 0) CHECK(out == want, "gather %s", w.c_str());
        const int root = n - 1;
        std::vector<uint8_t> src(count * es * un);
        fill(src, root, 0, count * un);
        std::vector<uint8_t> got(count * es);
        c.scatter(me == root ? src.data() : nullptr, got.data(), count, t, root).wait();
        CHECK(got == block(root, static_cast<size_t>(me) * count), "scatter %s", w.c_str());
      }
      {  // alltoall: rank r sends val(r, j*count + i) to rank j
        std::vector<uint8_t> src(count * es * un), out(count * es * un), want;
        fill(src, me, 0, count * un);
        for (int r = 0; r < n; ++r) {
          auto b = block(r, static_cast<size_t>(me) * count);
          want.insert(want.end(), b.begin(), b.end());
        }
        c.alltoall(src.data(), out.data(), count, t).wait();
        CHECK(out == want, "alltoall %s", w.c_str());
      }
      if (n > 1) {  // send/recv around a ring, both posted before either is waited on
        auto mine = block(me, 0);
        std::vector<uint8_t> got(count * es);
        auto s = c.send(mine.data(), count, t, (me + 1) % n, 5);
        auto r = c.recv(got.data(), count, t, (me - 1 + n) % n, 5);
        s.wait();
        r.wait();
        CHECK(got == block((me - 1 + n) % n, 0), "send/recv %s", w.c_str());
      }
    }
  c.barrier().wait();
}

// The hierarchical allreduce in several blocks (its two lanes at once): run with a small chunk
// (GEOCCL_EXPERIMENT=chunk=4096), so that buffers of a few hundred KiB already make 3 or 4 blocks,
// and with uneven domains (GEOCCL_TEST_DOMAINS). Every dtype and op against the reference,
// bit-identical.
int mode_hier_blocks(Communicator& c) {
  // 200003 elements: 3 blocks for 1-byte types, 4 for the others (at 4 KiB chunks).
  for (DataType t : kTypes)
    for (ReduceOp op : kOps) check_allreduce(c, t, op, 200003, {"hier-ring", "hier-direct", "hier-leaders"});
  return g_failures ? 1 : 0;
}

// A float32 sum allreduce of 24 MiB (and a few elements more: many chunks per segment of the
// pipelined ring), checked at every 4099th element. Returns the result.
std::vector<float> check_allreduce_24m(Communicator& c) {
  const size_t count = (24u << 20) / 4 + 5;
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(input(c.rank(), i, DataType::kFloat32, ReduceOp::kSum));
  c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  for (size_t i = 0; i < count; i += 4099) {
    int64_t s = 0;
    for (int r = 0; r < c.size(); ++r) s += input(r, i, DataType::kFloat32, ReduceOp::kSum);
    CHECK(buf[i] == static_cast<float>(s), "24 MiB allreduce at %zu", i);
  }
  return buf;
}

int mode_collectives(Communicator& c, bool big) {
  check_reductions(c, {0, 1, 7, 1003});
  check_data_movement(c, {0, 1, 7, 1003});
  if (big) {
    // One domain of 3 or more ranks, all over shared memory: a flat ring, which forwards. (With
    // several domains the rings inside them are of 2 here, and the ring across is not forwarded.)
    uint64_t forwarded_before = 0;
    const auto& dom = c.topology().domain_of;
    bool all_shm = c.size() >= 3 && std::count(dom.begin(), dom.end(), dom[0]) == c.size(), no_shm = true;
    for (const auto& ps : c.peer_stats()) {
      forwarded_before += ps.forwarded_bytes;
      all_shm = all_shm && ps.transport == "shm";
      no_shm = no_shm && ps.transport != "shm";
    }
    std::vector<float> buf = check_allreduce_24m(c);
    // On one host the ring's steps went ring to ring, at least in part.
    uint64_t forwarded = 0;
    for (const auto& ps : c.peer_stats()) forwarded += ps.forwarded_bytes;
    CHECK(!all_shm || forwarded > forwarded_before, "24 MiB allreduce over shared memory forwarded no byte");
    CHECK(!no_shm || forwarded == 0, "%llu bytes forwarded with no peer on shared memory",
          static_cast<unsigned long long>(forwarded));
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(buf.data()), reinterpret_cast<uint8_t*>(buf.data() + buf.size()));
    check_identical(c, bytes, "big allreduce");
  }
  // Gradient bucketing: 40 tensors of assorted sizes through 16 KiB buckets.
  {
    std::vector<std::vector<float>> grads;
    GradientBucketer b(c, DataType::kFloat32, ReduceOp::kSum, 16 << 10);
    for (int k = 0; k < 40; ++k) {
      grads.emplace_back(static_cast<size_t>(1 + (k * 997) % 5000));
      for (size_t i = 0; i < grads.back().size(); ++i)
        grads.back()[i] = static_cast<float>(input(c.rank(), i + static_cast<size_t>(k), DataType::kFloat32, ReduceOp::kSum));
      b.add(grads.back().data(), grads.back().size());
    }
    b.finish().wait();
    CHECK(b.buckets_started() > 1, "bucketer started %zu buckets", b.buckets_started());
    for (int k = 0; k < 40; ++k)
      for (size_t i = 0; i < grads[static_cast<size_t>(k)].size(); i += 13) {
        int64_t s = 0;
        for (int r = 0; r < c.size(); ++r) s += input(r, i + static_cast<size_t>(k), DataType::kFloat32, ReduceOp::kSum);
        CHECK(grads[static_cast<size_t>(k)][i] == static_cast<float>(s), "bucketed tensor %d element %zu", k, i);
      }
  }
  // Several operations in flight at once complete in issue order: when the callback of one runs,
  // every earlier one has completed. (Callbacks run on completion threads; a slow one lets the
  // next ones start, so the order in which callbacks finish is not part of the contract.)
  std::vector<std::vector<int32_t>> bufs(16, std::vector<int32_t>(100, c.rank() + 1));
  std::vector<Work> works;
  works.reserve(16);  // callbacks read earlier elements while later ones are appended
  std::vector<int> ran;
  std::mutex mu;
  int out_of_order = 0;
  for (int k = 0; k < 16; ++k) {
    works.push_back(c.allreduce(bufs[static_cast<size_t>(k)].data(), 100, DataType::kInt32, ReduceOp::kSum));
    works.back().on_complete([&, k](std::exception_ptr) {
      bool earlier_done = true;
      for (int j = 0; j < k; ++j) earlier_done = earlier_done && works[static_cast<size_t>(j)].test();
      std::lock_guard lk(mu);
      ran.push_back(k);
      out_of_order += !earlier_done;
    });
  }
  for (auto& w : works) w.wait();
  const int want = c.size() * (c.size() + 1) / 2;
  for (auto& b : bufs) CHECK(b[99] == want, "concurrent allreduce");
  std::sort(ran.begin(), ran.end());
  CHECK(ran.size() == 16, "%zu of 16 callbacks ran before wait() returned", ran.size());
  for (size_t k = 0; k < ran.size(); ++k) CHECK(ran[k] == static_cast<int>(k), "callback %zu ran twice", k);
  CHECK(out_of_order == 0, "%d Works completed before an earlier one", out_of_order);
  return g_failures ? 1 : 0;
}

// Re-planning (wan_replan, bench/scenarios/replan.toml): a loop of allreduces of
// GEOCCL_TEST_BYTES (2 MiB), GEOCCL_TEST_ITERS (80) of them, through a link rate change in the
// middle of the run. Every result is exact; the plan of the loop's allreduce (its algorithm and
// the ring order across domains) changes, never back to a plan it left (the link stays down: a
// return would be flapping), and every rank re-planned as often as the others and last after the
// same collective. A second, closer reading of the dropped rate may re-plan again, and may
// refine the plan or leave it alone.
int mode_replan(Communicator& c) {
  const int me = c.rank();
  const size_t bytes = std::getenv("GEOCCL_TEST_BYTES") ? std::strtoull(std::getenv("GEOCCL_TEST_BYTES"), nullptr, 10) : 2u << 20;
  const int iters = std::getenv("GEOCCL_TEST_ITERS") ? std::atoi(std::getenv("GEOCCL_TEST_ITERS")) : 80;
  const size_t count = bytes / 4;
  std::vector<float> buf(count);
  const auto first = c.plan_allreduce(count, DataType::kFloat32);
  AllreducePlan last = first;
  std::vector<int> order = c.topology().ring_order;
  int replans = 0, changes = 0;
  std::vector<std::pair<std::string, std::vector<int>>> left;  // the plans the loop moved away from
  const auto t0 = Clock::now();
  for (int it = 0; it < iters; ++it) {
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(input(me, i, DataType::kFloat32, ReduceOp::kSum));
    // The plan this allreduce runs with: its algorithm, and the ring order in force as it is issued.
    const auto plan = c.plan_allreduce(count, DataType::kFloat32);
    const std::vector<int> order_now = c.topology().ring_order;
    const auto s0 = Clock::now();
    c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
    for (size_t i = 0; i < count; i += 997) {
      int64_t sum = 0;
      for (int r = 0; r < c.size(); ++r) sum += input(r, i, DataType::kFloat32, ReduceOp::kSum);
      CHECK(buf[i] == static_cast<float>(sum), "iteration %d, element %zu", it, i);
    }
    if (c.topology().replans != replans) {
      replans = c.topology().replans;
      std::printf("rank %d: re-planned after collective #%llu, seen at iteration %d, %.1f s into the loop: %s\n", me,
                  static_cast<unsigned long long>(c.topology().replanned_after_op), it,
                  std::chrono::duration<double>(Clock::now() - t0).count(), c.topology().replan_change.c_str());
    }
    if (it > 0 && (plan.algo != last.algo || order_now != order)) {
      ++changes;
      left.emplace_back(last.algo, order);
      for (const auto& [algo, ord] : left)
        CHECK(algo != plan.algo || ord != order_now, "iteration %d: the plan went back to %s, which it had left", it,
              algo.c_str());
      std::string o;
      for (int d : order_now) o += std::to_string(d) + " ";
      std::printf("rank %d: plan changed at iteration %d: %s -> %s, ring order %s\n", me, it, last.algo.c_str(),
                  plan.algo.c_str(), o.c_str());
    }
    order = order_now;
    if (me == 0 && (it % 10 == 0 || plan.algo != last.algo))
      std::printf("iteration %d: %s, predicted %.1f ms, took %.1f ms\n", it, plan.algo.c_str(), plan.predicted_ms, ms);
    std::fflush(stdout);
    last = plan;
  }
  CHECK(changes >= 1, "the plan never changed");
  const auto after_op = static_cast<int64_t>(c.topology().replanned_after_op);
  int64_t agreed[4] = {after_op, -after_op, replans, -replans};
  c.allreduce(agreed, 4, DataType::kInt64, ReduceOp::kMax).wait();
  CHECK(agreed[0] == -agreed[1] && agreed[2] == -agreed[3],
        "ranks re-planned differently: %lld..%lld times, last after collective #%lld .. #%lld",
        static_cast<long long>(-agreed[3]), static_cast<long long>(agreed[2]), static_cast<long long>(-agreed[1]),
        static_cast<long long>(agreed[0]));
  if (me == 0) std::printf("re-plans: %d, the last after collective #%lld\n", replans, static_cast<long long>(after_op));
  CHECK(last.algo != first.algo || std::abs(last.predicted_ms - first.predicted_ms) > 0.2 * first.predicted_ms,
          "the plan did not change: %s, %.1f ms before and after", first.algo.c_str(), first.predicted_ms);
  if (me == 0)
    std::printf("plan before: %s, predicted %.1f ms; after: %s, predicted %.1f ms\n", first.algo.c_str(),
                first.predicted_ms, last.algo.c_str(), last.predicted_ms);
  return g_failures ? 1 : 0;
}

// Relays (wan_relay): the pairs GEOCCL_TEST_RELAYED names ("2-4,3-5") are carried by a third
// rank's relay, as both ends report, and every other pair is direct; every collective with every
// allreduce algorithm (two types and ops, as the WAN's round trips make the full matrix of
// mode_collectives take minutes), and a 24 MiB allreduce, is exact; the relays forwarded bytes.
int mode_relay(Communicator& c) {
  const int me = c.rank();
  std::vector<std::pair<int, int>> want;
  const char* env = std::getenv("GEOCCL_TEST_RELAYED");
  for (const char* p = env ? env : ""; *p;) {
    int a = 0, b = 0, used = 0;
    if (std::sscanf(p, "%d-%d%n", &a, &b, &used) != 2) break;
    want.emplace_back(std::min(a, b), std::max(a, b));
    p += used;
    if (*p == ',') ++p;
  }
  CHECK(!want.empty(), "GEOCCL_TEST_RELAYED names no pair");
  const auto relayed = [&](int peer) {
    return std::find(want.begin(), want.end(), std::make_pair(std::min(me, peer), std::max(me, peer))) != want.end();
  };
  for (const auto& ps : c.peer_stats()) {
    CHECK((ps.relay >= 0) == relayed(ps.peer), "pair %d-%d: relay %d, expected %s", me, ps.peer, ps.relay,
          relayed(ps.peer) ? "a relay" : "direct");
    CHECK(ps.relay != me && ps.relay != ps.peer, "pair %d-%d relayed by one of its ends (%d)", me, ps.peer, ps.relay);
  }
  check_reductions(c, {1, 1003}, {DataType::kFloat32, DataType::kInt64}, {ReduceOp::kSum, ReduceOp::kMax});
  check_data_movement(c, {0, 1003}, {DataType::kFloat32, DataType::kUInt8});
  check_allreduce_24m(c);
  c.barrier().wait();
  int64_t forwarded = 0;
  for (const auto& ps : c.peer_stats()) forwarded += static_cast<int64_t>(ps.relayed_bytes);
  c.allreduce(&forwarded, 1, DataType::kInt64, ReduceOp::kSum).wait();
  CHECK(forwarded > (24 << 20) / 8, "relays forwarded %lld bytes", static_cast<long long>(forwarded));
  if (me == 0) std::printf("relays forwarded %lld bytes (sum over the tunnels' two ends)\n", static_cast<long long>(forwarded));
  return g_failures ? 1 : 0;
}

// Two-hop paths (wan_two_hop, bench/scenarios/two-hop.toml): GEOCCL_TEST_TWO_HOP ("0-2:1") names
// the pair whose bulk data go through a relay rank; both ends report it once the streams moved
// (bounded wait), every other pair is direct. The plan's figures hold the two-hop rate for the
// pair, small and 24 MiB allreduces are exact, and the relay forwarded at least the pair's share of
// the 24 MiB allreduce.
int mode_two_hop(Communicator& c) {
  const int me = c.rank();
  int a = -1, b = -1, via = -1;
  const char* env = std::getenv("GEOCCL_TEST_TWO_HOP");
  CHECK(env && std::sscanf(env, "%d-%d:%d", &a, &b, &via) == 3, "GEOCCL_TEST_TWO_HOP names no pair (want A-B:VIA)");
  if (g_failures) return 1;
  const auto topo = c.topology();
  CHECK(topo.two_hop.size() == 1, "%zu two-hop paths between domains, expected 1", topo.two_hop.size());
  if (me == 0)
    for (const auto& line : topo.two_hop) std::printf("two-hop: %s\n", line.c_str());
  const int other = me == a ? b : me == b ? a : -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    bool moved = other < 0;
    for (const auto& ps : c.peer_stats())
      if (ps.peer == other) moved = ps.two_hop == via;
    if (moved || std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const auto& ps : c.peer_stats()) {
    const bool want = ps.peer == other;
    CHECK(ps.two_hop == (want ? via : -1), "pair %d-%d: two-hop through %d, expected %d", me, ps.peer, ps.two_hop,
          want ? via : -1);
    CHECK(ps.relay < 0, "pair %d-%d relayed by %d: expected direct", me, ps.peer, ps.relay);
  }
  check_reductions(c, {1, 1003}, {DataType::kFloat32}, {ReduceOp::kSum});
  uint64_t before = 0;
  for (const auto& ps : c.peer_stats()) before += ps.relayed_bytes;
  const size_t count = check_allreduce_24m(c).size();
  c.barrier().wait();
  int64_t forwarded = 0;
  for (const auto& ps : c.peer_stats()) forwarded += static_cast<int64_t>(ps.relayed_bytes);
  forwarded -= static_cast<int64_t>(before);
  c.allreduce(&forwarded, 1, DataType::kInt64, ReduceOp::kSum).wait();
  // A ring over three domains moves 2/3 of the buffer over each of its pairs; the relay counts each
  // byte at both tunnel ends' counters (peer a and peer c).
  CHECK(forwarded >= static_cast<int64_t>(count * 4 / 3), "the relay forwarded %lld bytes of the 24 MiB allreduce",
        static_cast<long long>(forwarded));
  if (me == 0) std::printf("the relay forwarded %lld bytes (both tunnel ends' counters)\n", static_cast<long long>(forwarded));
  return g_failures ? 1 : 0;
}

// Measured stream counts (wan_stream_width, bench/scenarios/flow-cap-narrow.toml): two domains
// whose path caps each flow at a twentieth of the uplink. With GEOCCL_TCP_STREAMS unset, 16 MiB
// allreduces (exact) run until every rank that sent bulk data across spreads its frames to each
// such WAN peer over 8 streams or more, settled on after a trial, within 30 calls; at least one
// rank of each domain must have sent across (which ranks do depends on the plan). Prints each
// call's time and rank 0's widths.
int mode_stream_width(Communicator& c) {
  const int me = c.rank();
  const size_t count = 4u << 20;
  const auto topo = c.topology();
  const int my_domain = topo.domain_of[static_cast<size_t>(me)];
  std::vector<float> buf(count);
  int32_t least = 0;
  int64_t across = 0;
  int calls = 0;
  for (; calls < 30; ++calls) {
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i + static_cast<size_t>(me)) % 1000);
    const auto t0 = std::chrono::steady_clock::now();
    c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    bool exact = true;
    for (size_t i = 0; i < count && exact; ++i) {
      float want = 0;
      for (int r = 0; r < c.size(); ++r) want += static_cast<float>((i + static_cast<size_t>(r)) % 1000);
      exact = buf[i] == want;
    }
    CHECK(exact, "call %d: allreduce of 16 MiB not exact", calls);
    // The TCP peers this rank sent bulk data to (the others are in its domain: shared memory).
    // A width counts once a trial settled on it (a trial's own width may still be undone).
    least = 64;
    // votes: ranks of domain 0 and of domain 1 that sent bulk data across; ranks that failed.
    int64_t votes[3] = {0, 0, g_failures ? 1 : 0};
    std::string widths;
    for (const auto& ps : c.peer_stats())
      if (ps.transport == "tcp" && ps.bytes_sent > count * sizeof(float)) {
        least = std::min(least, ps.tcp.width_changes > 0 ? ps.tcp.width : 0);
        votes[my_domain == 0 ? 0 : 1] = 1;
        widths += " " + std::to_string(ps.peer) + ":" + std::to_string(ps.tcp.width) + "/" + std::to_string(ps.tcp.data_streams);
      }
    if (me == 0) std::printf("call %d: %.0f ms, rank 0's WAN peers (peer:used/open):%s\n", calls, ms, widths.c_str());
    std::fflush(stdout);
    // Every rank decides on the same reduced figures: all stop together.
    c.allreduce(&least, 1, DataType::kInt32, ReduceOp::kMin).wait();
    c.allreduce(votes, 3, DataType::kInt64, ReduceOp::kSum).wait();
    across = std::min(votes[0], votes[1]);
    if (votes[2] > 0 || (least >= 8 && across > 0)) break;
  }
  CHECK(across > 0, "after %d calls no rank of one domain sent bulk data across", calls);
  CHECK(least >= 8, "after %d calls the least width settled on to a WAN peer is %d, expected 8 or more", calls, least);
  return g_failures ? 1 : 0;
}

// Callbacks run off the thread that runs collectives: a callback may issue a collective and wait
// on it (Work::wait, or a plain future as torch's hooks do), nested three deep; a slow callback
// holds back no other operation.
// On rank `host` (0 or 1): a receive that cannot complete before `attach` has run on its Work (a
// callback attached after completion runs at once on the caller, not on a completion thread): the
// other of ranks 0 and 1 sends only when the host says so. That one takes part, other ranks do
// nothing; they get an empty Work.
Work gated_receive(Communicator& c, const std::function<void(Work&)>& attach, int host = 0) {
  int64_t token = 5, signal = 0;
  const int partner = 1 - host;
  if (c.rank() == host) {
    auto buf = std::make_shared<int64_t>(0);
    Work w = c.recv(buf.get(), 1, DataType::kInt64, partner, 77);
    w.on_complete([buf](std::exception_ptr) {});  // keeps the buffer until completion
    attach(w);
    c.send(&signal, 1, DataType::kInt64, partner, 78).wait();
    return w;
  }
  if (c.rank() == partner) {
    c.recv(&signal, 1, DataType::kInt64, host, 78).wait();
    c.send(&token, 1, DataType::kInt64, host, 77).wait();
  }
  return Work();
}

int mode_callbacks(Communicator& c) {
  using namespace std::chrono_literals;
  const int n = c.size();
  const int64_t sum_ranks = static_cast<int64_t>(n) * (n - 1) / 2;
  auto report = [](const char* what, std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& err) {
      std::fprintf(stderr, "%s: %s\n", what, err.what());
    }
  };
  {  // one callback (rank 0's, on a completion thread) issues a collective and waits on it
    std::vector<int64_t> b(4096, 2 * c.rank());
    std::atomic<bool> inner_ok{false};
    const auto main_thread = std::this_thread::get_id();
    auto inner = [&] {
      try {
        c.allreduce(b.data(), b.size(), DataType::kInt64, ReduceOp::kSum).wait(30s);
        inner_ok = std::this_thread::get_id() != main_thread || c.rank() != 0;
      } catch (...) {
        report("allreduce issued in a callback", std::current_exception());
      }
    };
    Work wa = gated_receive(c, [&](Work& w) {
      w.on_complete([&](std::exception_ptr e) {
        if (e) return report("gated receive", e);
        inner();
      });
    });
    if (wa.valid()) wa.wait(60s);
    else inner();  // the other ranks' part of the same allreduce
    CHECK(inner_ok.load(), "the collective issued in a callback did not complete (off the main thread)");
    CHECK(b[4095] == 2 * sum_ranks, "result %lld", static_cast<long long>(b[4095]));
  }
  {  // the same through a plain future, which the pool cannot see blocking (torch's Future::wait)
    std::vector<float> a(16, 1.f), b(16, static_cast<float>(c.rank()));
    std::atomic<bool> inner_ok{false};
    Work wa = c.broadcast(a.data(), a.size(), DataType::kFloat32, n - 1);
    wa.on_complete([&](std::exception_ptr e) {
      if (e) return report("outer broadcast", e);
      auto done = std::make_shared<std::promise<std::exception_ptr>>();
      auto f = done->get_future();
      c.allreduce(b.data(), b.size(), DataType::kFloat32, ReduceOp::kMax)
          .on_complete([done](std::exception_ptr ie) { done->set_value(ie); });
      if (f.wait_for(30s) == std::future_status::ready && !f.get()) inner_ok = true;
    });
    wa.wait(60s);
    CHECK(inner_ok.load() && b[0] == static_cast<float>(n - 1), "allreduce waited on through a future");
  }
  {  // nested three deep: each callback issues the next allreduce and waits on it
    std::vector<std::vector<int32_t>> bufs(4, std::vector<int32_t>(256, c.rank() + 1));
    std::atomic<int> deepest{-1};
    std::function<Work(int)> issue = [&](int d) {
      Work w = c.allreduce(bufs[static_cast<size_t>(d)].data(), 256, DataType::kInt32, ReduceOp::kSum);
      w.on_complete([&, d](std::exception_ptr e) {
        if (e) return report("nested allreduce", e);
        if (d == 3) {
          deepest = 3;
          return;
        }
        try {
          issue(d + 1).wait(30s);
        } catch (...) {
          report("nested wait", std::current_exception());
        }
      });
      return w;
    };
    issue(0).wait(60s);
    CHECK(deepest.load() == 3, "the innermost callback did not run");
    for (const auto& b : bufs) CHECK(b[255] == n * (n + 1) / 2, "nested allreduce result %d", b[255]);
  }
  {  // rank 0's callback sleeps 2 s: later collectives, and their callbacks, complete meanwhile
    std::atomic<bool> slow_finished{c.rank() != 0};
    Work slow = gated_receive(c, [&](Work& w) {
      w.on_complete([&](std::exception_ptr) {
        std::this_thread::sleep_for(2s);
        slow_finished = true;
      });
    });
    while (slow.valid() && !slow.test()) std::this_thread::sleep_for(1ms);  // done; callback sleeps
    int later_done = 0;
    for (int i = 0; i < 5; ++i) {
      std::vector<int64_t> v(1000, c.rank() + i);
      std::atomic<bool> cb{false};
      Work w = c.allreduce(v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
      w.on_complete([&](std::exception_ptr) { cb = true; });
      w.wait(30s);
      CHECK(cb.load() && v[999] == sum_ranks + static_cast<int64_t>(n) * i, "allreduce %d behind a slow callback", i);
      later_done += !slow_finished.load();
    }
    CHECK(later_done == (c.rank() == 0 ? 5 : 0), "%d of 5 later collectives completed before the slow callback returned",
          later_done);
    if (slow.valid()) slow.wait(30s);
    CHECK(slow_finished.load(), "wait() returned before the slow callback");
  }
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

// A communicator destroyed while a callback runs and a receive is pending: the destructor waits
// for the callback, the receive's callback gets a typed error, nothing crashes or leaks.
// Each rank's callback runs on a completion thread (gated_receive) and returns only after its
// rank has begun destroying the communicator. Each rank posts its receive before the barrier, so
// it is pending when either rank destroys its communicator.
int mode_callbacks_shutdown(Config cfg) {
  using namespace std::chrono_literals;
  auto c = std::make_unique<Communicator>(cfg);
  const int peer = (c->rank() + 1) % c->size();
  std::atomic<bool> destroying{false}, slow_done{false};
  std::atomic<int> recv_code{-1};
  std::vector<int32_t> y(8, 0);
  auto slow = [&](Work& w) {
    w.on_complete([&](std::exception_ptr) {
      for (int i = 0; i < 30000 && !destroying.load(); ++i) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(300ms);  // the destructor, running by now, waits for it
      slow_done = true;
    });
  };
  Work w0 = gated_receive(*c, slow, 0);
  Work w1 = gated_receive(*c, slow, 1);
  // Never sent. On the bulk class, whose frames are apart from the barrier's: the barrier is not
  // held behind it.
  Work r = c->recv(y.data(), y.size(), DataType::kInt32, peer, 0x7777, OpOptions{.priority = Priority::kBulk});
  r.on_complete([&](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
      recv_code = 0;
    } catch (const Error& err) {
      recv_code = static_cast<int>(err.code());
    }
  });
  // The rank through the barrier first may destroy its communicator before the other's barrier
  // has completed: that one then ends with its peer's abort.
  try {
    c->barrier().wait(30s);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kAborted || e.code() == ErrorCode::kPeerLost, "barrier: %s", e.what());
  }
  CHECK(!slow_done.load(), "the callback returned before the communicator was destroyed");
  destroying = true;
  c.reset();
  CHECK(slow_done.load(), "the communicator was destroyed before its running callback returned");
  const int code = recv_code.load();
  CHECK(code == static_cast<int>(ErrorCode::kAborted) || code == static_cast<int>(ErrorCode::kPeerLost),
        "pending receive at destruction: callback saw code %d", code);
  return g_failures ? 1 : 0;
}

// Expects `w` to fail with `code` within `limit`.
int expect_error(const std::function<void()>& f, ErrorCode code, std::chrono::milliseconds limit) {
  const auto t0 = Clock::now();
  try {
    f();
  } catch (const Error& e) {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    std::printf("got expected error after %lld ms: %s\n", static_cast<long long>(took.count()), e.what());
    if (e.code() != code) {
      std::fprintf(stderr, "wrong error code: wanted %s\n", std::string(error_code_name(code)).c_str());
      return 1;
    }
    return took <= limit ? 0 : 1;
  }
  std::fprintf(stderr, "no error raised\n");
  return 1;
}

// Priority classes run concurrently, each in its own frame space: ranks may interleave
// operations of the two classes in different orders (even ranks start a large bulk allreduce
// first, odd ranks finish a run of gradient collectives before they start theirs) and every
// result is still exact. With one frame space the odd ranks' gradient frames would meet the even
// ranks' bulk frames and fail as a mismatch (or wait forever).
int mode_channels(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const OpOptions bulk{.priority = Priority::kBulk};
  const size_t big = (24u << 20) / 4;
  std::vector<float> bulk_buf(big);
  for (size_t i = 0; i < big; ++i) bulk_buf[i] = static_cast<float>((me + 1) * (i % 89));
  auto gradients = [&] {
    for (int it = 0; it < 20; ++it) {
      std::vector<int64_t> g(1000 + static_cast<size_t>(it) * 300, me + it);
      c.allreduce(g.data(), g.size(), DataType::kInt64, ReduceOp::kSum).wait();
      const int64_t want = static_cast<int64_t>(n) * (n - 1) / 2 + static_cast<int64_t>(n) * it;
      for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == want, "gradient allreduce %d element %zu", it, i);
    }
  };
  Work bulk_work;
  if (me % 2 == 0) {
    bulk_work = c.allreduce(bulk_buf.data(), big, DataType::kFloat32, ReduceOp::kSum, bulk);
    gradients();
  } else {
    gradients();
    bulk_work = c.allreduce(bulk_buf.data(), big, DataType::kFloat32, ReduceOp::kSum, bulk);
  }
  // Point to point on both classes with the same tag, posted in opposite orders on the two ends.
  if (n >= 2 && me < 2) {
    const int peer = 1 - me;
    std::vector<int32_t> g_out(5000, 100 + me), b_out(300000, 200 + me), g_in(5000), b_in(300000);
    std::vector<Work> ws;
    if (me == 0) {
      ws.push_back(c.send(b_out.data(), b_out.size(), DataType::kInt32, peer, 7, bulk));
      ws.push_back(c.send(g_out.data(), g_out.size(), DataType::kInt32, peer, 7));
      ws.push_back(c.recv(g_in.data(), g_in.size(), DataType::kInt32, peer, 7));
      ws.push_back(c.recv(b_in.data(), b_in.size(), DataType::kInt32, peer, 7, bulk));
    } else {
      ws.push_back(c.recv(g_in.data(), g_in.size(), DataType::kInt32, peer, 7));
      ws.push_back(c.send(g_out.data(), g_out.size(), DataType::kInt32, peer, 7));
      ws.front().wait();
      ws.push_back(c.recv(b_in.data(), b_in.size(), DataType::kInt32, peer, 7, bulk));
      ws.push_back(c.send(b_out.data(), b_out.size(), DataType::kInt32, peer, 7, bulk));
    }
    for (auto& w : ws) w.wait();
    CHECK(g_in.front() == 100 + peer && g_in.back() == 100 + peer, "gradient message from %d", peer);
    CHECK(b_in.front() == 200 + peer && b_in.back() == 200 + peer, "bulk message from %d", peer);
  }
  bulk_work.wait();
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < big; ++i)
    CHECK(bulk_buf[i] == ranks * static_cast<float>(i % 89), "bulk allreduce element %zu: %g", i,
          static_cast<double>(bulk_buf[i]));
  uint64_t bulk_bytes = 0;
  for (const auto& ps : c.peer_stats()) bulk_bytes += ps.bulk_bytes_sent;
  CHECK(bulk_bytes > 0, "no bytes counted on the bulk class's links");
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

// Past 32 ranks over TCP (connections on demand): after start-up a rank has data streams to the
// peers a power of two apart round the ring and to no other; an alltoall, which moves a block
// between every pair, connects the rest, and every block arrives.
int mode_lazy(Communicator& c) {
  const int me = c.rank(), n = c.size();
  auto open_streams = [&] {
    std::vector<int> open(static_cast<size_t>(n), -1);
    for (const auto& ps : c.peer_stats()) open[static_cast<size_t>(ps.peer)] = ps.tcp.data_streams;
    return open;
  };
  auto open = open_streams();
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    const bool near = protocol::power_of_two_apart(me, q, n);
    CHECK((open[static_cast<size_t>(q)] > 0) == near, "peer %d (%s apart): %d data streams at start-up", q,
          near ? "a power of two" : "not a power of two", open[static_cast<size_t>(q)]);
  }
  // Every rank has looked before any starts the alltoall (the barrier's partners are a power of
  // two apart).
  c.barrier().wait();
  const size_t count = 1000;
  std::vector<int64_t> src(count * static_cast<size_t>(n)), out(src.size(), -1);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) src[static_cast<size_t>(q) * count + i] = int64_t{me} * 1000000 + q * 1000 + static_cast<int64_t>(i);
  c.alltoall(src.data(), out.data(), count, DataType::kInt64).wait();
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      CHECK(out[static_cast<size_t>(q) * count + i] == int64_t{q} * 1000000 + me * 1000 + static_cast<int64_t>(i),
            "alltoall block from rank %d element %zu", q, i);
  open = open_streams();
  for (int q = 0; q < n; ++q)
    CHECK(q == me || open[static_cast<size_t>(q)] > 0, "peer %d: no data stream after the alltoall", q);
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

// recv_any: rank 0 receives from whichever peer's message is there; the peers send at staggered
// times (the last rank first), on both priority classes; a receive from one peer after a
// receive from any keeps that peer's message order.
int mode_recv_any(Communicator& c) {
  const int me = c.rank(), n = c.size();
  for (Priority prio : {Priority::kGradient, Priority::kBulk}) {
    const OpOptions o{.priority = prio};
    const size_t count = prio == Priority::kBulk ? (3u << 20) : 1000;  // bulk: several frames
    if (me == 0) {
      std::vector<int> seen;
      for (int i = 1; i < n; ++i) {
        std::vector<int32_t> buf(count, -1);
        Work w = c.recv_any(buf.data(), count, DataType::kInt32, 5, o);
        w.wait();
        const int src = w.source();
        CHECK(src >= 1 && src < n, "source %d", src);
        CHECK(buf.front() == src * 1000 && buf.back() == src * 1000, "message of rank %d holds %d", src, buf.front());
        seen.push_back(src);
      }
      std::sort(seen.begin(), seen.end());
      for (int i = 1; i < n; ++i) CHECK(seen[static_cast<size_t>(i - 1)] == i, "rank %d's message missing", i);
      // Two messages from rank 1 with tag 7: the first by recv_any, the second by a plain recv.
      std::vector<int32_t> a(10), b(10);
      Work w = c.recv_any(a.data(), a.size(), DataType::kInt32, 7, o);
      Work w2 = c.recv(b.data(), b.size(), DataType::kInt32, 1, 7, o);
      w.wait();
      w2.wait();
      CHECK(w.source() == 1 && a[0] == 71 && b[0] == 72, "ordered messages: source %d, %d then %d", w.source(), a[0], b[0]);
      CHECK(w2.source() == -1, "a plain recv reports no source");
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * (n - me)));
      std::vector<int32_t> buf(count, me * 1000);
      c.send(buf.data(), count, DataType::kInt32, 0, 5, o).wait();
      if (me == 1) {
        std::vector<int32_t> a(10, 71), b(10, 72);
        c.send(a.data(), a.size(), DataType::kInt32, 0, 7, o).wait();
        c.send(b.data(), b.size(), DataType::kInt32, 0, 7, o).wait();
      }
    }
  }
  // A receive still waiting for its sender holds back no later operation: rank 0 waits for
  // rank n-1's message, which rank n-1 sends only once rank 0 has seen its allreduce complete
  // and told it so.
  const int last = n - 1;
  int64_t late = 0, go = 1, sum = me;
  if (me == 0) {
    Work pending = c.recv(&late, 1, DataType::kInt64, last, 9);
    c.allreduce(&sum, 1, DataType::kInt64, ReduceOp::kSum).wait();
    CHECK(!pending.test(), "the receive completed before its message was sent");
    c.send(&go, 1, DataType::kInt64, last, 10).wait();
    pending.wait();
    CHECK(late == 99, "late message holds %lld", static_cast<long long>(late));
  } else {
    c.allreduce(&sum, 1, DataType::kInt64, ReduceOp::kSum).wait();
    if (me == last) {
      c.recv(&go, 1, DataType::kInt64, 0, 10).wait();
      late = 99;
      c.send(&late, 1, DataType::kInt64, 0, 9).wait();
    }
  }
  CHECK(sum == static_cast<int64_t>(n) * (n - 1) / 2, "allreduce behind a waiting receive gave %lld",
        static_cast<long long>(sum));
  c.barrier().wait();
  return g_failures ? 1 : 0;
}

// Modes that provoke a failure. The whole life of the communicator is inside the expectation: a
// rank that is still finishing an earlier collective (start-up included) when a peer fails gets
// the same typed error there, which is just as correct.
int failure_mode(const std::string& mode, Config cfg) {
  cfg.op_timeout = std::chrono::seconds(20);
  const int me = cfg.rank, n = cfg.world_size;
  if (mode == "kill") {
    // Rank 1 dies in the middle of a large allreduce; the others must see peer-lost well
    // before their 20 s deadline.
    // GEOCCL_TEST_KILL_STAMP: a file where rank 1 writes the time of its death; the others then
    // print how long they took to see it, and fail past GEOCCL_TEST_DETECT_MS when that is set.
    const char* stamp = std::getenv("GEOCCL_TEST_KILL_STAMP");
    const char* limit = std::getenv("GEOCCL_TEST_DETECT_MS");
    auto now_ns = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    int64_t detected = 0;
    std::vector<float> buf((64u << 20) / 4, 1.f);
    int rc = expect_error([&] {
      Communicator c(cfg);
      c.barrier().wait();
      if (me == 1) {
        auto w = c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (stamp)
          if (FILE* f = std::fopen(stamp, "w")) {
            std::fprintf(f, "%lld\n", static_cast<long long>(now_ns()));
            std::fclose(f);
          }
        raise(SIGKILL);
      }
      try {
        for (int i = 0; i < 50; ++i) c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum).wait();
      } catch (const Error&) {
        detected = now_ns();
        throw;
      }
    }, ErrorCode::kPeerLost, std::chrono::seconds(10));
    long long killed = 0;
    if (FILE* f = stamp ? std::fopen(stamp, "r") : nullptr) {
      if (std::fscanf(f, "%lld", &killed) != 1) killed = 0;
      std::fclose(f);
    }
    if (rc == 0 && killed > 0 && detected > 0) {
      const double ms = static_cast<double>(detected - killed) / 1e6;
      std::printf("rank %d: peer-lost %.1f ms after rank 1 was killed\n", me, ms);
      if (limit && ms > std::atof(limit)) {
        std::fprintf(stderr, "rank %d: peer-lost took %.1f ms, limit %s ms\n", me, ms, limit);
        rc = 1;
      }
    }
    return rc;
  }
  if (mode == "params") {
    // The last rank runs with another chunk size: every rank must fail while connecting, with
    // an error that names the setting, well before the connect timeout.
    if (me == n - 1) cfg.chunk_bytes = 256 << 10;
    cfg.connect_timeout = std::chrono::seconds(30);
    try {
      Communicator c(cfg);
      std::fprintf(stderr, "rank %d: joined a group whose ranks disagree\n", me);
      return 1;
    } catch (const Error& e) {
      std::printf("rank %d: %s\n", me, e.what());
      const bool named = std::string(e.what()).find("GEOCCL_EXPERIMENT chunk") != std::string::npos;
      if (e.code() != ErrorCode::kInvalidArgument || !named) {
        std::fprintf(stderr, "rank %d: wanted kInvalidArgument naming GEOCCL_EXPERIMENT chunk\n", me);
        return 1;
      }
      return 0;
    }
  }
  if (mode == "stall") {
    // The last rank enters a large allreduce long after the others (past their deadline): they
    // must all fail with kTimeout at their deadline, and so must the late rank, told by them.
    cfg.op_timeout = std::chrono::seconds(2);
    std::vector<float> buf((64u << 20) / 4, 1.f);
    return expect_error([&] {
      Communicator c(cfg);
      c.barrier().wait();
      if (me == n - 1) std::this_thread::sleep_for(std::chrono::seconds(4));
      c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    }, ErrorCode::kTimeout, std::chrono::seconds(10));
  }
  std::vector<double> buf(1000, 1.0);
  size_t count = 1000;
  DataType t = DataType::kFloat64;
  bool bcast = false;
  if (me == n - 1) {
    if (mode == "mismatch-size") count = 999;
    if (mode == "mismatch-dtype") t = DataType::kInt64;
    if (mode == "mismatch-op" || mode == "mismatch-bulk") bcast = true;
  }
  // mismatch-bulk: the disagreement is on the bulk class, while the gradient class agrees.
  OpOptions o;
  if (mode == "mismatch-bulk") o.priority = Priority::kBulk;
  return expect_error([&] {
    Communicator c(cfg);
    if (mode == "mismatch-bulk") c.allreduce(buf.data(), count, t, ReduceOp::kSum).wait();
    if (bcast) c.broadcast(buf.data(), count, t, 0, o).wait();
    else c.allreduce(buf.data(), count, t, ReduceOp::kSum, o).wait();
  }, ErrorCode::kMismatch, std::chrono::seconds(10));
}

// Communicator::abort: the last rank aborts while every other rank is blocked: rank 0 in an
// allreduce with a second one queued behind it, the others in a receive from the aborting rank
// and an allreduce. Every pending Work on every rank must end with kAborted, naming the aborting
// rank and the reason, within GEOCCL_TEST_ABORT_MS of the abort (measured against the time the
// aborting rank wrote to GEOCCL_TEST_ABORT_STAMP just before it called abort); later calls fail
// at once, and destroying the communicator is quick.
int mode_abort(Config cfg) {
  cfg.op_timeout = std::chrono::seconds(30);
  const int me = cfg.rank, n = cfg.world_size, aborter = n - 1;
  const char* stamp = std::getenv("GEOCCL_TEST_ABORT_STAMP");
  const double limit_ms = std::getenv("GEOCCL_TEST_ABORT_MS") ? std::atof(std::getenv("GEOCCL_TEST_ABORT_MS")) : 1500;
  CHECK(stamp != nullptr, "GEOCCL_TEST_ABORT_STAMP must be set");
  if (!stamp) return 1;
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  auto c = std::make_unique<Communicator>(cfg);
  c->barrier().wait();
  std::vector<float> a(1 << 20, 1.f), b(1 << 20, 1.f), r(1000, 0.f);
  std::vector<Work> pending;
  if (me == aborter) {
    // Its own pending operation: a receive nobody sends (on the bulk class, where nothing else
    // runs, so that no frame of the others' operations meets it).
    pending.push_back(c->recv(r.data(), r.size(), DataType::kFloat32, 0, 7, {.priority = Priority::kBulk}));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others are blocked by now
    if (FILE* f = std::fopen(stamp, "w")) {
      std::fprintf(f, "%lld\n", static_cast<long long>(now_ns()));
      std::fclose(f);
    }
    c->abort("test abort");
  } else if (me == 0) {
    pending.push_back(c->allreduce(a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum));
    pending.push_back(c->allreduce(b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum));  // queued
  } else {
    pending.push_back(c->recv(r.data(), r.size(), DataType::kFloat32, aborter, 1));
    pending.push_back(c->allreduce(a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum));
  }
  int64_t last = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    try {
      pending[i].wait(std::chrono::seconds(10));
      CHECK(false, "rank %d: pending work %zu succeeded after an abort", me, i);
    } catch (const Error& e) {
      last = now_ns();
      const std::string what = e.what();
      CHECK(e.code() == ErrorCode::kAborted, "rank %d: work %zu: wanted kAborted, got %s", me, i, e.what());
      CHECK(what.find("rank " + std::to_string(aborter)) != std::string::npos && what.find("test abort") != std::string::npos,
            "rank %d: the error does not name the aborting rank and the reason: %s", me, e.what());
    }
  }
  long long aborted_at = 0;
  if (FILE* f = std::fopen(stamp, "r")) {
    if (std::fscanf(f, "%lld", &aborted_at) != 1) aborted_at = 0;
    std::fclose(f);
  }
  CHECK(aborted_at > 0, "rank %d: no abort stamp", me);
  const double ms = static_cast<double>(last - aborted_at) / 1e6;
  std::printf("rank %d: every pending work ended with kAborted %.1f ms after the abort\n", me, ms);
  CHECK(ms < limit_ms, "rank %d: took %.1f ms, limit %.0f ms", me, ms, limit_ms);
  // Later calls fail fast, with the same error.
  const auto t0 = Clock::now();
  try {
    c->allreduce(a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum).wait(std::chrono::seconds(5));
    CHECK(false, "rank %d: an allreduce after the abort succeeded", me);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kAborted, "rank %d: after the abort: %s", me, e.what());
  }
  const double later_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  CHECK(later_ms < 200, "rank %d: a call after the abort took %.1f ms", me, later_ms);
  const auto t1 = Clock::now();
  c.reset();
  const double destroy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  std::printf("rank %d: later call failed in %.2f ms, destruction took %.1f ms\n", me, later_ms, destroy_ms);
  CHECK(destroy_ms < limit_ms, "rank %d: destruction after the abort took %.1f ms", me, destroy_ms);
  return g_failures ? 1 : 0;
}


// ---- Mode "stranger" (docs/security.md): the last process is no rank but a stranger without the
// group secret that is handed everything the store holds, opened (a dump: session id, group
// parameters, every rank's address). It tries to change the store, to join, to replace an
// existing data stream and to inject frames; each attempt must be refused (and logged by rank 0,
// which hosts the store), while the other processes, a group of WORLD_SIZE - 1, go on with exact
// allreduces. Files next to each other under GEOCCL_TEST_DIR (default /tmp) carry the dump to the
// stranger and its verdict back.

std::string stranger_file(const Config& cfg, const char* what) {
  const char* d = std::getenv("GEOCCL_TEST_DIR");
  return std::string(d && *d ? d : "/tmp") + "/geoccl-stranger-" + cfg.session + "-" +
         std::to_string(cfg.master_port) + "." + what;
}

struct StoreDump {
  uint64_t session_id = 0, params_hash = 0;
  std::vector<std::string> endpoints;  // TCP address of each rank
};

// Rank 0 of the group: what the stranger gets, read through the store as a member reads it.
StoreDump dump_store(const Config& cfg) {
  StoreDump d;
  auto client = std::make_unique<StoreClient>(cfg.master_addr, cfg.master_port, std::chrono::seconds(10));
  client->authenticate(*security::load_secret(cfg));
  membership::SealedStore store(std::move(client), *security::load_secret(cfg));
  const std::string prefix = "geoccl/" + cfg.session + "/g1/";
  const auto params = store.get(prefix + "params", std::chrono::seconds(5));
  protocol::Reader r(params);
  uint32_t world = 0;
  std::string session;
  std::vector<uint8_t> group;
  CHECK(r.u64(&d.session_id) && r.u32(&world) && r.str(&session, 4096) && r.blob(&group, 64 << 10),
        "group parameters in the store");
  const auto g = membership::GroupParams::decode(group);
  CHECK(g.has_value(), "group parameters decode");
  if (g) d.params_hash = g->hash();
  for (int i = 0; i < cfg.world_size; ++i) {
    std::string ep;
    const auto card = transport::decode_address_card(store.get(prefix + "addr/" + std::to_string(i), std::chrono::seconds(5)));
    CHECK(card && card->find("tcp") && transport::tcp::decode_address(*card->find("tcp"), &ep), "rank %d's TCP address", i);
    d.endpoints.push_back(ep);
  }
  return d;
}

// One connection of the stranger to `endpoint`: sends `out`, returns the first `want` bytes of the
// answer (fewer when the rank closes first), bounded by 5 s.
struct StrangerConn {
  int fd = -1;
  explicit StrangerConn(const std::string& endpoint) {
    std::string host;
    uint16_t port = 0;
    runtime::split_host_port(endpoint, &host, &port);
    fd = runtime::connect_with_timeout(host, port, std::chrono::seconds(5));
    const timeval tv{5, 0};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~StrangerConn() {
    if (fd >= 0) ::close(fd);
  }
  bool send(std::span<const uint8_t> b) {
    return runtime::write_all(fd, b, Clock::now() + std::chrono::seconds(5));
  }
  bool read(std::span<uint8_t> b) { return runtime::read_all(fd, b, Clock::now() + std::chrono::seconds(5)); }
  // The rank closed the connection (EOF or reset), rather than taking more from it.
  bool closed_by_rank() {
    uint8_t b[256];
    for (;;) {
      const ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n > 0) continue;
      return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
  }
};

// A data frame header for receive 0 of the pair, as the stranger forges it.
std::vector<uint8_t> forged_frame(size_t bytes) {
  protocol::FrameHeader h;
  h.type = protocol::FrameType::kData;
  h.kind = protocol::OpKind::kAllreduce;
  h.payload_len = static_cast<uint32_t>(bytes);
  const auto hb = protocol::encode_frame_header(h);
  std::vector<uint8_t> f(hb.begin(), hb.end());
  f.resize(hb.size() + security::sealed_payload_size(bytes), 0x66);
  return f;
}

// Claims stream `stream` of rank `as` towards the rank at `endpoint` with a perfect Hello (from the
// dump); `auth`: with the auth flag and a guessed secret, then frames as if it had joined.
void stranger_hello(const StoreDump& d, const std::string& endpoint, int world, int as, int stream, bool auth) {
  StrangerConn conn(endpoint);
  CHECK(conn.fd >= 0, "stranger: connect to %s", endpoint.c_str());
  if (conn.fd < 0) return;
  protocol::Hello h;
  h.stream = static_cast<uint16_t>(stream);
  h.rank = static_cast<uint32_t>(as);
  h.world_size = static_cast<uint32_t>(world);
  h.session_id = d.session_id;
  h.params_hash = d.params_hash;
  h.flags = auth ? protocol::kHelloFlagAuth : 0;
  Config guess;
  guess.secret = "a guess at the group secret, 32+";
  security::AuthDialler dialler(security::job_key(*security::load_secret(guess), d.session_id,
                                                  security::offered_ciphers("auto")));
  const auto hb = protocol::encode_hello(h);
  std::vector<uint8_t> out(hb.begin(), hb.end());
  if (auth) {
    const auto init = dialler.init();
    out.insert(out.end(), init.begin(), init.end());
  }
  CHECK(conn.send(out), "stranger: send Hello");
  std::array<uint8_t, protocol::kReplySize> rb{};
  CHECK(conn.read(rb), "stranger: no Reply to its Hello (stream %d as rank %d)", stream, as);
  protocol::Reply reply;
  CHECK(protocol::decode_reply(rb, &reply) == protocol::HandshakeStatus::kAccepted, "stranger: Reply decodes");
  if (as >= world) {
    CHECK(reply.status == protocol::HandshakeStatus::kBadRank, "stranger: a rank beyond the world: %s",
          protocol::handshake_status_name(reply.status));
  } else if (!auth) {
    CHECK(reply.status == protocol::HandshakeStatus::kAuthMismatch, "stranger: without the auth flag: %s",
          protocol::handshake_status_name(reply.status));
  } else if (reply.status != protocol::HandshakeStatus::kAccepted) {
    // A stream that cannot be taken over at all (one that is not resumable).
    CHECK(reply.status == protocol::HandshakeStatus::kBadRank, "stranger: Hello of the dump: %s",
          protocol::handshake_status_name(reply.status));
  } else {
    // The Hello itself is right (session and parameters from the dump); the proof is not.
    std::array<uint8_t, security::kAuthRespSize> resp{};
    CHECK(conn.read(resp), "stranger: AuthResp");
    std::array<uint8_t, security::kAuthFinSize> fin{};
    security::ConnectionKeys keys;
    CHECK(dialler.on_resp(hb, rb, resp, &fin, &keys) == security::AuthStatus::kBadProof,
          "stranger: the rank's proof checked out under a guessed secret");
    fin[8] = 0;  // claims success, with a proof it cannot make
    (void)conn.send(fin);
    (void)conn.send(forged_frame(4096));  // then a frame, as if it had joined
  }
  CHECK(conn.closed_by_rank(), "stranger: the rank kept its connection (stream %d as rank %d) open", stream, as);
}

int stranger_main(const Config& cfg) {
  Config me = cfg;
  me.secret.clear();
  me.secret_file.clear();
  const int world = cfg.world_size - 1;
  // The dump, once the group is up (a dump older than this process is another run's).
  const auto start = std::filesystem::file_time_type::clock::now() - std::chrono::seconds(2);
  const std::string dump_path = stranger_file(cfg, "dump");
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  StoreDump d;
  for (;;) {
    std::error_code ec;
    if (std::filesystem::exists(dump_path, ec) && std::filesystem::last_write_time(dump_path, ec) >= start) {
      std::FILE* f = std::fopen(dump_path.c_str(), "r");
      unsigned long long sid = 0, hash = 0;
      char ep[256];
      if (f && std::fscanf(f, "%llx %llx", &sid, &hash) == 2) {
        d.session_id = sid;
        d.params_hash = hash;
        while (std::fscanf(f, "%255s", ep) == 1) d.endpoints.emplace_back(ep);
      }
      if (f) std::fclose(f);
      if (static_cast<int>(d.endpoints.size()) == world) break;
      d = {};
    }
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "stranger: no store dump within 30 s\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("stranger: session 0x%llx, %zu rank addresses from the dump\n",
              static_cast<unsigned long long>(d.session_id), d.endpoints.size());
  // 1. The store: no write, delete or counter without the secret, nor with a guessed one.
  {
    StoreClient raw(cfg.master_addr, cfg.master_port, std::chrono::seconds(5));
    StoreClient guessed(cfg.master_addr, cfg.master_port, std::chrono::seconds(5));
    Config guess;
    guess.secret = "a guess at the group secret, 32+";
    guessed.authenticate(*security::load_secret(guess));
    const std::string prefix = "geoccl/" + cfg.session + "/g1/";
    for (StoreClient* s : {&raw, &guessed}) {
      for (const auto& attempt : std::vector<std::function<void()>>{
               [&] { s->set(prefix + "addr/0", {1, 2, 3}); }, [&] { s->remove(prefix + "params"); },
               [&] { s->add(prefix + "count", 1); }, [&] { s->get(prefix + "params", std::chrono::seconds(1)); }}) {
        try {
          attempt();
          CHECK(false, "stranger: the store served a request without the group secret");
        } catch (const Error& e) {
          CHECK(e.code() == ErrorCode::kProtocol && std::string(e.what()).find("unauthenticated") != std::string::npos,
                "stranger: store: %s", e.what());
        }
      }
    }
  }
  // 2. Join as rank 1 (its control stream), and as a rank the group does not have.
  stranger_hello(d, d.endpoints[0], world, 1, 0, true);
  stranger_hello(d, d.endpoints[0], world, world, 0, true);
  // 3. Replace rank 1's existing data stream 1 to rank 0, without and with the auth flag.
  stranger_hello(d, d.endpoints[0], world, 1, 1, false);
  stranger_hello(d, d.endpoints[0], world, 1, 1, true);
  // 4. A frame straight away, no handshake, to every rank.
  for (const auto& ep : d.endpoints) {
    StrangerConn conn(ep);
    CHECK(conn.fd >= 0, "stranger: connect to %s", ep.c_str());
    if (conn.fd < 0) continue;
    (void)conn.send(forged_frame(4096));
    CHECK(conn.closed_by_rank(), "stranger: %s took a frame without a handshake", ep.c_str());
  }
  std::printf("stranger: %d attempt(s) not refused\n", g_failures);
  const std::string done = stranger_file(cfg, "done");
  if (std::FILE* f = std::fopen((done + ".tmp").c_str(), "w")) {
    std::fprintf(f, "%d\n", g_failures);
    std::fclose(f);
    std::filesystem::rename(done + ".tmp", done);
  }
  return g_failures ? 1 : 0;
}

int mode_stranger(Config cfg) {
  if (cfg.rank == cfg.world_size - 1) return stranger_main(cfg);
  const Config full = cfg;
  cfg.world_size -= 1;
  const std::string dump_path = stranger_file(full, "dump"), done_path = stranger_file(full, "done");
  const std::string log_path = stranger_file(full, "rank0.log");
  if (cfg.rank == 0) {
    std::filesystem::remove(dump_path);
    std::filesystem::remove(done_path);
    // Rank 0's log (it hosts the store) is checked for the refusals below.
    if (!std::freopen(log_path.c_str(), "w", stderr)) return 3;
    std::setvbuf(stderr, nullptr, _IONBF, 0);
  }
  int iterations = 0;
  {
    Communicator c(cfg);
    const int n = c.size();
    auto exact_allreduce = [&] {
      std::vector<int64_t> v(64 << 10);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i) * (c.rank() + 1);
      c.allreduce(v.data(), v.size(), DataType::kInt64, ReduceOp::kSum).wait(std::chrono::seconds(20));
      const int64_t f = static_cast<int64_t>(n) * (n + 1) / 2;
      for (size_t i = 0; i < v.size(); ++i)
        if (v[i] != static_cast<int64_t>(i) * f) return false;
      return true;
    };
    CHECK(exact_allreduce(), "rank %d: allreduce before the stranger", c.rank());
    if (c.rank() == 0) {
      const StoreDump d = dump_store(cfg);
      const std::string tmp = dump_path + ".tmp";
      if (std::FILE* f = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(f, "%llx %llx\n", static_cast<unsigned long long>(d.session_id),
                     static_cast<unsigned long long>(d.params_hash));
        for (const auto& ep : d.endpoints) std::fprintf(f, "%s\n", ep.c_str());
        std::fclose(f);
        std::filesystem::rename(tmp, dump_path);
      }
    }
    // Allreduces go on while the stranger tries; rank 0 says when it is done (a flag in the data,
    // so every rank stops after the same iteration).
    const auto deadline = Clock::now() + std::chrono::seconds(40);
    for (bool done = false; !done;) {
      CHECK(exact_allreduce(), "rank %d: allreduce %d while the stranger tries", c.rank(), iterations);
      ++iterations;
      int64_t flag = c.rank() == 0 && (std::filesystem::exists(done_path) || Clock::now() > deadline) ? 1 : 0;
      c.allreduce(&flag, 1, DataType::kInt64, ReduceOp::kSum).wait(std::chrono::seconds(20));
      done = flag > 0;
    }
    CHECK(exact_allreduce(), "rank %d: allreduce after the stranger", c.rank());
    c.barrier().wait(std::chrono::seconds(20));
  }
  if (cfg.rank == 0) {
    std::fflush(stderr);
    std::ifstream in(log_path);
    const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("%s", log.c_str());
    auto count = [&](const std::string& what) {
      size_t k = 0;
      for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++k;
      return k;
    };
    // Join, beyond the world, two stream takeovers and a bare frame: five rejected connections;
    // eight refused store requests.
    CHECK(count("rejected inbound connection") + count("dropping inbound connection") >= 5,
          "rank 0 logged %zu rejected connection(s), 5 expected", count("rejected inbound connection"));
    CHECK(count("store: refused request") >= 8, "rank 0's store logged %zu refused request(s), 8 expected",
          count("store: refused request"));
    // With resumable streams a Hello for an existing data stream is answered, and the takeover
    // fails at the stranger's proof.
    if (cfg.tcp_resume == "on" || !cfg.domain.empty())
      CHECK(count("claiming to be rank 1 stream 1 failed authentication") >= 1,
            "rank 0 logged no failed takeover of rank 1's stream 1");
    std::ifstream done(done_path);
    int stranger_failures = -1;
    CHECK(done >> stranger_failures && stranger_failures == 0, "the stranger reports %d attempt(s) not refused",
          stranger_failures);
    std::filesystem::remove(dump_path);
    std::filesystem::remove(done_path);
    std::filesystem::remove(log_path);
  }
  std::printf("rank %d: %d exact allreduce(s) while the stranger tried\n", cfg.rank, iterations);
  CHECK(iterations > 0, "rank %d: no allreduce while the stranger tried", cfg.rank);
  return g_failures ? 1 : 0;
}

// The 16-byte marker of mode "marker": four int32 words (c0ffee, bada55, d15ea5, facade), small
// enough that sums over up to 127 ranks stay exact. On the wire, little-endian:
// eeffc00055daba00a55ed100decafa00, the pattern bench/scenarios/adversary.toml sniffs for.
constexpr std::array<int32_t, 4> kMarker = {0x00C0FFEE, 0x00BADA55, 0x00D15EA5, 0x00FACADE};

const char* code_tag(ErrorCode c) {
  switch (c) {
    case ErrorCode::kProtocol: return "kProtocol";
    case ErrorCode::kPeerLost: return "kPeerLost";
    case ErrorCode::kAborted: return "kAborted";
    case ErrorCode::kTimeout: return "kTimeout";
    case ErrorCode::kMismatch: return "kMismatch";
    default: return "other";
  }
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Allreduces (sum) of 256 KiB filled with kMarker, the last four elements (iteration, rank, stop
// vote, one) changing per call, each result checked exactly, for GEOCCL_TEST_RUN_S seconds
// (every rank stops after the same call: a vote in the buffer). tests/tools/wan_adversary_test.sh
// sniffs for the marker on the emulated WAN, or tampers with / replays segments once every rank
// printed "loop running". With GEOCCL_TEST_EXPECT_ERROR=1 the loop must end with a typed error
// (printed with its code, the exact calls before it and the wall-clock time) and this rank exits 0
// then, 3 when the time ran out without one; a wrong result is a failure (1) in every case.
int mode_marker(Communicator& c) {
  const int me = c.rank(), n = c.size();
  const bool expect_error = env_int("GEOCCL_TEST_EXPECT_ERROR", 0) != 0;
  const auto run_for = std::chrono::seconds(env_int("GEOCCL_TEST_RUN_S", 10));
  const size_t count = (256u << 10) / 4;
  std::printf("rank %d: marker ", me);
  for (const int32_t w : kMarker)
    for (int b = 0; b < 4; ++b) std::printf("%02x", static_cast<unsigned>((w >> (8 * b)) & 0xFF));
  std::printf(", %zu-byte allreduces for %lld s\n", count * 4, static_cast<long long>(run_for.count()));
  std::fflush(stdout);
  std::vector<int32_t> buf(count);
  const auto t0 = Clock::now();
  int exact = 0;
  try {
    for (bool stop = false; !stop;) {
      for (size_t i = 0; i + 4 < count; ++i) buf[i] = kMarker[i % 4];
      buf[count - 4] = exact;
      buf[count - 3] = me;
      buf[count - 2] = Clock::now() - t0 >= run_for ? 1 : 0;
      buf[count - 1] = 1;
      c.allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum).wait();
      for (size_t i = 0; i + 4 < count; ++i) {
        if (buf[i] != n * kMarker[i % 4]) {
          std::fprintf(stderr, "rank %d: WRONG RESULT in call %d, element %zu: %d, expected %d\n", me, exact, i,
                       buf[i], n * kMarker[i % 4]);
          return 1;
        }
      }
      if (buf[count - 4] != n * exact || buf[count - 3] != n * (n - 1) / 2 || buf[count - 1] != n ||
          buf[count - 2] < 0 || buf[count - 2] > n) {
        std::fprintf(stderr, "rank %d: WRONG RESULT in call %d, trailer %d %d %d %d\n", me, exact, buf[count - 4],
                     buf[count - 3], buf[count - 2], buf[count - 1]);
        return 1;
      }
      stop = buf[count - 2] != 0;
      if (++exact == 3) {
        std::printf("rank %d: loop running\n", me);
        std::fflush(stdout);
      }
    }
  } catch (const Error& e) {
    std::printf("rank %d: typed error %s after %d exact allreduce(s), at unix_ms %lld: %s\n", me, code_tag(e.code()),
                exact, static_cast<long long>(unix_ms()), e.what());
    std::fflush(stdout);
    return expect_error ? 0 : 2;
  }
  std::printf("rank %d: %d exact allreduce(s), no error\n", me, exact);
  return expect_error ? 3 : 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    apply_test_domains();
    Config cfg = Config::from_env();
    if (mode == "kill" || mode == "stall" || mode == "params" || mode == "mismatch-size" || mode == "mismatch-dtype" ||
        mode == "mismatch-op" || mode == "mismatch-bulk")
      return failure_mode(mode, cfg);
    if (mode == "callbacks-shutdown") return mode_callbacks_shutdown(cfg);
    if (mode == "wrong-secret") {
      // The last rank has another group secret: every rank fails at setup with a typed error that
      // names the secret, and none hangs.
      if (cfg.rank == cfg.world_size - 1) cfg.secret += " but another one";
      try {
        Communicator c(cfg);
        std::fprintf(stderr, "rank %d joined a group with a wrong secret\n", cfg.rank);
        return 1;
      } catch (const Error& e) {
        std::printf("rank %d: %s\n", cfg.rank, e.what());
        const bool typed = e.code() == ErrorCode::kProtocol || e.code() == ErrorCode::kInvalidArgument;
        return typed && std::string(e.what()).find("secret") != std::string::npos ? 0 : 2;
      }
    }
    if (mode == "stranger") return mode_stranger(cfg);
    if (mode == "abort") return mode_abort(cfg);
    Communicator c(cfg);
    const int me = c.rank(), n = c.size();
    if (mode == "callbacks") return mode_callbacks(c);
    if (mode == "collectives") return mode_collectives(c, false);
    if (mode == "collectives-big") return mode_collectives(c, true);
    if (mode == "hier-blocks") return mode_hier_blocks(c);
    if (mode == "channels") return mode_channels(c);
    if (mode == "relay") return mode_relay(c);
    if (mode == "two_hop") return mode_two_hop(c);
    if (mode == "stream_width") return mode_stream_width(c);
    if (mode == "replan") return mode_replan(c);
    if (mode == "recv-any") return mode_recv_any(c);
    if (mode == "lazy") return mode_lazy(c);
    if (mode == "marker") return mode_marker(c);
    if (mode == "decider") {
      // GEOCCL_TRANSPORT remote=auto: every peer in another domain has a reason for its
      // transport that gives both candidates' figures (or says QUIC did not connect), the
      // transport is GEOCCL_TEST_EXPECT_TRANSPORT where set, and collectives are exact after the
      // switch.
      const char* expect = std::getenv("GEOCCL_TEST_EXPECT_TRANSPORT");
      const auto dom = c.topology().domain_of;
      for (const auto& ps : c.peer_stats()) {
        if (dom[static_cast<size_t>(ps.peer)] == dom[static_cast<size_t>(me)]) continue;
        std::printf("rank %d -> %d: %s: %s\n", me, ps.peer, ps.transport.c_str(), ps.transport_choice.c_str());
        CHECK(ps.transport_choice.find("tcp") != std::string::npos && ps.transport_choice.find("quic") != std::string::npos,
              "peer %d: no decision: '%s'", ps.peer, ps.transport_choice.c_str());
        if (expect) CHECK(ps.transport == expect, "peer %d on %s, expected %s", ps.peer, ps.transport.c_str(), expect);
      }
      return mode_collectives(c, false);
    }
    if (mode == "quic-outage") {
      // Allreduces of 1 MiB and 4 KiB (a duplicated frame), each checked exactly, for
      // GEOCCL_TEST_RUN_S seconds while tests/mp/quic_outage.sh drops every UDP packet for a
      // while; a vote (the last element) makes every rank stop after the same iteration. With
      // GEOCCL_TEST_EXPECT_REDIAL some connection of the group must have been replaced (which
      // pairs are depends on who waited for whom when the cut came; the others recover by
      // themselves). Every connection's flow-control windows are the ones flow_window.h sizes from
      // the figures it reports, and a replacing connection's are sized from a measured path.
      const auto run_for = std::chrono::seconds(env_int("GEOCCL_TEST_RUN_S", 10));
      const auto t0 = std::chrono::steady_clock::now();
      double worst_ms = 0;
      int it = 0;
      for (bool stop = false; !stop; ++it) {
        const size_t count = it % 2 ? 1024 : (1u << 20) / 4;
        std::vector<float> buf(count);
        for (size_t i = 0; i + 1 < count; ++i) buf[i] = static_cast<float>((me + 1) * ((i + static_cast<size_t>(it)) % 89));
        buf[count - 1] = std::chrono::steady_clock::now() - t0 >= run_for ? 1.f : 0.f;
        const auto s0 = std::chrono::steady_clock::now();
        c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
        worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
        const float ranks = static_cast<float>(n * (n + 1) / 2);
        for (size_t i = 0; i + 1 < count; ++i)
          CHECK(buf[i] == ranks * static_cast<float>((i + static_cast<size_t>(it)) % 89), "iteration %d element %zu: %g",
                it, i, static_cast<double>(buf[i]));
        stop = buf[count - 1] != 0.f;
        // Connected, and past the first exchange of data (each connection's session ticket comes
        // with its handshake): the test may cut the path now.
        if (it == 0)
          if (const char* ready = std::getenv("GEOCCL_TEST_READY_FILE"))
            if (FILE* f = std::fopen((std::string(ready) + "." + std::to_string(me)).c_str(), "w")) std::fclose(f);
      }
      int64_t replaced = 0;
      uint64_t duplicated = 0;
      for (const auto& ps : c.peer_stats()) {
        replaced += static_cast<int64_t>(ps.quic.reconnects);
        std::printf("rank %d -> %d: %s, %llu reconnect(s) (%llu with 0-RTT), %llu frame(s) re-sent, %llu duplicated\n",
                    me, ps.peer, ps.transport.c_str(), static_cast<unsigned long long>(ps.quic.reconnects),
                    static_cast<unsigned long long>(ps.quic.zero_rtt),
                    static_cast<unsigned long long>(ps.quic.frames_resent),
                    static_cast<unsigned long long>(ps.quic.frames_duplicated));
        CHECK(ps.transport == "quic", "peer %d on %s", ps.peer, ps.transport.c_str());
        duplicated += ps.quic.frames_duplicated;
        const auto& q = ps.quic;
        transport::quic::WindowLimits limits;
        limits.unmeasured = cfg.quic_window_bytes;
        const auto sized = transport::quic::size_windows(q.window_rtt_ns, q.window_rate_bps, limits);
        std::printf("rank %d -> %d: windows %llu B (stream %llu B, ceiling %llu B) sized from %.3f ms x %.0f Mbit/s\n",
                    me, ps.peer, static_cast<unsigned long long>(q.window_bytes),
                    static_cast<unsigned long long>(q.stream_window_bytes),
                    static_cast<unsigned long long>(q.max_window_bytes), static_cast<double>(q.window_rtt_ns) / 1e6,
                    static_cast<double>(q.window_rate_bps) / 1e6);
        CHECK(q.window_bytes == sized.connection && q.stream_window_bytes == sized.stream,
              "peer %d: windows %llu/%llu, sized %llu/%llu", ps.peer, static_cast<unsigned long long>(q.window_bytes),
              static_cast<unsigned long long>(q.stream_window_bytes), static_cast<unsigned long long>(sized.connection),
              static_cast<unsigned long long>(sized.stream));
        if (q.reconnects > 0) {
          CHECK(sized.measured, "peer %d: a replacing connection's windows were not sized from the path", ps.peer);
          // Every rank takes 0-RTT (GEOCCL_EXPERIMENT quic_0rtt defaults to 1), and each connection had its
          // ticket long before the cut: a replacement resumed with its frames as early data.
          CHECK(q.zero_rtt > 0, "peer %d: %llu reconnect(s), none with 0-RTT (%llu refused)", ps.peer,
                static_cast<unsigned long long>(q.reconnects), static_cast<unsigned long long>(q.zero_rtt_refused));
        }
      }
      // Small frames go out twice (quic_duplicate): this rank sent some (to the peers its ring sends to).
      CHECK(duplicated > 0, "no small frame went out twice");
      c.allreduce(&replaced, 1, DataType::kInt64, ReduceOp::kSum).wait();
      if (std::getenv("GEOCCL_TEST_EXPECT_REDIAL")) CHECK(replaced >= 2, "no connection was replaced");
      std::printf("rank %d: %d iterations, slowest %.0f ms\n", me, it, worst_ms);
      return g_failures ? 1 : 0;
    }
    if (mode == "resume") {
      // Large allreduces and allgathers, each checked exactly, while the test kills data
      // streams from outside (ss -K). Prints how many streams this rank re-established.
      const size_t count = (16u << 20) / 4;
      std::vector<float> buf(count);
      for (int it = 0; it < 40; ++it) {
        for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((me + 1) * ((i + it) % 97));
        c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
        const float ranks = static_cast<float>(n * (n + 1) / 2);
        for (size_t i = 0; i < count; ++i)
          CHECK(buf[i] == ranks * static_cast<float>((i + it) % 97), "iteration %d element %zu: %g", it,
                i, static_cast<double>(buf[i]));
        std::vector<int32_t> mine(1 << 18), all((1u << 18) * static_cast<size_t>(n));
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<int32_t>(i * 31 + static_cast<size_t>(me) + static_cast<size_t>(it));
        c.allgather(mine.data(), all.data(), mine.size(), DataType::kInt32).wait();
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < mine.size(); ++i)
            CHECK(all[static_cast<size_t>(r) * mine.size() + i] == static_cast<int32_t>(i * 31 + static_cast<size_t>(r) + static_cast<size_t>(it)),
                  "allgather from rank %d element %zu", r, i);
      }
      uint64_t reconnects = 0;
      for (const auto& ps : c.peer_stats())
        for (const auto& st : ps.tcp.streams) reconnects += st.reconnects;
      std::printf("rank %d re-established %llu stream(s)\n", me, static_cast<unsigned long long>(reconnects));
      return 0;
    }
    if (mode == "plan") {
      // The planner's cost model against the clock (emulated WAN): for each size in
      // GEOCCL_TEST_SIZES (bytes, comma-separated), every rank chose the same algorithm with the
      // same prediction, and the median of GEOCCL_TEST_ITERS back-to-back allreduces (after one
      // warm-up; the slowest rank's time per iteration) is within GEOCCL_TEST_TOLERANCE (a
      // fraction) of the prediction. Results are exact.
      const char* sizes_env = std::getenv("GEOCCL_TEST_SIZES");
      const int iters = std::getenv("GEOCCL_TEST_ITERS") ? std::atoi(std::getenv("GEOCCL_TEST_ITERS")) : 5;
      const double tol = std::getenv("GEOCCL_TEST_TOLERANCE") ? std::atof(std::getenv("GEOCCL_TEST_TOLERANCE")) : 0.3;
      CHECK(sizes_env != nullptr && iters > 0, "GEOCCL_TEST_SIZES / GEOCCL_TEST_ITERS not set");
      std::vector<size_t> sizes;
      for (const char* p = sizes_env ? sizes_env : ""; *p;) {
        char* end = nullptr;
        sizes.push_back(std::strtoull(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
      }
      for (size_t bytes : sizes) {
        const size_t count = bytes / 4;
        const auto plan = c.plan_allreduce(count, DataType::kFloat32);
        double agree[2] = {plan.predicted_ms, -plan.predicted_ms};
        c.allreduce(agree, 2, DataType::kFloat64, ReduceOp::kMax).wait();
        CHECK(agree[0] == -agree[1] && plan.predicted_ms > 0, "%zu B: predictions differ across ranks (%g .. %g)",
              bytes, -agree[1], agree[0]);
        // A timing on a shared 2-core machine: a round that meets a noisy moment (another
        // process on the CPUs, a burst of queue drops on the emulated uplink) is measured once
        // more, up to GEOCCL_TEST_ROUNDS rounds. Every rank sees the same slowest-rank times, so
        // all decide alike.
        const int rounds = std::getenv("GEOCCL_TEST_ROUNDS") ? std::atoi(std::getenv("GEOCCL_TEST_ROUNDS")) : 3;
        std::vector<float> buf(count);
        double median = 0, err = 0;
        for (int round = 0; round < rounds; ++round) {
          std::vector<double> ms;
          for (int it = 0; it <= iters; ++it) {
            for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(input(me, i, DataType::kFloat32, ReduceOp::kSum));
            const auto t0 = Clock::now();
            c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
            if (it > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          }
          for (size_t i = 0; i < count; i += 997) {
            int64_t s = 0;
            for (int r = 0; r < c.size(); ++r) s += input(r, i, DataType::kFloat32, ReduceOp::kSum);
            CHECK(buf[i] == static_cast<float>(s), "%zu B: element %zu", bytes, i);
          }
          c.allreduce(ms.data(), ms.size(), DataType::kFloat64, ReduceOp::kMax).wait();
          std::sort(ms.begin(), ms.end());
          median = ms[ms.size() / 2];
          err = (median - plan.predicted_ms) / plan.predicted_ms;
          if (me == 0)
            std::printf("plan %zu B: %s, predicted %.1f ms, measured median %.1f ms (%+.0f %%), round %d\n", bytes,
                        plan.algo.c_str(), plan.predicted_ms, median, err * 100, round + 1);
          if (std::abs(err) <= tol) break;
        }
        CHECK(std::abs(err) <= tol, "%zu B (%s): predicted %.1f ms, measured %.1f ms in every one of %d rounds", bytes,
              plan.algo.c_str(), plan.predicted_ms, median, rounds);
        // With a WAN codec the choice stays among the hierarchical plans (the ones with WAN hops
        // to compress).
        OpOptions zo;
        zo.compression = Compression::parse("int8");
        const auto zplan = c.plan_allreduce(count, DataType::kFloat32, zo);
        CHECK(zplan.algo.rfind("hier", 0) == 0, "%zu B with int8: %s chosen (%s)", bytes, zplan.algo.c_str(),
              zplan.why.c_str());
      }
      return g_failures ? 1 : 0;
    }
    if (mode == "topology") {
      // The domains found must be the ones given in GEOCCL_TEST_EXPECT ("0,0,1,1,2,2").
      std::string want = std::getenv("GEOCCL_TEST_EXPECT") ? std::getenv("GEOCCL_TEST_EXPECT") : "";
      std::string got;
      for (int d : c.topology().domain_of) got += (got.empty() ? "" : ",") + std::to_string(d);
      std::printf("topology: %s\n", c.topology().describe.c_str());
      CHECK(got == want, "domains %s, expected %s", got.c_str(), want.c_str());
      if (std::getenv("GEOCCL_TEST_EXPECT_WAN")) {
        // The WAN treatment follows the domains however they were found: after a large
        // allreduce, peers of this rank's domain are on shared memory (one namespace = one host),
        // peers of other domains on TCP with BBR and frames striped over several streams.
        // The hierarchical ring, where every rank carries WAN traffic (the cost model may send
        // it all through the domain leaders).
        std::vector<float> buf((16u << 20) / 4, 1.f);
        OpOptions ring;
        ring.algo = "hier-ring";
        c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum, ring).wait();
        const auto dom = c.topology().domain_of;
        int striped_bulk = 0;
        for (const auto& ps : c.peer_stats()) {
          const bool remote = dom[static_cast<size_t>(ps.peer)] != dom[static_cast<size_t>(me)];
          int used = 0;
          for (const auto& st : ps.tcp.streams) used += st.frames_sent > 0;
          std::printf("peer %d: %s, %s, %d stream(s) used, cc %s\n", ps.peer, remote ? "remote" : "same domain",
                      ps.transport.c_str(), used, ps.tcp.congestion_control.c_str());
          if (remote) {
            CHECK(ps.transport == "tcp", "peer %d in another domain on %s", ps.peer, ps.transport.c_str());
            // Only the WAN ring's neighbours carry bulk data; probes take one warm stream.
            if (ps.bytes_sent > (4u << 20))
              CHECK(used > 1, "peer %d in another domain: %llu B on %d stream(s)", ps.peer,
                    static_cast<unsigned long long>(ps.bytes_sent), used);
            striped_bulk += ps.bytes_sent > (4u << 20) && used > 1;
            CHECK(ps.tcp.congestion_control == "bbr", "peer %d in another domain: cc %s", ps.peer,
                  ps.tcp.congestion_control.c_str());
          } else {
            CHECK(ps.transport == "shm", "peer %d in this domain on %s", ps.peer, ps.transport.c_str());
          }
        }
        CHECK(striped_bulk > 0, "no peer in another domain carried striped bulk data");
        c.barrier().wait();  // no rank closes its sockets before every rank has read its stats
      }
      return g_failures ? 1 : 0;
    }
    if (mode == "garbage") {
      // Rank 1 connects to rank 0's transport port and sends junk; it must be rejected and the
      // group must keep working.
      if (me == 1) {
        StoreClient store(cfg.master_addr, cfg.master_port, std::chrono::seconds(10));
        const auto card = transport::decode_address_card(store.get("geoccl/" + cfg.session + "/g1/addr/0", std::chrono::seconds(10)));
        std::string endpoint, host;
        uint16_t port = 0;
        CHECK(card && card->find("tcp") && transport::tcp::decode_address(*card->find("tcp"), &endpoint), "rank 0's TCP address");
        runtime::split_host_port(endpoint, &host, &port);
        const int fd = runtime::connect_with_timeout(host, port, std::chrono::seconds(5));
        CHECK(fd >= 0, "connect to rank 0");
        const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        [[maybe_unused]] auto w = ::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        char buf[64];
        const ssize_t got = ::recv(fd, buf, sizeof buf, 0);  // reply with a reason, then EOF
        CHECK(got >= 0, "rejected connection read");
        while (::recv(fd, buf, sizeof buf, 0) > 0) {
        }
        ::close(fd);
      }
      std::vector<int64_t> v(100, me);
      c.allreduce(v.data(), v.size(), DataType::kInt64, ReduceOp::kSum).wait();
      CHECK(v[0] == static_cast<int64_t>(n) * (n - 1) / 2, "allreduce after garbage");
      c.barrier().wait();
      return g_failures ? 1 : 0;
    }
    if (mode == "invalid") {
      // Bad arguments are rejected before anything is sent, and the group keeps working.
      int x = 0;
      int rc = expect_error([&] { c.broadcast(&x, 1, DataType::kInt32, n); }, ErrorCode::kInvalidArgument,
                            std::chrono::seconds(1));
      rc |= expect_error([&] { c.allreduce(nullptr, 4, DataType::kInt32, ReduceOp::kSum); },
                         ErrorCode::kInvalidArgument, std::chrono::seconds(1));
      rc |= expect_error([&] { c.allreduce(&x, 1, static_cast<DataType>(99), ReduceOp::kSum); },
                         ErrorCode::kInvalidArgument, std::chrono::seconds(1));
      // A reduce-scatter whose output lies in its input (MPI's in place) is refused.
      std::vector<int32_t> blocks(static_cast<size_t>(n) * 4, 1);
      rc |= expect_error([&] { c.reduce_scatter(blocks.data(), blocks.data() + me * 4, 4, DataType::kInt32, ReduceOp::kSum); },
                         ErrorCode::kInvalidArgument, std::chrono::seconds(1));
      c.allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum).wait();
      return rc;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mp_check %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
