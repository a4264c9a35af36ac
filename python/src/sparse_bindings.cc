// geoccl._C.sparse_allgather: the sparse allgather of Communicator::sparse_allgather on a
// Communicator or a "geoccl" process group, for torch CPU tensors of indices and values.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "common.h"
#include "process_group.h"

namespace py = pybind11;

namespace geoccl::python {
namespace {

const at::Tensor& tensor_arg(const py::object& o, at::ScalarType want, const char* name) {
  if (!THPVariable_Check(o.ptr()))
    throw py::type_error(std::string("geoccl: sparse_allgather: ") + name +
                         " must be a torch tensor");
  const at::Tensor& t = THPVariable_Unpack(o.ptr());
  if (!t.device().is_cpu() || !t.is_contiguous() || t.dim() != 1 || t.scalar_type() != want)
    throw std::invalid_argument(std::string("geoccl: sparse_allgather: ") + name +
                                " must be a contiguous 1-D CPU " +
                                (want == at::kLong ? "int64" : "float32") + " tensor");
  return t;
}

}  // namespace

void bind_sparse(py::module_& m) {
  m.def(
      "sparse_allgather",
      [](const py::object& target, const py::object& indices, const py::object& values,
         int64_t count, uint32_t value_bits, std::optional<double> timeout_s) {
        Communicator& comm = communicator_of(target);
        const at::Tensor& idx = tensor_arg(indices, at::kLong, "indices");
        const at::Tensor& val = tensor_arg(values, at::kFloat, "values");
        if (idx.numel() != val.numel())
          throw std::invalid_argument("geoccl: sparse_allgather: " + std::to_string(idx.numel()) +
                                      " indices but " + std::to_string(val.numel()) + " values");
        if (count < 0) throw std::invalid_argument("geoccl: sparse_allgather: count must be >= 0");
        OpOptions o;
        if (timeout_s)
          o.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0));
        at::Tensor out = at::empty({count}, at::kFloat);
        SparseResult r;
        {
          py::gil_scoped_release nogil;
          invalid_as_value_error([&] {
            comm.sparse_allgather(idx.data_ptr<int64_t>(), val.data_ptr<float>(),
                                  static_cast<size_t>(idx.numel()), out.data_ptr<float>(),
                                  static_cast<size_t>(count), value_bits, &r, o)
                .wait();
          });
        }
        using namespace pybind11::literals;
        return py::make_tuple(
            out, py::dict("piece_bytes"_a = r.piece_bytes, "bytes_sent"_a = r.bytes_sent,
                          "bytes_received"_a = r.bytes_received));
      },
      py::arg("target"), py::arg("indices"), py::arg("values"), py::arg("count"),
      py::arg("value_bits") = 32, py::arg("timeout") = py::none(),
      "Sparse allgather: this rank's pairs (indices: int64, values: float32, 1-D contiguous CPU, "
      "indices distinct in [0, count)) go to every rank as they are (indices delta-coded, values "
      "as "
      "float32 or 8/4/2-bit sign + magnitude codes per value_bits), and every rank gets the dense "
      "float32 sum of all ranks' pairs, bit-identical everywhere; blocks. `values` is replaced by "
      "the values every rank decoded (the quantized ones below 32 bits). Returns (dense tensor, "
      "{piece_bytes, bytes_sent, bytes_received}). ValueError for a bad index, width or tensor; "
      "GeocclError (mismatch) when ranks disagree on count or value_bits.");
}

}  // namespace geoccl::python
