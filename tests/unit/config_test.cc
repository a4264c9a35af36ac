#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "geoccl/config.h"
#include "geoccl/error.h"

using namespace geoccl;

TEST(Config, EnvironmentOverridesDefaultsAndGeocclOverridesTorchrun) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("GEOCCL_RANK", "3", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("GEOCCL_EXPERIMENT", "chunk=2M", 1);
  setenv("GEOCCL_TIMEOUT_MS", "1500", 1);
  Config c = Config::from_env();
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.master_port, 1234);
  EXPECT_EQ(c.chunk_bytes, 2u << 20);
  EXPECT_EQ(c.op_timeout.count(), 1500);
  c.validate();
  for (const char* v : {"RANK", "WORLD_SIZE", "GEOCCL_RANK", "MASTER_PORT", "GEOCCL_EXPERIMENT",
                        "GEOCCL_TIMEOUT_MS"})
    unsetenv(v);
}

// An outage shorter than the operation deadline is ridden out unless the user bounds it: the
// resume timeout follows GEOCCL_TIMEOUT_MS until GEOCCL_TCP_RESUME_TIMEOUT_MS is set.
TEST(Config, ResumeTimeoutFollowsTheOperationDeadlineUnlessSet) {
  Config c;
  EXPECT_EQ(c.resume_timeout(), c.op_timeout);
  setenv("GEOCCL_TIMEOUT_MS", "90000", 1);
  c = Config::from_env();
  EXPECT_EQ(c.resume_timeout().count(), 90000);
  setenv("GEOCCL_TCP_RESUME_TIMEOUT_MS", "8000", 1);
  c = Config::from_env();
  EXPECT_EQ(c.resume_timeout().count(), 8000);
  EXPECT_EQ(c.op_timeout.count(), 90000);
  setenv("GEOCCL_TCP_RESUME_TIMEOUT_MS", "-1", 1);
  c = Config::from_env();
  EXPECT_THROW(c.validate(), Error);
  unsetenv("GEOCCL_TCP_RESUME_TIMEOUT_MS");
  unsetenv("GEOCCL_TIMEOUT_MS");
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
  setenv("GEOCCL_EXPERIMENT", "bulk_delay_ms=0", 1);
  Config c = Config::from_env();
  c.world_size = 1;
  c.rank = 0;
  EXPECT_THROW(c.validate(), Error);
  unsetenv("GEOCCL_EXPERIMENT");
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
    setenv("GEOCCL_EXPERIMENT", (std::string("two_hop_gain=") + text).c_str(), 1);
    Config c = Config::from_env();
    EXPECT_DOUBLE_EQ(c.two_hop_gain, want) << text;
    c.world_size = 1;
    c.rank = 0;
    EXPECT_NO_THROW(c.validate()) << text;
  }
  for (const char* bad : {"fast", "2x", "inf"}) {
    setenv("GEOCCL_EXPERIMENT", (std::string("two_hop_gain=") + bad).c_str(), 1);
    EXPECT_THROW(Config::from_env(), Error) << bad;
  }
  for (const char* bad : {"1", "0.5", "-2"}) {
    setenv("GEOCCL_EXPERIMENT", (std::string("two_hop_gain=") + bad).c_str(), 1);
    Config c = Config::from_env();
    c.world_size = 1;
    c.rank = 0;
    EXPECT_THROW(c.validate(), Error) << bad;
  }
  unsetenv("GEOCCL_EXPERIMENT");
}

