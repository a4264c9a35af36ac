#include "collectives/wan_codec.h"

#include <algorithm>

#include "compression/error_feedback.h"
#include "compression/topk.h"
#include "geoccl/error.h"

namespace geoccl::collectives {

CompressedAlgo WanCompression::resolve(int k) const {
  if (algo != CompressedAlgo::kAuto) return algo;
  if (compression::is_topk(spec.codec) || k <= 2) return CompressedAlgo::kAllgather;
  return CompressedAlgo::kRing;
}

namespace wan_codec {

namespace {

// splitmix64's finalizer: consecutive inputs give unrelated outputs.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

compression::CodecSpec seeded(const compression::CodecSpec& spec, uint64_t op_seq, int rank,
                              uint64_t offset) {
  if (spec.codec != compression::CodecId::kInt2Sr) return spec;
  compression::CodecSpec s = spec;
  const uint64_t r = static_cast<uint64_t>(rank);
  s.seed = static_cast<uint32_t>(mix64(mix64(mix64(spec.seed ^ op_seq) ^ r) ^ offset) >> 32);
  return s;
}

void encode_chunk(const compression::CodecSpec& spec, std::span<float> x,
                  std::span<float> residual, std::span<uint8_t> out, CompressionCounters* counters) {
  if (!residual.empty()) compression::add_residual(x, residual);
  compression::encode(spec, x, out);
  if (!residual.empty()) {
    compression::decode(out, residual);
    compression::store_residual(x, residual, residual);
  }
  if (counters) {
    counters->elements.fetch_add(x.size(), std::memory_order_relaxed);
    counters->bytes.fetch_add(out.size(), std::memory_order_relaxed);
  }
}

void decode_chunk(OpContext& c, int peer, std::span<const uint8_t> in, std::span<float> dst, bool add) {
  try {
    if (add) compression::decode_add(in, dst);
    else compression::decode(in, dst);
  } catch (const Error& e) {
    const std::string why = "compressed allreduce: rank " + std::to_string(c.global(peer)) +
                            " sent a buffer that does not decode: " + e.what();
    c.abort(ErrorCode::kProtocol, why);
    throw Error(ErrorCode::kProtocol, why);
  }
}

std::vector<Chunk> chunks_of(const compression::CodecSpec& spec, size_t count, size_t chunk_elems,
                             size_t* encoded_total) {
  std::vector<Chunk> out;
  size_t enc = 0;
  for (size_t b = 0; b < count; b += chunk_elems) {
    const size_t len = std::min(chunk_elems, count - b);
    const size_t e = compression::encoded_size(spec, len);
    out.push_back({b, len, enc, e});
    enc += e;
  }
  *encoded_total = enc;
  return out;
}

}  // namespace wan_codec
}  // namespace geoccl::collectives
