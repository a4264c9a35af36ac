#include "core/reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace geoccl::core {
namespace {

// Integer sums and products wrap around (two's complement), as in torch, instead of being UB.
template <class T, bool = std::is_integral_v<T>>
struct ArithOf { using type = T; };
template <class T>
struct ArithOf<T, true> { using type = std::make_unsigned_t<T>; };
template <class T>
using Arith = typename ArithOf<T>::type;
struct Sum {
  template <class T> static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  }
};
struct Prod {
  template <class T> static T apply(T a, T b) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  }
};
struct Min { template <class T> static T apply(T a, T b) { return b < a ? b : a; } };
struct Max { template <class T> static T apply(T a, T b) { return a < b ? b : a; } };

template <class T, class Op, bool kSrcFirst>
void combine(T* __restrict dst, const T* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = kSrcFirst ? Op::apply(src[i], dst[i]) : Op::apply(dst[i], src[i]);
}

template <class T, class Op>
void combine_to(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// 16-bit floats: widen, combine in f32, round once.
template <class Op, bool kSrcFirst, float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void combine16(uint16_t* __restrict dst, const uint16_t* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i)
    dst[i] = kSrcFirst ? FromF(Op::apply(ToF(src[i]), ToF(dst[i])))
                       : FromF(Op::apply(ToF(dst[i]), ToF(src[i])));
}

template <class Op, float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void combine16_to(uint16_t* __restrict out, const uint16_t* __restrict a, const uint16_t* __restrict b,
                  size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FromF(Op::apply(ToF(a[i]), ToF(b[i])));
}

template <class T, bool kSrcFirst>
void dispatch_op(void* dst, const void* src, size_t n, ReduceOp op) {
  auto* d = static_cast<T*>(dst);
  const auto* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return combine<T, Sum, kSrcFirst>(d, s, n);
    case ReduceOp::kProd: return combine<T, Prod, kSrcFirst>(d, s, n);
    case ReduceOp::kMin: return combine<T, Min, kSrcFirst>(d, s, n);
    case ReduceOp::kMax: return combine<T, Max, kSrcFirst>(d, s, n);
  }
}

template <bool kSrcFirst, float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void dispatch_op16(void* dst, const void* src, size_t n, ReduceOp op) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* s = static_cast<const uint16_t*>(src);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return combine16<Sum, kSrcFirst, ToF, FromF>(d, s, n);
    case ReduceOp::kProd: return combine16<Prod, kSrcFirst, ToF, FromF>(d, s, n);
    case ReduceOp::kMin: return combine16<Min, kSrcFirst, ToF, FromF>(d, s, n);
    case ReduceOp::kMax: return combine16<Max, kSrcFirst, ToF, FromF>(d, s, n);
  }
}

template <bool kSrcFirst>
void reduce_ordered(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: return dispatch_op<float, kSrcFirst>(dst, src, count, op);
    case DataType::kFloat64: return dispatch_op<double, kSrcFirst>(dst, src, count, op);
    case DataType::kFloat16:
      return dispatch_op16<kSrcFirst, half_to_float, float_to_half>(dst, src, count, op);
    case DataType::kBFloat16:
      return dispatch_op16<kSrcFirst, bf16_to_float, float_to_bf16>(dst, src, count, op);
    case DataType::kInt8: return dispatch_op<int8_t, kSrcFirst>(dst, src, count, op);
    case DataType::kUInt8: return dispatch_op<uint8_t, kSrcFirst>(dst, src, count, op);
    case DataType::kInt32: return dispatch_op<int32_t, kSrcFirst>(dst, src, count, op);
    case DataType::kInt64: return dispatch_op<int64_t, kSrcFirst>(dst, src, count, op);
  }
}

template <class T>
void dispatch_to(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return combine_to<T, Sum>(o, x, y, n);
    case ReduceOp::kProd: return combine_to<T, Prod>(o, x, y, n);
    case ReduceOp::kMin: return combine_to<T, Min>(o, x, y, n);
    case ReduceOp::kMax: return combine_to<T, Max>(o, x, y, n);
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void dispatch_to16(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return combine16_to<Sum, ToF, FromF>(o, x, y, n);
    case ReduceOp::kProd: return combine16_to<Prod, ToF, FromF>(o, x, y, n);
    case ReduceOp::kMin: return combine16_to<Min, ToF, FromF>(o, x, y, n);
    case ReduceOp::kMax: return combine16_to<Max, ToF, FromF>(o, x, y, n);
  }
}

template <class T>
void divide(void* buf, size_t n, int divisor) {
  auto* p = static_cast<T*>(buf);
  const T d = static_cast<T>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide16(void* buf, size_t n, int divisor) {
  auto* p = static_cast<uint16_t*>(buf);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) / d);
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op,
                 Operands order) {
  if (order == Operands::kSrcFirst) return reduce_ordered<true>(dst, src, count, dtype, op);
  reduce_ordered<false>(dst, src, count, dtype, op);
}

void reduce_to(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: return dispatch_to<float>(out, a, b, count, op);
    case DataType::kFloat64: return dispatch_to<double>(out, a, b, count, op);
    case DataType::kFloat16: return dispatch_to16<half_to_float, float_to_half>(out, a, b, count, op);
    case DataType::kBFloat16: return dispatch_to16<bf16_to_float, float_to_bf16>(out, a, b, count, op);
    case DataType::kInt8: return dispatch_to<int8_t>(out, a, b, count, op);
    case DataType::kUInt8: return dispatch_to<uint8_t>(out, a, b, count, op);
    case DataType::kInt32: return dispatch_to<int32_t>(out, a, b, count, op);
    case DataType::kInt64: return dispatch_to<int64_t>(out, a, b, count, op);
  }
}

void finish_avg(void* buf, size_t count, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kFloat32: return divide<float>(buf, count, divisor);
    case DataType::kFloat64: return divide<double>(buf, count, divisor);
    case DataType::kFloat16: return divide16<half_to_float, float_to_half>(buf, count, divisor);
    case DataType::kBFloat16: return divide16<bf16_to_float, float_to_bf16>(buf, count, divisor);
    case DataType::kInt8: return divide<int8_t>(buf, count, divisor);
    case DataType::kUInt8: return divide<uint8_t>(buf, count, divisor);
    case DataType::kInt32: return divide<int32_t>(buf, count, divisor);
    case DataType::kInt64: return divide<int64_t>(buf, count, divisor);
  }
}

}  // namespace geoccl::core
