// Codec throughput on one core: encode and decode of a 16 MiB fp32 buffer (gaussian values) for
// every codec. Bytes per second count the fp32 side (16 MiB per iteration), so a figure reads
// directly against a link: 10 Gbit/s carries 1.25 GB/s of fp32 uncompressed. docs/compression.md
// has the figures.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "compression/codec.h"

namespace {

using geoccl::compression::CodecId;
using geoccl::compression::CodecSpec;

constexpr size_t kElements = (16u << 20) / sizeof(float);

const std::vector<float>& input() {
  static const std::vector<float> x = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    std::vector<float> v(kElements);
    for (auto& e : v) e = d(rng);
    return v;
  }();
  return x;
}

// int2-sr's seed is any fixed value: its cost does not depend on it.
CodecSpec spec_of(int64_t codec, int64_t k) {
  return {static_cast<CodecId>(codec), static_cast<uint32_t>(k), 1};
}

void set_counters(benchmark::State& state, const CodecSpec& spec) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kElements * sizeof(float)));
  state.counters["ratio"] = static_cast<double>(kElements * sizeof(float)) /
                            static_cast<double>(geoccl::compression::encoded_size(spec, kElements));
}

void BM_Encode(benchmark::State& state) {
  const CodecSpec spec = spec_of(state.range(0), state.range(1));
  std::vector<uint8_t> out(geoccl::compression::encoded_size(spec, kElements));
  for (auto _ : state) {
    geoccl::compression::encode(spec, input(), out);
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, spec);
}

template <bool kAdd>
void BM_Decode(benchmark::State& state) {
  const CodecSpec spec = spec_of(state.range(0), state.range(1));
  const auto bytes = geoccl::compression::encode(spec, input());
  std::vector<float> dst(kElements);
  for (auto _ : state) {
    if (kAdd)
      geoccl::compression::decode_add(bytes, dst);
    else
      geoccl::compression::decode(bytes, dst);
    benchmark::DoNotOptimize(dst.data());
  }
  set_counters(state, spec);
}

// Args: codec id (format.h), k (top-k codecs: 656 of 65536 = 1 %, 66 = 0.1 %).
void codecs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"codec", "k"});
  for (CodecId c : {CodecId::kFp16, CodecId::kBf16, CodecId::kInt8, CodecId::kInt4, CodecId::kInt2,
                    CodecId::kInt2Sr})
    b->Args({static_cast<int64_t>(c), 0});
  for (CodecId c : {CodecId::kTopK, CodecId::kTopKInt8, CodecId::kTopKInt4, CodecId::kTopKInt2})
    b->Args({static_cast<int64_t>(c), 656});
  b->Args({static_cast<int64_t>(CodecId::kTopK), 66});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Encode)->Apply(codecs);
BENCHMARK(BM_Decode<false>)->Name("BM_Decode")->Apply(codecs);
BENCHMARK(BM_Decode<true>)->Name("BM_DecodeAdd")->Apply(codecs);

}  // namespace

BENCHMARK_MAIN();
