#include <gtest/gtest.h>

#include <thread>

#include "geoccl/error.h"
#include "geoccl/store.h"

using namespace geoccl;
using namespace std::chrono_literals;

TEST(Store, SetGetAddDeleteCheck) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  c.set("a", {1, 2});
  EXPECT_EQ(c.get("a", 1s), (std::vector<uint8_t>{1, 2}));
  EXPECT_TRUE(c.check("a"));
  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -2), 3);
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  EXPECT_FALSE(c.check("a"));
}

TEST(Store, GetWaitsForALaterSet) {
  StoreServer server("127.0.0.1", 0);
  StoreClient reader("127.0.0.1", server.port(), 5s);
  std::thread writer([&] {
    StoreClient w("127.0.0.1", server.port(), 5s);
    std::this_thread::sleep_for(50ms);
    w.set("late", {7});
  });
  EXPECT_EQ(reader.get("late", 5s), (std::vector<uint8_t>{7}));
  writer.join();
  reader.wait({"late"}, 1s);
}

TEST(Store, GetTimesOutWithTypedError) {
  StoreServer server("127.0.0.1", 0);
  StoreClient c("127.0.0.1", server.port(), 5s);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.get("never", 200ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  // The connection stays usable after a timed-out get.
  c.set("k", {1});
  EXPECT_TRUE(c.check("k"));
}

TEST(Store, ConnectTimesOutWhenNoServer) {
  int port;
  {
    StoreServer s("127.0.0.1", 0);
    port = s.port();
  }
  try {
    StoreClient c("127.0.0.1", static_cast<uint16_t>(port), 300ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
}

TEST(Store, ManyClientsCountTogether) {
  StoreServer server("127.0.0.1", 0);
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&] {
      StoreClient c("127.0.0.1", server.port(), 5s);
      for (int k = 0; k < 50; ++k) c.add("ctr", 1);
    });
  for (auto& t : ts) t.join();
  StoreClient c("127.0.0.1", server.port(), 5s);
  EXPECT_EQ(c.add("ctr", 0), 400);
}
