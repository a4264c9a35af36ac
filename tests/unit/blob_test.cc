// The blob layer's pure parts: codecs, hashes, the codec chooser, the link meter, the wire format
// of headers and window descriptors, the resume state, the agreement rules, and a file
// destination resuming from a part file (a temporary folder; no sockets).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "blob/agreement.h"
#include "blob/chooser.h"
#include "blob/codec.h"
#include "blob/codec_sampler.h"
#include "blob/descriptor.h"
#include "blob/file_destination.h"
#include "blob/link_meter.h"
#include "blob/resume_state.h"
#include "blob/test_hooks.h"
#include "collectives/planner.h"

using namespace geoccl;
using namespace geoccl::blob;

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

// Half repetitive text, half noise: compressible, but not trivially.
std::vector<uint8_t> mixed_bytes(size_t n) {
  auto v = random_bytes(n, 7);
  const char* text = "layer4.1.conv2.weight running_mean ";
  for (size_t i = 0; i < n / 2; ++i) v[i] = static_cast<uint8_t>(text[i % 35]);
  return v;
}

constexpr double kMB = 1e6;

}  // namespace

TEST(BlobCodec, EveryCodecRoundTripsAndRejectsGarbage) {
  const auto data = mixed_bytes(1 << 20);
  for (CodecChoice c : {CodecChoice{blob::Codec::kNone, 0}, CodecChoice{blob::Codec::kLz4, 0},
                        CodecChoice{blob::Codec::kZstd, 1}, CodecChoice{blob::Codec::kZstd, 19}}) {
    std::vector<uint8_t> wire(compress_bound(c.codec, data.size()));
    const size_t n = compress(c, data, wire);
    ASSERT_GT(n, 0u) << codec_name(c.codec);
    if (c.codec != blob::Codec::kNone) {
      EXPECT_LT(n, data.size() * 3 / 4) << codec_name(c.codec);
    }
    wire.resize(n);
    std::vector<uint8_t> back(data.size());
    ASSERT_TRUE(decompress(c.codec, wire, back)) << codec_name(c.codec);
    EXPECT_EQ(back, data);
    EXPECT_EQ(xxh3(back), xxh3(data));
    // A short output buffer or a truncated input is refused, never overrun.
    std::vector<uint8_t> small(data.size() - 1);
    EXPECT_FALSE(decompress(c.codec, wire, small)) << codec_name(c.codec);
    if (c.codec != blob::Codec::kNone) {
      EXPECT_FALSE(decompress(c.codec, std::span(wire).first(n / 2), back)) << codec_name(c.codec);
      const auto noise = random_bytes(4096, 3);
      EXPECT_FALSE(decompress(c.codec, noise, back)) << codec_name(c.codec);
    }
  }
  EXPECT_NE(xxh3(random_bytes(64, 1)), xxh3(random_bytes(64, 2)));
  EXPECT_EQ(parse_codec("zstd", 3), (CodecChoice{blob::Codec::kZstd, 3}));
  EXPECT_FALSE(parse_codec("zstd", 0));
  EXPECT_FALSE(parse_codec("gzip", 1));
}

TEST(BlobChooser, ZstdNineteenLosesOnTenGigabitAndLz4WinsOnASlowLink) {
  const double ten_gbit = 10e9 / 8, hundred_mbit = 100e6 / 8;
  // Typical figures: lz4 700 MB/s at 1.6x; zstd-1 400 MB/s at 2x; zstd-19 3 MB/s at 2.6x.
  const CodecSample lz4{{blob::Codec::kLz4, 0}, 700 * kMB, 3000 * kMB, 1.6};
  const CodecSample z1{{blob::Codec::kZstd, 1}, 400 * kMB, 1200 * kMB, 2.0};
  const CodecSample z19{{blob::Codec::kZstd, 19}, 3 * kMB, 1200 * kMB, 2.6};
  EXPECT_EQ(choose_codec(ten_gbit, std::vector{z19}), (CodecChoice{blob::Codec::kNone, 0}));
  EXPECT_EQ(choose_codec(ten_gbit, std::vector{lz4, z1, z19}), (CodecChoice{blob::Codec::kNone, 0}));
  // 100 Mbit/s: zstd-1 moves 25 MB/s of raw data, lz4 20 MB/s, zstd-19 only its 3 MB/s.
  EXPECT_EQ(choose_codec(hundred_mbit, std::vector{lz4, z1, z19}), (CodecChoice{blob::Codec::kZstd, 1}));
  EXPECT_EQ(choose_codec(hundred_mbit, std::vector{lz4, z19}), (CodecChoice{blob::Codec::kLz4, 0}));
  EXPECT_DOUBLE_EQ(pipeline_rate(z19, hundred_mbit), 3 * kMB);
  EXPECT_DOUBLE_EQ(pipeline_rate(z1, hundred_mbit), 25 * kMB);
  // 1 Gbit/s = 125 MB/s: lz4 200 MB/s, zstd-1 250 MB/s (both limited by the link, not the CPU).
  EXPECT_EQ(choose_codec(1e9 / 8, std::vector{lz4, z1}), (CodecChoice{blob::Codec::kZstd, 1}));
  // Decompression can be the bottleneck too.
  const CodecSample slow_decode{{blob::Codec::kZstd, 3}, 500 * kMB, 20 * kMB, 3.0};
  EXPECT_EQ(choose_codec(hundred_mbit, std::vector{slow_decode}), (CodecChoice{blob::Codec::kZstd, 3}));
  EXPECT_EQ(choose_codec(50 * kMB, std::vector{slow_decode}), (CodecChoice{blob::Codec::kNone, 0}));
}

