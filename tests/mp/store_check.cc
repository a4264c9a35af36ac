// One rank of the external-store tests (store_mp_test.cc), started with GEOCCL_STORE set and a
// MASTER_ADDR nobody can reach, so that the group can only meet through that store.
//   allreduce:   rendezvous, then allreduces checked bit for bit.
//   rank0-dies:  the same; then rank 0 is killed (SIGKILL) after a barrier; every survivor must
//                see peer-lost, then form the next epoch (ranks 1..n-1 renumbered 0..n-2,
//                session "<session>-epoch1") through the same store and allreduce exactly again.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "check.h"
#include "geoccl/geoccl.h"

using namespace geoccl;

namespace {

// Integer-valued floats: the sum is exact in every order, so every rank must get the same bits.
void check_allreduce(Communicator& c, int iteration) {
  const int me = c.rank(), n = c.size();
  const size_t count = (8u << 20) / 4;
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; ++i)
    buf[i] = static_cast<float>((me + 1) * ((i + static_cast<size_t>(iteration)) % 97));
  c.allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum).wait();
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < count; ++i)
    CHECK(buf[i] == ranks * static_cast<float>((i + static_cast<size_t>(iteration)) % 97),
          "group of %d, iteration %d, element %zu: %g", n, iteration, i,
          static_cast<double>(buf[i]));
  std::vector<int64_t> ids(3, me);
  c.allreduce(ids.data(), ids.size(), DataType::kInt64, ReduceOp::kSum).wait();
  CHECK(ids[0] == static_cast<int64_t>(n) * (n - 1) / 2, "int64 sum %lld",
        static_cast<long long>(ids[0]));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "allreduce";
  try {
    Config cfg = Config::from_env();
    cfg.op_timeout = std::chrono::seconds(30);
    const int me = cfg.rank, n = cfg.world_size;
    {
      Communicator c(cfg);
      for (int it = 0; it < 3; ++it) check_allreduce(c, it);
      c.barrier().wait();
      if (mode == "allreduce") return g_failures ? 1 : 0;
      // The barrier ends on different ranks at different times: rank 0 dies only once every
      // other rank is past it (says so in the store), so their peer-lost comes from the
      // allreduce below, not from the barrier.
      {
        auto store = open_store(cfg.store, std::chrono::seconds(10));
        if (me != 0) {
          store->set("test/past-barrier/" + std::to_string(me), {1});
        } else {
          std::vector<std::string> keys;
          for (int r = 1; r < n; ++r) keys.push_back("test/past-barrier/" + std::to_string(r));
          store->wait(keys, std::chrono::seconds(20));
        }
      }
      if (me == 0) raise(SIGKILL);
      try {
        check_allreduce(c, 99);
        std::fprintf(stderr, "rank %d: an allreduce without rank 0 completed\n", me);
        return 1;
      } catch (const Error& e) {
        std::printf("rank %d: %s\n", me, e.what());
        CHECK(e.code() == ErrorCode::kPeerLost, "wanted peer-lost after rank 0 died");
      }
    }
    // The next epoch, without rank 0 and without the store it would have hosted.
    Config next = cfg;
    next.rank = me - 1;
    next.world_size = n - 1;
    next.session = cfg.session + "-epoch1";
    Communicator c(next);
    for (int it = 0; it < 3; ++it) check_allreduce(c, it);
    c.barrier().wait();
    std::printf("rank %d: epoch 1 formed as rank %d of %d\n", me, c.rank(), c.size());
    return g_failures ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank error: %s\n", e.what());
    return 2;
  }
}
