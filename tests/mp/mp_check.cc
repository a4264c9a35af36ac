// One rank of the multi-process tests. Started N times (by mp_test.cc or `geoccl run`) with
// RANK/WORLD_SIZE/MASTER_* set. Mode "collectives" checks every collective for every dtype and op
// against a reference computed independently on each rank; the other modes provoke one failure
// and exit 0 only when this rank saw the expected typed error in time.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "core/half.h"
#include "geoccl/geoccl.h"
#include "transport/tcp/address.h"
#include "transport/tcp/socket_util.h"

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

void check_reductions(Communicator& c, const std::vector<size_t>& counts) {
  const int n = c.size(), me = c.rank();
  for (DataType t : kTypes)
    for (ReduceOp op : kOps)
      for (size_t count : counts) {
        const size_t es = dtype_size(t);
        std::vector<uint8_t> want(count * es + 1);
        for (size_t i = 0; i < count; ++i) expected(want, i, t, op, n, i);
        want.resize(count * es);
        // allreduce with every algorithm that applies.
        if (c.topology().names.size() > 1)
          check_allreduce(c, t, op, count, {"hier-ring", "hier-small", "ring", "rd"});
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

void check_data_movement(Communicator& c, const std::vector<size_t>& counts) {
  const int n = c.size(), me = c.rank();
  const auto un = static_cast<size_t>(n);
  auto val = [](int r, size_t i) { return static_cast<int64_t>((static_cast<size_t>(r) * 31 + i) % 100); };
  for (DataType t : kTypes)
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

// The hierarchical allreduce in several blocks (its two lanes at once): run with a small
// GEOCCL_CHUNK_BYTES, so that buffers of a few hundred KiB already make 3 or 4 blocks, and with
// uneven domains (GEOCCL_TEST_DOMAINS). Every dtype and op against the reference, bit-identical.
int mode_hier_blocks(Communicator& c) {
  // 200003 elements: 3 blocks for 1-byte types, 4 for the others (at 4 KiB chunks).
  for (DataType t : kTypes)
    for (ReduceOp op : kOps) check_allreduce(c, t, op, 200003, {"hier-ring"});
  return g_failures ? 1 : 0;
}

int mode_collectives(Communicator& c, bool big) {
  check_reductions(c, {0, 1, 7, 1003});
  check_data_movement(c, {0, 1, 7, 1003});
  if (big) {
    // Tens of MiB through the pipelined ring (many chunks per segment).
    const size_t count = (24u << 20) / 4 + 5;
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(input(c.rank(), i, DataType::kFloat32, ReduceOp::kSum));
    c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
    for (size_t i = 0; i < count; i += 4099) {
      int64_t s = 0;
      for (int r = 0; r < c.size(); ++r) s += input(r, i, DataType::kFloat32, ReduceOp::kSum);
      CHECK(buf[i] == static_cast<float>(s), "big allreduce at %zu", i);
    }
    std::vector<uint8_t> bytes(reinterpret_cast<uint8_t*>(buf.data()), reinterpret_cast<uint8_t*>(buf.data() + count));
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

// Callbacks run off the thread that runs collectives: a callback may issue a collective and wait
// on it (Work::wait, or a plain future as torch's hooks do), nested three deep; a slow callback
// holds back no other operation.
// On rank 0: a receive that cannot complete before `attach` has run on its Work (a callback
// attached after completion runs at once on the caller, not on a completion thread): rank 1 sends
// only when rank 0 says so. Other ranks take part (rank 1) or do nothing; they get an empty Work.
Work gated_receive(Communicator& c, const std::function<void(Work&)>& attach) {
  int64_t token = 5, signal = 0;
  if (c.rank() == 0) {
    auto buf = std::make_shared<int64_t>(0);
    Work w = c.recv(buf.get(), 1, DataType::kInt64, 1, 77);
    w.on_complete([buf](std::exception_ptr) {});  // keeps the buffer until completion
    attach(w);
    c.send(&signal, 1, DataType::kInt64, 1, 78).wait();
    return w;
  }
  if (c.rank() == 1) {
    c.recv(&signal, 1, DataType::kInt64, 0, 78).wait();
    c.send(&token, 1, DataType::kInt64, 0, 77).wait();
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
int mode_callbacks_shutdown(Config cfg) {
  using namespace std::chrono_literals;
  auto c = std::make_unique<Communicator>(cfg);
  const int peer = (c->rank() + 1) % c->size();
  std::atomic<bool> slow_done{false};
  std::atomic<int> recv_code{-1};
  std::vector<int32_t> x(8, 1), y(8, 0);
  Work w = c->allreduce(x.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
  w.on_complete([&](std::exception_ptr) {
    std::this_thread::sleep_for(300ms);
    slow_done = true;
  });
  c->barrier().wait(30s);  // done while the callback above still sleeps
  Work r = c->recv(y.data(), y.size(), DataType::kInt32, peer, 0x7777);  // never sent
  r.on_complete([&](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
      recv_code = 0;
    } catch (const Error& err) {
      recv_code = static_cast<int>(err.code());
    }
  });
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
      const bool named = std::string(e.what()).find("GEOCCL_CHUNK_BYTES") != std::string::npos;
      if (e.code() != ErrorCode::kInvalidArgument || !named) {
        std::fprintf(stderr, "rank %d: wanted kInvalidArgument naming GEOCCL_CHUNK_BYTES\n", me);
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
    if (mode == "abort") return mode_abort(cfg);
    Communicator c(cfg);
    const int me = c.rank(), n = c.size();
    if (mode == "callbacks") return mode_callbacks(c);
    if (mode == "collectives") return mode_collectives(c, false);
    if (mode == "collectives-big") return mode_collectives(c, true);
    if (mode == "hier-blocks") return mode_hier_blocks(c);
    if (mode == "channels") return mode_channels(c);
    if (mode == "recv-any") return mode_recv_any(c);
    if (mode == "decider") {
      // GEOCCL_TRANSPORT remote=auto: every peer in another domain has a reason for its
      // transport that gives both candidates' figures (or says QUIC did not connect), the
      // transport is GEOCCL_TEST_EXPECT_TRANSPORT where set, and collectives are exact after the
      // switch.
      const char* expect = std::getenv("GEOCCL_TEST_EXPECT_TRANSPORT");
      const auto& dom = c.topology().domain_of;
      for (const auto& ps : c.peer_stats()) {
        if (dom[static_cast<size_t>(ps.peer)] == dom[static_cast<size_t>(me)]) continue;
        std::printf("rank %d -> %d: %s: %s\n", me, ps.peer, ps.transport.c_str(), ps.transport_choice.c_str());
        CHECK(ps.transport_choice.find("tcp") != std::string::npos && ps.transport_choice.find("quic") != std::string::npos,
              "peer %d: no decision: '%s'", ps.peer, ps.transport_choice.c_str());
        if (expect) CHECK(ps.transport == expect, "peer %d on %s, expected %s", ps.peer, ps.transport.c_str(), expect);
      }
      return mode_collectives(c, false);
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
        std::vector<float> buf((16u << 20) / 4, 1.f);
        c.allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum).wait();
        const auto& dom = c.topology().domain_of;
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
        auto a = store.get("geoccl/" + cfg.session + "/g1/addr/tcp/0", std::chrono::seconds(10));
        std::string endpoint, host;
        uint16_t port = 0;
        CHECK(transport::tcp::decode_address(a, &endpoint), "rank 0's TCP address");
        transport::tcp::split_host_port(endpoint, &host, &port);
        const int fd = transport::tcp::connect_with_timeout(host, port, std::chrono::seconds(5));
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
