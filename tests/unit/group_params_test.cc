#include "membership/group_params.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "geoccl/error.h"

using namespace geoccl;
using membership::GroupParams;

namespace {

GroupParams sample() {
  Config c;
  c.chunk_bytes = 2 << 20;
  c.small_msg_bytes = 32 << 10;
  c.wan_small_msg_bytes = 4 << 20;
  c.algo = "ring";
  c.transport = "host=shm,remote=tcp";
  c.topology = "probe";
  return GroupParams::from_config(c, 4);
}

}  // namespace

TEST(GroupParams, FromConfigTakesTheSharedSettings) {
  const GroupParams p = sample();
  EXPECT_EQ(p.data_streams, 4u);
  EXPECT_EQ(p.chunk_bytes, 2u << 20);
  EXPECT_EQ(p.small_msg_bytes, 32u << 10);
  EXPECT_EQ(p.wan_small_msg_bytes, 4u << 20);
  EXPECT_EQ(p.algo, "ring");
  EXPECT_EQ(p.transport, "host=shm,remote=tcp");
  EXPECT_EQ(p.topology, "probe");
  EXPECT_EQ(p.compression, "none");
  EXPECT_EQ(p.security, "off");
  // The defaults of Config and GroupParams agree.
  EXPECT_EQ(GroupParams::from_config(Config{}, 1), GroupParams{});
  EXPECT_THROW(GroupParams::from_config(Config{}, -1), Error);
  EXPECT_THROW(GroupParams::from_config(Config{}, 65), Error);
  Config c;
  c.algo.assign(membership::kMaxParamString + 1, 'x');
  EXPECT_THROW(GroupParams::from_config(c, 1), Error);
}

TEST(GroupParams, CanonicalLittleEndianEncoding) {
  GroupParams p;
  p.data_streams = 3;
  p.algo = "rd";
  const auto b = p.encode();
  ASSERT_GE(b.size(), 6u);
  EXPECT_EQ(b[0], membership::kGroupParamsVersion);  // u16 version, low byte first
  EXPECT_EQ(b[1], 0);
  EXPECT_EQ(b[2], 3);  // u32 data streams
  EXPECT_EQ(b[5], 0);
  // 2 + 4 + 3 * 8 bytes of numbers, five strings of u32 length + bytes, two more u64, a string.
  EXPECT_EQ(b.size(), 30u + 5 * 4 + 2 + 4 + 4 + 4 + 3 + 16 + 4 + 4);
  EXPECT_EQ(b[30], 2);  // length of "rd"
  EXPECT_EQ(b[34], 'r');
}

TEST(GroupParams, RoundTripAndRejectsMalformed) {
  const GroupParams p = sample();
  const auto b = p.encode();
  auto d = GroupParams::decode(b);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, p);
  std::string why;
  // Every truncation fails, and so do trailing bytes.
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(GroupParams::decode(std::span<const uint8_t>(b).first(n))) << n;
  auto longer = b;
  longer.push_back(0);
  EXPECT_FALSE(GroupParams::decode(longer, &why));
  EXPECT_NE(why.find("trailing"), std::string::npos);
  auto other = b;
  other[0] = membership::kGroupParamsVersion + 1;
  EXPECT_FALSE(GroupParams::decode(other, &why));
  EXPECT_NE(why.find("format"), std::string::npos);
  auto too_many_streams = b;  // 0 is valid: measured per WAN peer
  too_many_streams[2] = 65;
  too_many_streams[3] = too_many_streams[4] = too_many_streams[5] = 0;
  EXPECT_FALSE(GroupParams::decode(too_many_streams, &why));
  EXPECT_NE(why.find("GEOCCL_TCP_STREAMS"), std::string::npos);
  auto huge = b;
  huge[30] = 0xff;  // length of the first string
  huge[31] = 0xff;
  EXPECT_FALSE(GroupParams::decode(huge, &why));
  EXPECT_NE(why.find("GEOCCL_ALGO"), std::string::npos);
}

