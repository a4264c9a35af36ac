// Shared helpers of the Python module: torch dtype / reduce-op mapping, error translation.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "geoccl/geoccl.h"

namespace geoccl::python {

// The geoccl element type of a torch dtype; nullopt when geoccl cannot reduce it.
std::optional<DataType> to_geoccl_dtype(at::ScalarType t);
// The geoccl reduce operator of a torch ReduceOp; throws std::invalid_argument (ValueError) when
// geoccl has none (bitwise ops, PREMUL_SUM).
ReduceOp to_geoccl_op(const c10d::ReduceOp& op);
// Parses "sum", "avg", "prod", "min", "max"; throws std::invalid_argument.
ReduceOp parse_op(const std::string& name);
// Parses "gradient", "bulk" (the priority classes); throws std::invalid_argument.
Priority parse_priority(const std::string& name);
const char* priority_name(Priority p);
// The short name GeocclError.code carries for `c` ("peer_lost", "timeout", ...).
const char* error_code_id(ErrorCode c);
// Config::from_env() (GEOCCL_* settings) with the identity and rendezvous given from Python; an
// empty session keeps the environment's.
Config group_config(int rank, int world_size, const std::string& master_addr, int master_port,
                    const std::string& session);

// A compression spelling of Compression::parse ("int8", "topk:0.01", "int8@ring", "none"); nullopt
// for None (the config's GEOCCL_WAN_COMPRESSION applies). Throws std::invalid_argument
// (ValueError) for a bad spelling.
std::optional<Compression> parse_compression(const std::optional<std::string>& text);

// Runs f() (a library call); Error(kInvalidArgument), which the library throws for bad input
// before anything is sent, becomes std::invalid_argument (Python's ValueError), as the bindings'
// own checks do. Other errors pass unchanged (GeocclError).
template <typename F>
decltype(auto) invalid_as_value_error(F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) throw std::invalid_argument(e.what());
    throw;
  }
}

// Registers the module-level functions and classes (one function per translation unit).
}  // namespace geoccl::python

namespace pybind11 {
class module_;
class dict;
}  // namespace pybind11

namespace geoccl::python {
// CompressionStats as a dict: calls, elements_encoded, bytes_encoded, feedback_keys,
// feedback_bytes.
pybind11::dict compression_stats_dict(const CompressionStats& s);

void bind_communicator(pybind11::module_& m);
void bind_process_group(pybind11::module_& m);
}  // namespace geoccl::python
