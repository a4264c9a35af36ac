#include "compression/half_codec.h"

#include "core/half.h"
#include "core/half_array.h"
#include "geoccl/error.h"

namespace geoccl::compression {
namespace {

// bf16: plain loops over contiguous arrays, which the compiler vectorizes (-O3, see
// tests/check_marked_vectorized.sh). fp16 goes through core/half_array.h (F16C where present).
template <uint16_t (*FromF)(float)>
void encode_loop(const float* __restrict src, uint8_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) store_u16(out + 2 * i, FromF(src[i]));  // must vectorize
}

template <float (*ToF)(uint16_t), bool kAdd>
void decode_loop(const uint8_t* __restrict in, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {  // must vectorize
    const float v = ToF(load_u16(in + 2 * i));
    dst[i] = kAdd ? dst[i] + v : v;
  }
}

void check_codec(CodecId codec) {
  if (codec != CodecId::kFp16 && codec != CodecId::kBf16)
    throw Error(ErrorCode::kInvalidArgument, "half codec: codec must be fp16 or bf16");
}

template <bool kAdd>
void decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  check_codec(codec);
  const Header h = read_header(in);
  check_payload(h, codec, in.size(), half_encoded_size(h.count));
  if (h.block != 0 || h.k != 0)
    throw Error(ErrorCode::kProtocol, "half codec: block and k must be zero");
  check_destination(h, dst.size());
  const uint8_t* p = in.data() + kHeaderSize;
  if (codec == CodecId::kFp16)
    (kAdd ? core::halves_add_to_floats : core::halves_to_floats)(p, dst.size(), dst.data());
  else
    decode_loop<core::bf16_to_float, kAdd>(p, dst.data(), dst.size());
}

}  // namespace

size_t half_encoded_size(size_t count) { return kHeaderSize + 2 * count; }

void half_encode(CodecId codec, std::span<const float> src, std::span<uint8_t> out) {
  check_codec(codec);
  check_output(out, half_encoded_size(src.size()));
  write_header({codec, src.size(), 0, 0}, out);
  uint8_t* p = out.data() + kHeaderSize;
  if (codec == CodecId::kFp16)
    core::floats_to_halves(src.data(), src.size(), p);
  else
    encode_loop<core::float_to_bf16>(src.data(), p, src.size());
}

void fp16_store(const float* src, size_t n, uint8_t* out) { core::floats_to_halves(src, n, out); }
void fp16_load(const uint8_t* in, size_t n, float* dst) { core::halves_to_floats(in, n, dst); }

void half_decode(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<false>(codec, in, dst);
}
void half_decode_add(CodecId codec, std::span<const uint8_t> in, std::span<float> dst) {
  decode<true>(codec, in, dst);
}

}  // namespace geoccl::compression
