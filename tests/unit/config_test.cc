#include <gtest/gtest.h>

#include <cstdlib>

#include "geoccl/config.h"
#include "geoccl/error.h"

using namespace geoccl;

TEST(Config, EnvironmentOverridesDefaultsAndGeocclOverridesTorchrun) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("GEOCCL_RANK", "3", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("GEOCCL_CHUNK_BYTES", "2M", 1);
  setenv("GEOCCL_TIMEOUT_MS", "1500", 1);
  Config c = Config::from_env();
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.chunk_bytes, 2u << 20);
  EXPECT_EQ(c.op_timeout.count(), 1500);
  c.validate();
  for (const char* v : {"RANK", "WORLD_SIZE", "GEOCCL_RANK", "MASTER_PORT", "GEOCCL_CHUNK_BYTES", "GEOCCL_TIMEOUT_MS"})
    unsetenv(v);
}

TEST(Config, MalformedValuesAreInvalidArguments) {
  setenv("WORLD_SIZE", "four", 1);
  EXPECT_THROW(Config::from_env(), Error);
  unsetenv("WORLD_SIZE");
  Config c;
  c.world_size = 2;
  c.rank = 2;
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  c.rank = 0;
  c.algo = "magic";
  EXPECT_THROW(c.validate(), Error);
}

TEST(Config, BulkRateTakesDecimalUnits) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"0", 0}, {"250M", 250'000'000}, {"1G", 1'000'000'000}, {"1Gbit", 1'000'000'000},
      {"80Mbps", 80'000'000}, {"5000k", 5'000'000}, {"12345", 12345}};
  for (const auto& [text, want] : cases) {
    setenv("GEOCCL_BULK_RATE", text, 1);
    EXPECT_EQ(Config::from_env().bulk_rate_bps, want) << text;
  }
  for (const char* bad : {"fast", "1T", "-5M", "99999999999999999999G"}) {
    setenv("GEOCCL_BULK_RATE", bad, 1);
    EXPECT_THROW(Config::from_env(), Error) << bad;
  }
  unsetenv("GEOCCL_BULK_RATE");
  setenv("GEOCCL_BULK_TARGET_DELAY_MS", "0", 1);
  Config c = Config::from_env();
  c.world_size = 1;
  c.rank = 0;
  EXPECT_THROW(c.validate(), Error);
  unsetenv("GEOCCL_BULK_TARGET_DELAY_MS");
}

TEST(Config, StoreComesFromGeocclStore) {
  EXPECT_EQ(Config{}.store, "") << "by default rank 0 hosts the store";
  setenv("GEOCCL_STORE", "etcd://10.0.0.7:2379/jobs/42", 1);
  EXPECT_EQ(Config::from_env().store, "etcd://10.0.0.7:2379/jobs/42");
  unsetenv("GEOCCL_STORE");
}

TEST(Config, TwoHopGainIsOffOrAboveOne) {
  EXPECT_DOUBLE_EQ(Config{}.two_hop_gain, 2.0);
  const std::pair<const char*, double> cases[] = {{"0", 0}, {"1.5", 1.5}, {"3", 3}};
  for (const auto& [text, want] : cases) {
    setenv("GEOCCL_TWO_HOP_GAIN", text, 1);
    Config c = Config::from_env();
    EXPECT_DOUBLE_EQ(c.two_hop_gain, want) << text;
    c.world_size = 1;
    c.rank = 0;
    EXPECT_NO_THROW(c.validate()) << text;
  }
  for (const char* bad : {"fast", "2x", "inf"}) {
    setenv("GEOCCL_TWO_HOP_GAIN", bad, 1);
    EXPECT_THROW(Config::from_env(), Error) << bad;
  }
  for (const char* bad : {"1", "0.5", "-2"}) {
    setenv("GEOCCL_TWO_HOP_GAIN", bad, 1);
    Config c = Config::from_env();
    c.world_size = 1;
    c.rank = 0;
    EXPECT_THROW(c.validate(), Error) << bad;
  }
  unsetenv("GEOCCL_TWO_HOP_GAIN");
}
