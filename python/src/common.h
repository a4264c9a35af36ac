// Shared helpers of the Python module: torch dtype / reduce-op mapping, error translation.
#pragma once

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <ATen/ATen.h>

#include <optional>
#include <string>

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
// Config::from_env() (GEOCCL_* settings) with the identity and rendezvous given from Python; an
// empty session keeps the environment's.
Config group_config(int rank, int world_size, const std::string& master_addr, int master_port,
                    const std::string& session);

// Registers the module-level functions and classes (one function per translation unit).
}  // namespace geoccl::python

namespace pybind11 {
class module_;
}

namespace geoccl::python {
void bind_communicator(pybind11::module_& m);
void bind_process_group(pybind11::module_& m);
}  // namespace geoccl::python
