// The WAN compression settings (Compression::parse/name, GEOCCL_WAN_COMPRESSION), the
// error-feedback store and kernels, and the choice of form per codec and domain count.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <vector>

#include "collectives/wan_codec.h"
#include "compression/error_feedback.h"
#include "geoccl/compression.h"
#include "geoccl/config.h"
#include "geoccl/error.h"

namespace geoccl {
namespace {

TEST(WanCompression, SpellingsRoundTrip) {
  for (const char* s : {"none", "fp16", "bf16", "int8", "int4", "topk:0.01", "topk:1", "int8@ring",
                        "int4@allgather", "topk:0.25@ring", "int2", "int2-sr", "int2-sr@ring",
                        "topk-int8:0.01", "topk-int4:0.5", "topk-int2:1@allgather"}) {
    const Compression z = Compression::parse(s);
    EXPECT_EQ(z.name(), s);
    EXPECT_EQ(Compression::parse(z.name()), z);
  }
  EXPECT_EQ(Compression::parse("topk:0.01").codec, Codec::kTopK);
  EXPECT_DOUBLE_EQ(Compression::parse("topk:0.01").topk_ratio, 0.01);
  EXPECT_EQ(Compression::parse("int2").codec, Codec::kInt2);
  EXPECT_EQ(Compression::parse("int2-sr").codec, Codec::kInt2Sr);
  EXPECT_EQ(Compression::parse("topk-int8:0.05").codec, Codec::kTopKInt8);
  EXPECT_EQ(Compression::parse("topk-int4:0.05").codec, Codec::kTopKInt4);
  EXPECT_EQ(Compression::parse("topk-int2:0.05").codec, Codec::kTopKInt2);
  EXPECT_DOUBLE_EQ(Compression::parse("topk-int2:0.05").topk_ratio, 0.05);
  EXPECT_TRUE(Compression::parse("topk-int4:0.05").is_topk());
  EXPECT_FALSE(Compression::parse("int2-sr").is_topk());
  EXPECT_EQ(Compression::parse("int8@ring").algo, CompressedAlgo::kRing);
  EXPECT_EQ(Compression::parse("int8@auto").name(), "int8");
  EXPECT_FALSE(Compression::parse("off").enabled());
  EXPECT_TRUE(Compression::parse("fp16").enabled());
}

TEST(WanCompression, BadSpellingsAreInvalidArgument) {
  for (const char* s :
       {"int9", "topk", "topk:0", "topk:1.5", "topk:-0.1", "topk:x", "topk:0.1x", "topk:nan",
        "int8@tree", "none@ring", "FP16", "int8@", "int2sr", "int2-sr:0.1", "topk-int8",
        "topk-int3:0.1", "topk-int8:0", "topk-int2:2", "topk-:0.1"}) {
    try {
      (void)Compression::parse(s);
      ADD_FAILURE() << s << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << s;
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
    }
  }
}

TEST(WanCompression, ConfigTakesAndChecksTheVariable) {
  ::setenv("GEOCCL_WAN_COMPRESSION", "topk:0.05@ring", 1);
  ::setenv("GEOCCL_EXPERIMENT", "compression_min=1M", 1);
  Config c = Config::from_env();
  EXPECT_EQ(c.wan_compression, "topk:0.05@ring");
  EXPECT_EQ(c.wan_compression_min_bytes, size_t{1} << 20);
  c.rank = 0;
  c.world_size = 1;
  EXPECT_NO_THROW(c.validate());
  c.wan_compression = "int3";
  EXPECT_THROW(c.validate(), Error);
  ::unsetenv("GEOCCL_WAN_COMPRESSION");
  ::unsetenv("GEOCCL_EXPERIMENT");
}

TEST(WanCompression, FormPerCodecAndDomainCount) {
  collectives::WanCompression w;
  w.spec.codec = compression::CodecId::kInt8;
  EXPECT_EQ(w.resolve(2), CompressedAlgo::kAllgather);
  EXPECT_EQ(w.resolve(3), CompressedAlgo::kRing);
  w.spec.codec = compression::CodecId::kTopK;
  EXPECT_EQ(w.resolve(4), CompressedAlgo::kAllgather);
  w.spec.codec = compression::CodecId::kTopKInt2;  // every top-k form
  EXPECT_EQ(w.resolve(4), CompressedAlgo::kAllgather);
  w.spec.codec = compression::CodecId::kInt2Sr;
  EXPECT_EQ(w.resolve(3), CompressedAlgo::kRing);
  w.algo = CompressedAlgo::kRing;
  EXPECT_EQ(w.resolve(2), CompressedAlgo::kRing);  // an explicit form is kept
}

TEST(WanCompression, StochasticRoundingSeededPerEncoding) {
  using collectives::wan_codec::seeded;
  const compression::CodecSpec sr{compression::CodecId::kInt2Sr, 0, 0};
  const uint32_t s = seeded(sr, 7, 2, 4096).seed;
  EXPECT_EQ(seeded(sr, 7, 2, 4096).seed, s);  // the same encoding of a rerun: the same bytes
  EXPECT_NE(seeded(sr, 8, 2, 4096).seed, s);  // the next operation
  EXPECT_NE(seeded(sr, 7, 3, 4096).seed, s);  // another rank
  EXPECT_NE(seeded(sr, 7, 2, 8192).seed, s);  // another chunk of the stream
  EXPECT_NE(seeded({compression::CodecId::kInt2Sr, 0, 1}, 7, 2, 4096).seed, s);
  const compression::CodecSpec nearest{compression::CodecId::kInt2, 0, 0};
  EXPECT_EQ(seeded(nearest, 7, 2, 4096).seed, 0u);  // deterministic codecs: unchanged
  const compression::CodecSpec topk{compression::CodecId::kTopKInt4, 655, 0};
  EXPECT_EQ(seeded(topk, 7, 2, 4096).k, 655u);
  EXPECT_EQ(seeded(topk, 7, 2, 4096).seed, 0u);
}

TEST(ErrorFeedback, StoreKeepsResidualsPerKeyAndShape) {
  compression::FeedbackStore s;
  auto a = s.get("a", 100, 1);
  ASSERT_EQ(a.size(), 100u);
  for (float v : a) EXPECT_EQ(v, 0.0f);
  a[3] = 2.5f;
  EXPECT_EQ(s.get("a", 100, 1)[3], 2.5f);  // the same residual next time
  EXPECT_EQ(s.get("a", 100, 2)[3], 0.0f);  // another layout starts afresh
  s.get("a", 100, 2)[4] = 1.0f;
  EXPECT_EQ(s.get("a", 50, 2).size(), 50u);  // another count too
  EXPECT_EQ(s.get("a", 50, 2)[4], 0.0f);
  s.get("b", 10, 1);
  EXPECT_EQ(s.keys(), 2u);
  EXPECT_EQ(s.bytes(), (50u + 10u) * sizeof(float));
  s.forget("a");
  EXPECT_EQ(s.keys(), 1u);
  s.forget_all();
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(ErrorFeedback, KernelsAddAndStore) {
  std::vector<float> x = {1, 2, 3, 4, 5}, r = {0.5f, -1, 0, 0.25f, 2}, d = {1, 1, 1, 1, 1};
  compression::add_residual(x, r);
  EXPECT_EQ(x, (std::vector<float>{1.5f, 1, 3, 4.25f, 7}));
  compression::store_residual(x, d, r);
  EXPECT_EQ(r, (std::vector<float>{0.5f, 0, 2, 3.25f, 6}));
  std::vector<float> shorter(4);
  EXPECT_THROW(compression::add_residual(x, shorter), Error);
  EXPECT_THROW(compression::store_residual(x, d, shorter), Error);
}

// One encoding with feedback: the stored residual is exactly what the codec dropped, so input +
// old residual == decoded + new residual, element for element.
TEST(ErrorFeedback, EncodeChunkKeepsWhatTheCodecDropped) {
  std::vector<float> x(3000), res(3000, 0.125f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
  std::vector<float> in = x;
  for (size_t i = 0; i < in.size(); ++i) in[i] += res[i];
  compression::CodecSpec spec{compression::CodecId::kInt4, 0};
  std::vector<uint8_t> out(compression::encoded_size(spec, x.size()));
  collectives::CompressionCounters n;
  collectives::wan_codec::encode_chunk(spec, x, res, out, &n);
  std::vector<float> dec(x.size());
  compression::decode(out, dec);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dec[i] + res[i], in[i]) << i;
  EXPECT_EQ(n.elements.load(), x.size());
  EXPECT_EQ(n.bytes.load(), out.size());
}

}  // namespace
}  // namespace geoccl
