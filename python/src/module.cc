// PYBIND11_MODULE for geoccl._C: the Communicator for numpy arrays / torch CPU tensors, the
// rendezvous store server, and the c10d ProcessGroup "geoccl".
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <stdexcept>

#include "common.h"

namespace py = pybind11;

namespace geoccl::python {

void bind_blob(py::module_& m);     // blob_bindings.cc
void bind_elastic(py::module_& m);  // elastic_bindings.cc
void bind_weighted(py::module_& m);  // weighted_bindings.cc
void bind_sparse(py::module_& m);    // sparse_bindings.cc

std::optional<DataType> to_geoccl_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUInt8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    default: return std::nullopt;
  }
}

ReduceOp to_geoccl_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default:
      throw std::invalid_argument(
          "geoccl: unsupported reduce op (supported: SUM, AVG, PRODUCT, MIN, MAX)");
  }
}

ReduceOp parse_op(const std::string& name) {
  auto op = parse_reduce_op(name);
  if (!op) throw std::invalid_argument("geoccl: unknown reduce op '" + name + "' (sum, avg, prod, min, max)");
  return *op;
}

Priority parse_priority(const std::string& name) {
  if (name == "gradient") return Priority::kGradient;
  if (name == "bulk") return Priority::kBulk;
  throw std::invalid_argument("geoccl: unknown priority '" + name + "' (gradient, bulk)");
}

const char* priority_name(Priority p) { return p == Priority::kBulk ? "bulk" : "gradient"; }

const char* error_code_id(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerLost: return "peer_lost";
    case ErrorCode::kMismatch: return "mismatch";
    case ErrorCode::kProtocol: return "protocol";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kPeerUnresponsive: return "peer_unresponsive";
    case ErrorCode::kPeerUnreachable: return "peer_unreachable";
  }
  return "unknown";
}

std::optional<Compression> parse_compression(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return invalid_as_value_error([&] { return Compression::parse(*text); });
}

Config group_config(int rank, int world_size, const std::string& master_addr, int master_port,
                    const std::string& session) {
  Config c = Config::from_env();
  c.rank = rank;
  c.world_size = world_size;
  c.master_addr = master_addr;
  c.master_port = static_cast<uint16_t>(master_port);
  if (!session.empty()) c.session = session;
  return c;
}

py::dict compression_stats_dict(const CompressionStats& s) {
  py::dict d;
  d["calls"] = s.calls;
  d["elements_encoded"] = s.elements_encoded;
  d["bytes_encoded"] = s.bytes_encoded;
  d["feedback_keys"] = s.feedback_keys;
  d["feedback_bytes"] = s.feedback_bytes;
  return d;
}

}  // namespace geoccl::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "geoccl: collective communication across regions (C++ core of the Python package)";
  // The base classes (ProcessGroup, Work, Store) are registered by torch's own module.
  py::module_::import("torch");
  py::module_::import("torch.distributed");

  // GeocclError carries the error's kind (`code`, a short name) and the ranks it is about
  // (`ranks`: the lost, unresponsive or unreachable peer, the same on every rank; empty when the
  // failure is not about a peer), so that a caller can act on them without parsing the message.
  static py::exception<geoccl::Error> geoccl_error(m, "GeocclError", PyExc_RuntimeError);
  geoccl_error.attr("code") = py::none();
  geoccl_error.attr("ranks") = py::tuple();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const geoccl::Error& e) {
      py::object err = py::reinterpret_borrow<py::object>(geoccl_error.ptr())(e.what());
      err.attr("code") = geoccl::python::error_code_id(e.code());
      py::tuple ranks(e.ranks().size());
      for (size_t i = 0; i < e.ranks().size(); ++i) ranks[i] = py::int_(e.ranks()[i]);
      err.attr("ranks") = ranks;
      PyErr_SetObject(geoccl_error.ptr(), err.ptr());
    }
  });

  geoccl::python::bind_communicator(m);
  geoccl::python::bind_process_group(m);
  geoccl::python::bind_blob(m);
  geoccl::python::bind_elastic(m);
  geoccl::python::bind_weighted(m);
  geoccl::python::bind_sparse(m);
}
