// Rendezvous through an external store, on real processes: etcd (a real server, started here)
// and a standalone TCP store (a StoreServer in this process, as `geoccl store` runs one). The
// ranks get a MASTER_ADDR in TEST-NET (192.0.2.1, never routed), so that a rank hosting or
// looking for the store there would fail: the group can only meet through GEOCCL_STORE.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "etcd_server.h"
#include "geoccl/store.h"
#include "run_ranks.h"

using namespace geoccl;
using Clock = std::chrono::steady_clock;

namespace {

// One external store for a test: "etcd" or "tcp".
class ExternalStore : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "etcd") {
      etcd_ = std::make_unique<test::EtcdServer>();
      url_ = etcd_->url("store-mp");
    } else {
      tcp_ = std::make_unique<StoreServer>("127.0.0.1", 0);
      url_ = "tcp://127.0.0.1:" + std::to_string(tcp_->port());
    }
  }
  std::vector<std::pair<std::string, std::string>> env() const {
    return {
        {"GEOCCL_STORE", url_}, {"MASTER_ADDR", "192.0.2.1"}, {"GEOCCL_BIND_ADDR", "127.0.0.1"}};
  }
  std::unique_ptr<test::EtcdServer> etcd_;
  std::unique_ptr<StoreServer> tcp_;
  std::string url_;
};


TEST_P(ExternalStore, FourRanksRendezvousAndAllreduceBitExact) {
  const auto codes = run_ranks(4, "allreduce", 120, env());
  for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  // The group met in this store: each rank counted its group there.
  auto store = open_store(url_, std::chrono::seconds(5));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(store->add("geoccl/default/gen/" + std::to_string(r), 0), 1) << r;
}

TEST_P(ExternalStore, SurvivorsOfRankZeroFormTheNextEpochThroughTheStore) {
  const auto t0 = Clock::now();
  const auto codes = run_ranks(4, "rank0-dies", 180, env());
  EXPECT_EQ(codes[0], 128 + SIGKILL) << "rank 0 was to die by SIGKILL";
  for (size_t r = 1; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(60));
  // The store still answers, and holds the survivors' epoch: three ranks, one group each.
  auto store = open_store(url_, std::chrono::seconds(5));
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(store->add("geoccl/default-epoch1/gen/" + std::to_string(r), 0), 1) << r;
  EXPECT_FALSE(store->check("geoccl/default-epoch1/gen/3"));
}

INSTANTIATE_TEST_SUITE_P(Backends, ExternalStore, ::testing::Values("etcd", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

}  // namespace