TEST(BlobChooser, MarginUnknownLinkAndBadSamplesStayRaw) {
  const CodecSample barely{{blob::Codec::kLz4, 0}, 900 * kMB, 900 * kMB, 1.05};  // fp32 weights
  EXPECT_EQ(choose_codec(100 * kMB, std::vector{barely}), (CodecChoice{blob::Codec::kNone, 0}));
  EXPECT_EQ(choose_codec(100 * kMB, std::vector{barely}, 1.0), (CodecChoice{blob::Codec::kLz4, 0}));
  const CodecSample good{{blob::Codec::kLz4, 0}, 900 * kMB, 900 * kMB, 4};
  EXPECT_EQ(choose_codec(0, std::vector{good}), (CodecChoice{blob::Codec::kNone, 0}));
  EXPECT_EQ(choose_codec(-1, std::vector{good}), (CodecChoice{blob::Codec::kNone, 0}));
  auto nan = good;
  nan.ratio = std::nan("");
  auto failed = good;
  failed.ratio = 0;
  EXPECT_EQ(choose_codec(10 * kMB, std::vector{nan, failed}), (CodecChoice{blob::Codec::kNone, 0}));
  EXPECT_EQ(choose_codec(10 * kMB, std::vector{nan, good}), (CodecChoice{blob::Codec::kLz4, 0}));
}

TEST(BlobChooser, SamplerMeasuresEveryCandidate) {
  const auto text = mixed_bytes(256 << 10);
  const auto noise = random_bytes(256 << 10, 9);
  const auto a = sample_codecs(text, auto_candidates());
  const auto b = sample_codecs(noise, auto_candidates());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GT(a[i].ratio, 1.5);
    EXPECT_LT(b[i].ratio, 1.01);
    EXPECT_GT(a[i].compress_bytes_per_s, 0);
    EXPECT_GT(a[i].decompress_bytes_per_s, 0);
  }
  // Noise never compresses, whatever the link.
  EXPECT_EQ(choose_codec(1 * kMB, b), (CodecChoice{blob::Codec::kNone, 0}));
}

TEST(BlobLinkMeter, CountsOnlyTheTimeTheLinkWasBusy) {
  using namespace std::chrono_literals;
  LinkMeter m;
  const LinkMeter::Time t0{};
  EXPECT_EQ(m.bytes_per_s(), 0);
  m.record(t0, t0 + 10ms, 1'000'000);         // 10 ms busy
  m.record(t0 + 1ms, t0 + 20ms, 1'000'000);   // queued behind it: 10 ms from the first's end
  m.record(t0 + 50ms, t0 + 60ms, 1'000'000);  // issued late (root compressing): 10 ms, not 40
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 3'000'000 / 0.030);
  EXPECT_EQ(m.bytes(), 3'000'000u);
}