namespace {

// Sets one variable for the scope of a test and unsets it after, also when an expectation fails.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

// The error of Config::from_env() (and validate(), with a one-rank world), "" when there is none.
std::string config_error() {
  try {
    Config c = Config::from_env();
    c.world_size = 1;
    c.rank = 0;
    c.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

// Every GEOCCL_EXPERIMENT key, each with a value other than its default.
constexpr const char* kEveryKey =
    "chunk=512K,small_msg=16K,wan_small_msg=64K,plan_probe=4M,replan_ops=5,replan_persist=3,"
    "two_hop_gain=1.5,compression_min=1M,stripe=wide,resume=on,lazy_connect=on,stall_ms=10000,relay_after_ms=2000,"
    "tcp_cc=cubic,tcp_buf=8M,notsent_lowat=0,zerocopy=1,zerocopy_min=64K,bulk_delay_ms=20,"
    "shm_ring=1M,quic_cc=cubic,quic_window=16M,quic_duplicate=0,quic_0rtt=0,quic_redial_ms=500,"
    "quic_connect_ms=2000,transport_probe=4M";

}  // namespace

TEST(Config, ExperimentSetsTheFieldOfEveryKey) {
  ScopedEnv e("GEOCCL_EXPERIMENT", kEveryKey);
  Config c = Config::from_env();
  EXPECT_EQ(c.chunk_bytes, 512u << 10);
  EXPECT_EQ(c.small_msg_bytes, 16u << 10);
  EXPECT_EQ(c.wan_small_msg_bytes, 64u << 10);
  EXPECT_EQ(c.plan_probe_bytes, 4u << 20);
  EXPECT_EQ(c.replan_ops, 5);
  EXPECT_EQ(c.replan_persist, 3);
  EXPECT_DOUBLE_EQ(c.two_hop_gain, 1.5);
  EXPECT_EQ(c.wan_compression_min_bytes, 1u << 20);
  EXPECT_EQ(c.tcp_stripe, "wide");
  EXPECT_EQ(c.tcp_resume, "on");
  EXPECT_EQ(c.lazy_connect, "on");
  EXPECT_EQ(c.tcp_stall_timeout.count(), 10000);
  EXPECT_EQ(c.relay_after.count(), 2000);
  EXPECT_EQ(c.tcp_cc, "cubic");
  EXPECT_EQ(c.tcp_buf_bytes, 8 << 20);
  EXPECT_EQ(c.tcp_notsent_lowat, 0);
  EXPECT_TRUE(c.tcp_zerocopy);
  EXPECT_EQ(c.tcp_zerocopy_min_bytes, 64u << 10);
  EXPECT_EQ(c.bulk_target_delay.count(), 20);
  EXPECT_EQ(c.shm_ring_bytes, 1u << 20);
  EXPECT_EQ(c.quic_cc, "cubic");
  EXPECT_EQ(c.quic_window_bytes, 16u << 20);
  EXPECT_EQ(c.quic_duplicate_bytes, 0u);
  EXPECT_FALSE(c.quic_zero_rtt);
  EXPECT_EQ(c.quic_redial_after.count(), 500);
  EXPECT_EQ(c.quic_connect_budget.count(), 2000);
  EXPECT_EQ(c.transport_probe_bytes, 4u << 20);
  c.world_size = 1;
  c.rank = 0;
  EXPECT_NO_THROW(c.validate());
}

// The unknown-key error lists the known keys: each must be one kEveryKey sets (a key added to
// the table without a test here fails).
TEST(Config, ExperimentUnknownKeyListsEveryKnownKey) {
  ScopedEnv e("GEOCCL_EXPERIMENT", "chunk=1M,strpe=wide");
  const std::string err = config_error();
  EXPECT_NE(err.find("GEOCCL_EXPERIMENT"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown key 'strpe'"), std::string::npos) << err;
  const size_t at = err.find("known keys: ");
  ASSERT_NE(at, std::string::npos) << err;
  std::string list = err.substr(at + 12);
  ASSERT_FALSE(list.empty());
  list.pop_back();  // the closing parenthesis
  const std::string every = std::string(",") + kEveryKey;
  std::stringstream keys(list);
  int n = 0;
  for (std::string key; std::getline(keys, key, ',');) {
    if (key.starts_with(" ")) key.erase(0, 1);
    EXPECT_NE(every.find("," + key + "="), std::string::npos) << key << " is not tested";
    ++n;
  }
  EXPECT_EQ(n, 27) << list;
}

TEST(Config, ExperimentMalformedItemsAreInvalidArguments) {
  for (const char* bad : {"stripe", "=wide", "stripe=", "chunk=1M,,stripe=wide", "chunk=1M,",
                          ",chunk=1M", "chunk:1M"}) {
    ScopedEnv e("GEOCCL_EXPERIMENT", bad);
    const std::string err = config_error();
    EXPECT_NE(err.find("GEOCCL_EXPERIMENT: "), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("is not key=value"), std::string::npos) << bad << ": " << err;
    EXPECT_NE(err.find("known keys: chunk, "), std::string::npos) << bad << ": " << err;
  }
}

// A value the key's parser refuses, or one out of range, names GEOCCL_EXPERIMENT and the key.
TEST(Config, ExperimentBadValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"chunk=big", "GEOCCL_EXPERIMENT chunk='big' is not a valid size"},
      {"chunk=99999999999G", "GEOCCL_EXPERIMENT chunk='99999999999G' is not a valid size"},
      {"chunk=1K", "GEOCCL_EXPERIMENT chunk must be >= 4096"},
      {"stall_ms=soon", "GEOCCL_EXPERIMENT stall_ms='soon' is not a valid integer"},
      {"stall_ms=-1", "GEOCCL_EXPERIMENT stall_ms must be >= 0"},
      {"two_hop_gain=2x", "GEOCCL_EXPERIMENT two_hop_gain='2x' is not a valid number"},
      {"stripe=random", "GEOCCL_EXPERIMENT stripe must be backlog, wide or rr, got 'random'"},
      {"resume=maybe", "GEOCCL_EXPERIMENT resume must be auto, on or off"},
      {"lazy_connect=yes", "GEOCCL_EXPERIMENT lazy_connect must be auto, on or off"},
      {"tcp_buf=lots", "GEOCCL_EXPERIMENT tcp_buf='lots' is not a valid size"},
      {"quic_cc=vegas", "GEOCCL_EXPERIMENT quic_cc must be cubic, bbr, bbr2 or reno"},
      {"plan_probe=4M,replan_persist=0", "GEOCCL_EXPERIMENT replan_persist must be >= 1"},
  };
  for (const auto& [spec, want] : cases) {
    ScopedEnv e("GEOCCL_EXPERIMENT", spec);
    const std::string err = config_error();
    EXPECT_NE(err.find(want), std::string::npos) << spec << ": " << err;
  }
}

TEST(Config, ExperimentLaterKeyWinsAndExplicitFieldsStay) {
  EXPECT_EQ(Config::from_env().chunk_bytes, Config{}.chunk_bytes) << "unset: the default";
  ScopedEnv e("GEOCCL_EXPERIMENT", "chunk=1M,stripe=rr,chunk=2M");
  const Config c = Config::from_env();
  EXPECT_EQ(c.chunk_bytes, 2u << 20);
  EXPECT_EQ(c.tcp_stripe, "rr");
  EXPECT_EQ(c.tcp_stall_timeout.count(), Config{}.tcp_stall_timeout.count()) << "not named";
}

// A variable that was replaced by a GEOCCL_EXPERIMENT key is refused while it is still set, with
// the spelling that replaces it, so that nobody loses a setting silently. The list is every
// variable that went.
TEST(Config, RemovedVariablesNameTheirExperimentKey) {
  const std::pair<const char*, const char*> moved[] = {
      {"GEOCCL_CHUNK_BYTES", "chunk"},
      {"GEOCCL_SMALL_MSG_BYTES", "small_msg"},
      {"GEOCCL_WAN_SMALL_MSG_BYTES", "wan_small_msg"},
      {"GEOCCL_PLAN_PROBE_BYTES", "plan_probe"},
      {"GEOCCL_REPLAN_OPS", "replan_ops"},
      {"GEOCCL_REPLAN_PERSIST", "replan_persist"},
      {"GEOCCL_TWO_HOP_GAIN", "two_hop_gain"},
      {"GEOCCL_WAN_COMPRESSION_MIN_BYTES", "compression_min"},
      {"GEOCCL_TCP_STRIPE", "stripe"},
      {"GEOCCL_TCP_RESUME", "resume"},
      {"GEOCCL_TCP_STALL_MS", "stall_ms"},
      {"GEOCCL_RELAY_AFTER_MS", "relay_after_ms"},
      {"GEOCCL_TCP_CC", "tcp_cc"},
      {"GEOCCL_TCP_BUF_BYTES", "tcp_buf"},
      {"GEOCCL_TCP_NOTSENT_LOWAT", "notsent_lowat"},
      {"GEOCCL_TCP_ZEROCOPY", "zerocopy"},
      {"GEOCCL_TCP_ZEROCOPY_MIN", "zerocopy_min"},
      {"GEOCCL_BULK_TARGET_DELAY_MS", "bulk_delay_ms"},
      {"GEOCCL_SHM_RING_BYTES", "shm_ring"},
      {"GEOCCL_QUIC_CC", "quic_cc"},
      {"GEOCCL_QUIC_WINDOW_BYTES", "quic_window"},
      {"GEOCCL_QUIC_DUPLICATE_BYTES", "quic_duplicate"},
      {"GEOCCL_QUIC_0RTT", "quic_0rtt"},
      {"GEOCCL_QUIC_REDIAL_MS", "quic_redial_ms"},
      {"GEOCCL_QUIC_CONNECT_MS", "quic_connect_ms"},
      {"GEOCCL_TRANSPORT_PROBE_BYTES", "transport_probe"},
  };
  for (const auto& [var, key] : moved) {
    ScopedEnv e(var, "7");
    const std::string err = config_error();
    EXPECT_NE(err.find(std::string(var) + " is no longer read"), std::string::npos) << err;
    EXPECT_NE(err.find(std::string("GEOCCL_EXPERIMENT=") + key + "=7 "), std::string::npos) << err;
  }
  // Refused even beside a GEOCCL_EXPERIMENT that sets the same key: the two could disagree.
  ScopedEnv e("GEOCCL_EXPERIMENT", "stripe=wide");
  ScopedEnv old("GEOCCL_TCP_STRIPE", "wide");
  EXPECT_NE(config_error().find("GEOCCL_TCP_STRIPE is no longer read"), std::string::npos);
}
