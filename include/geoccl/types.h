// Element types and reduction operators understood by every collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace geoccl {

// Wire values are part of the frame format: never renumber.
enum class DataType : uint8_t {
  kFloat32 = 1,
  kFloat64 = 2,
  kFloat16 = 3,
  kBFloat16 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt32 = 7,
  kInt64 = 8,
};

enum class ReduceOp : uint8_t {
  kSum = 1,
  kAvg = 2,
  kProd = 3,
  kMin = 4,
  kMax = 5,
};

// Size in bytes of one element; 0 for a value outside the enum.
size_t dtype_size(DataType t);
std::string_view dtype_name(DataType t);
std::string_view reduce_op_name(ReduceOp op);
// Parse "f32", "float32", "bf16", ... ; nullopt when unknown.
std::optional<DataType> parse_dtype(std::string_view s);
std::optional<ReduceOp> parse_reduce_op(std::string_view s);
bool is_valid(DataType t);
bool is_valid(ReduceOp op);

// Priority class (channel) of an operation. Each class has its own frame space and operation
// sequence: operations of different classes run concurrently, collectives of one class complete
// in issue order. Senders always serve the higher class first; kBulk is a scavenger that uses
// only what gradients leave (GEOCCL_BULK_RATE caps it) and backs off when the path's queueing
// delay grows. Every rank must issue an operation on the same class.
enum class Priority : uint8_t {
  kGradient = 0,  // default, highest
  kBulk = 1,      // background: checkpoints, blobs
};
inline constexpr int kPriorityClasses = 2;

}  // namespace geoccl