TEST(BlobDescriptor, HeaderRoundTripsAndRejectsInconsistentFields) {
  ObjectHeader h{10'000'000, 0x1234'5678'9abc'def0ull, 4u << 20, 8, 3};
  const auto b = encode_header(h);
  ASSERT_EQ(b.size(), kObjectHeaderBytes);
  ObjectHeader back;
  ASSERT_TRUE(decode_header(b, &back));
  EXPECT_EQ(back, h);
  EXPECT_EQ(b[0], 'G');  // little-endian magic "GCBH"
  EXPECT_EQ(b[8], static_cast<uint8_t>(10'000'000 & 0xff));
  auto bad = [&](auto edit) {
    auto c = b;
    edit(c);
    ObjectHeader x;
    return !decode_header(c, &x);
  };
  EXPECT_TRUE(bad([](auto& c) { c[0] ^= 1; }));  // magic
  EXPECT_TRUE(bad([](auto& c) { c[4] = 2; }));   // version
  EXPECT_TRUE(bad([](auto& c) { c[32] = 4; }));  // chunk_count != ceil(size/chunk)
  EXPECT_TRUE(bad([](auto& c) {
    c[24] = 0;
    c[25] = 0;
    c[26] = 0;
    c[27] = 0;
  }));                                              // chunk_bytes 0
  EXPECT_TRUE(bad([](auto& c) { c[28] = 65; }));    // window too large
  EXPECT_TRUE(bad([](auto& c) { c[63] = 1; }));     // padding
  EXPECT_TRUE(bad([](auto& c) { c.pop_back(); }));  // length
  EXPECT_EQ(chunk_count(0, 4096), 0u);
  EXPECT_EQ(chunk_count(8192, 4096), 2u);
  EXPECT_EQ(chunk_count(8193, 4096), 3u);
  EXPECT_EQ(chunk_raw_bytes(8193, 4096, 2), 1u);
  EXPECT_EQ(chunk_raw_bytes(8193, 4096, 3), 0u);
}

TEST(BlobDescriptor, WindowRoundTripsAtFullSizeAndRejectsBadEntries) {
  const uint32_t chunk = 1u << 20;
  ObjectHeader h{5 * uint64_t{chunk} + 100, 1, chunk, 4, 6};
  WindowDescriptor d{
      2, 1, {{1, {blob::Codec::kLz4, 0}, chunk, 1000, 0xabc}, {5, {blob::Codec::kNone, 0}, 100, 100, 0xdef}}};
  const auto b = encode_window(d, h.window_chunks);
  ASSERT_EQ(b.size(), window_descriptor_bytes(4));
  ASSERT_EQ(b.size(), 24u + 4 * 24u);
  WindowDescriptor back;
  ASSERT_TRUE(decode_window(b, h, &back));
  EXPECT_EQ(back, d);
  auto rejects = [&](WindowDescriptor x) {
    WindowDescriptor y;
    return !decode_window(encode_window(x, 4), h, &y);
  };
  auto x = d;
  x.entries[1].chunk = 6;  // past the end
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries[1].chunk = 1;  // not increasing
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries[0].raw_bytes = chunk - 1;  // not that chunk's size
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries[1].wire_bytes = 99;  // raw chunk of another size
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries[0].wire_bytes = 0;
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries[0].codec.codec = static_cast<blob::Codec>(7);
  EXPECT_TRUE(rejects(x));
  x = d;
  x.entries.clear();
  EXPECT_TRUE(rejects(x));
  WindowDescriptor y;
  EXPECT_FALSE(decode_window(encode_window(d, 5), h, &y));  // a window of another size
  auto c = b;
  c.back() = 1;  // padding
  EXPECT_FALSE(decode_window(c, h, &y));
}

TEST(BlobResumeState, RoundTripsAndRejectsTamperedOrInconsistentState) {
  ResumeState s{3 * (64u << 10) + 5, 0x77, 64u << 10, {1, 0, 1, 1}, {11, 0, 33, 44}};
  const auto b = encode_resume_state(s);
  EXPECT_EQ(b.size(), 32u + 1 + 4 * 8 + 8);
  ResumeState back;
  ASSERT_TRUE(decode_resume_state(b, &back));
  EXPECT_EQ(back, s);
  for (size_t i = 0; i < b.size(); ++i) {
    auto c = b;
    c[i] ^= 0x10;
    ResumeState x;
    EXPECT_FALSE(decode_resume_state(c, &x)) << "byte " << i;
  }
  ResumeState x;
  EXPECT_FALSE(decode_resume_state(std::span(b).first(b.size() - 1), &x));
  auto wrong = s;
  wrong.verified.push_back(0);  // five chunks for an object of four
  wrong.chunk_hash.push_back(0);
  EXPECT_FALSE(decode_resume_state(encode_resume_state(wrong), &x));
}

TEST(BlobAgreement, EveryParticipantDecidesAlike) {
  auto agree = [](const std::vector<OpeningVote>& votes) {
    const int n = static_cast<int>(votes.size());
    std::vector<int64_t> all(static_cast<size_t>(n) * kOpeningSlots, 0);
    for (int p = 0; p < n; ++p) {
      const auto mine = encode_opening(votes[static_cast<size_t>(p)], p, n);
      for (size_t i = 0; i < all.size(); ++i) all[i] = std::max(all[i], mine[i]);
    }
    return decide_opening(all, n);
  };
  auto ok = agree({{ErrorCode::kOk, 1, -1, 0},
                   {ErrorCode::kOk, 1, 1000, 1 << 20},
                   {ErrorCode::kOk, 1, 1000, 0}});
  EXPECT_EQ(ok.code, ErrorCode::kOk);
  EXPECT_EQ(ok.root, 1);
  EXPECT_EQ(ok.object_bytes, 1000u);
  EXPECT_EQ(ok.chunk_bytes, 1u << 20);
  const auto empty = agree({{ErrorCode::kOk, 0, 0, 65536}, {ErrorCode::kOk, 0, 0, 0}});
  EXPECT_EQ(empty.code, ErrorCode::kOk);
  EXPECT_EQ(empty.object_bytes, 0u);
  const auto size = agree({{ErrorCode::kOk, 0, 1000, 65536}, {ErrorCode::kOk, 0, 999, 0}});
  EXPECT_EQ(size.code, ErrorCode::kMismatch);
  const auto roots = agree({{ErrorCode::kOk, 0, 1000, 65536}, {ErrorCode::kOk, 1, 5, 65536}});
  EXPECT_EQ(roots.code, ErrorCode::kMismatch);
  const auto missing = agree({{ErrorCode::kInvalidArgument, 0, 0, 65536},
                              {ErrorCode::kOk, 0, -1, 0},
                              {ErrorCode::kIo, 0, -1, 0}});
  EXPECT_EQ(missing.code, ErrorCode::kIo);
  EXPECT_EQ(missing.failed, 2);

  const std::vector<uint8_t> status{0, static_cast<uint8_t>(ErrorCode::kIo), 0};
  auto rank_of = [](int p) { return p + 10; };
  try {
    raise_if_failed(status, 0, "", rank_of);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("rank 11"), std::string::npos) << e.what();
  }
  try {
    raise_if_failed(status, 1, "disk full", rank_of);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(raise_if_failed(std::vector<uint8_t>(3, 0), 0, "", rank_of));
}

TEST(BlobTestHooks, ParseOnlyThisRanksValue) {
  EXPECT_EQ(parse_rank_value("2:5", 2), 5);
  EXPECT_FALSE(parse_rank_value("2:5", 1));
  EXPECT_FALSE(parse_rank_value("2:x", 2));
  EXPECT_FALSE(parse_rank_value("25", 2));
  EXPECT_FALSE(parse_rank_value("2:-1", 2));
}

// The transfer relies on the communicator's broadcast crossing each WAN path once: with several
// domains, large payloads go hierarchically.
TEST(BlobPlanner, LargeBroadcastsAcrossDomainsAreHierarchical) {
  for (size_t bytes : {size_t{64}, size_t{4} << 20, size_t{64} << 20})
    EXPECT_EQ(collectives::plan_broadcast(bytes, 4, 2, 64 << 10, "").algo,
              collectives::Algo::kHierarchical);
  EXPECT_EQ(collectives::plan_broadcast(size_t{4} << 20, 4, 1, 64 << 10, "").algo,
            collectives::Algo::kChain);
}

TEST(BlobFileDestination, ResumesFromVerifiedChunksThatStillMatch) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("geoccl_blob_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "obj").string();
  const uint32_t chunk = 64u << 10;
  const auto data = random_bytes(3 * chunk + 17, 5);
  const ObjectHeader h{data.size(), xxh3(data), chunk, 8, 4};
  {
    FileDestination d(path, true);
    const auto v = d.open(h);
    EXPECT_EQ(v, std::vector<uint8_t>(4, 0));
    std::copy(data.begin(), data.begin() + 2 * chunk, d.bytes().begin());  // chunks 0, 1 arrived
    std::vector<uint64_t> hashes(4, 0);
    for (uint32_t i = 0; i < 2; ++i) hashes[i] = xxh3(std::span(data).subspan(i * chunk, chunk));
    d.persist({1, 1, 0, 0}, hashes);
  }  // the receiver "crashes": no commit
  EXPECT_FALSE(std::filesystem::exists(path));
  {
    // Chunk 1 got damaged on disk since: only chunk 0 is trusted.
    auto part = MappedFile::open_write(FileDestination::part_path(path), data.size(), true);
    part.bytes()[chunk + 3] ^= 1;
    part.sync_and_close();
  }
  {
    FileDestination d(path, true);
    EXPECT_EQ(d.open(h), (std::vector<uint8_t>{1, 0, 0, 0}));
    std::copy(data.begin(), data.end(), d.bytes().begin());
    d.commit();
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(FileDestination::state_path(path)));
  EXPECT_FALSE(std::filesystem::exists(FileDestination::part_path(path)));
  EXPECT_EQ(std::filesystem::file_size(path), data.size());
  {
    // A state of another object is ignored.
    FileDestination d(path + "2", true);
    d.open(h);
    d.persist({1, 0, 0, 0}, {1, 0, 0, 0});
    ObjectHeader other = h;
    other.object_hash ^= 1;
    FileDestination again(path + "2", true);
    EXPECT_EQ(again.open(other), std::vector<uint8_t>(4, 0));
  }
  std::filesystem::remove_all(dir);
}