TEST(GroupParams, HashIsStableAndSeesEverySetting) {
  const GroupParams p = sample();
  EXPECT_EQ(p.hash(), sample().hash());
  // FNV-1a 64 of the encoding: fixed across builds and hosts, so pinned here (computed apart
  // from this code, over the 93 bytes of the default encoding).
  EXPECT_EQ(GroupParams{}.encode().size(), 93u);
  EXPECT_EQ(GroupParams{}.hash(), 0xb64bad4599b1071eull);
  std::vector<GroupParams> variants(12, p);
  variants[0].data_streams = 5;
  variants[1].chunk_bytes += 1;
  variants[2].small_msg_bytes += 1;
  variants[3].wan_small_msg_bytes += 1;
  variants[4].algo = "tree";
  variants[5].transport = "tcp";
  variants[6].topology = "flat";
  variants[7].compression = "fp16";
  variants[8].security = "tls";
  variants[9].heartbeat_ms += 1;
  variants[10].liveness_window_ms += 1;
  variants[11].lazy_connect = "on";
  for (const auto& v : variants) EXPECT_NE(v.hash(), p.hash());
  // Length-prefixed strings: moving a byte from one string to the next changes the hash.
  GroupParams a, b;
  a.algo = "ab";
  a.transport = "c";
  b.algo = "a";
  b.transport = "bc";
  EXPECT_NE(a.hash(), b.hash());
}

TEST(GroupParams, DescribeDifferenceNamesEverySetting) {
  const GroupParams rank0 = sample();
  EXPECT_EQ(describe_difference(rank0, rank0), "");
  GroupParams mine = rank0;
  mine.chunk_bytes = 262144;
  EXPECT_EQ(describe_difference(rank0, mine), "GEOCCL_EXPERIMENT chunk: rank 0 has 2097152, this rank 262144");
  mine.algo = "auto";
  mine.data_streams = 1;
  EXPECT_EQ(describe_difference(rank0, mine),
            "GEOCCL_TCP_STREAMS: rank 0 has 4, this rank 1; "
            "GEOCCL_EXPERIMENT chunk: rank 0 has 2097152, this rank 262144; "
            "GEOCCL_ALGO: rank 0 has 'ring', this rank 'auto'");
  mine = rank0;
  mine.transport = "tcp";
  mine.topology = "auto";
  mine.small_msg_bytes = 1;
  mine.wan_small_msg_bytes = 2;
  mine.compression = "fp16";
  mine.security = "tls";
  mine.heartbeat_ms = 250;
  mine.liveness_window_ms = 3000;
  const std::string d = describe_difference(rank0, mine);
  for (const char* name : {"GEOCCL_TRANSPORT: rank 0 has 'host=shm,remote=tcp', this rank 'tcp'",
                           "GEOCCL_TOPOLOGY", "GEOCCL_EXPERIMENT small_msg: rank 0 has 32768, this rank 1",
                           "GEOCCL_EXPERIMENT wan_small_msg", "GEOCCL_WAN_COMPRESSION: rank 0 has 'none', this rank 'fp16'",
                           "security", "GEOCCL_HEARTBEAT_MS: rank 0 has 1000, this rank 250",
                           "GEOCCL_LIVENESS_WINDOW_MS: rank 0 has 10000, this rank 3000"})
    EXPECT_NE(d.find(name), std::string::npos) << name << " in " << d;
}

TEST(GroupParams, TransportSettingFromTheEnvironment) {
  Config c;
  EXPECT_EQ(c.transport, "auto");
  setenv("GEOCCL_TRANSPORT", "host=shm,remote=tcp", 1);
  c = Config::from_env();
  unsetenv("GEOCCL_TRANSPORT");
  EXPECT_EQ(c.transport, "host=shm,remote=tcp");
  c.world_size = 1;
  c.rank = 0;
  c.validate();
  for (const char* ok : {"auto", "tcp", "shm", "wan=tcp", "host=shm,lan=tcp,wan=tcp"}) {
    c.transport = ok;
    EXPECT_NO_THROW(c.validate()) << ok;
  }
  for (const char* bad : {"", "TCP", "host=", "=shm", "host=shm,", "host=shm,remote", "host=shm=tcp", "a b"}) {
    c.transport = bad;
    EXPECT_THROW(c.validate(), Error) << bad;
  }
}
