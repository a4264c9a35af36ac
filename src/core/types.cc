#include "geoccl/types.h"

#include "geoccl/error.h"

namespace geoccl {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

bool is_valid(DataType t) { return dtype_size(t) != 0; }

bool is_valid(ReduceOp op) {
  return static_cast<uint8_t>(op) >= static_cast<uint8_t>(ReduceOp::kSum) &&
         static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kMax);
}

std::string_view dtype_name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "f32";
    case DataType::kFloat64: return "f64";
    case DataType::kFloat16: return "f16";
    case DataType::kBFloat16: return "bf16";
    case DataType::kInt8: return "i8";
    case DataType::kUInt8: return "u8";
    case DataType::kInt32: return "i32";
    case DataType::kInt64: return "i64";
  }
  return "invalid";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "invalid";
}

std::optional<DataType> parse_dtype(std::string_view s) {
  struct Name { std::string_view a, b; DataType t; };
  static constexpr Name kNames[] = {
      {"f32", "float32", DataType::kFloat32}, {"f64", "float64", DataType::kFloat64},
      {"f16", "float16", DataType::kFloat16}, {"bf16", "bfloat16", DataType::kBFloat16},
      {"i8", "int8", DataType::kInt8},        {"u8", "uint8", DataType::kUInt8},
      {"i32", "int32", DataType::kInt32},     {"i64", "int64", DataType::kInt64},
  };
  for (const auto& n : kNames)
    if (s == n.a || s == n.b) return n.t;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view s) {
  if (s == "sum") return ReduceOp::kSum;
  if (s == "avg") return ReduceOp::kAvg;
  if (s == "prod") return ReduceOp::kProd;
  if (s == "min") return ReduceOp::kMin;
  if (s == "max") return ReduceOp::kMax;
  return std::nullopt;
}

std::string_view error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerLost: return "peer lost";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kProtocol: return "protocol error";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kPeerUnresponsive: return "peer unresponsive";
    case ErrorCode::kPeerUnreachable: return "peer unreachable";
  }
  return "unknown error";
}

}  // namespace geoccl
