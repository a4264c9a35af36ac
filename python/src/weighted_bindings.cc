// geoccl._C.weighted_allreduce: the weighted (robust, staleness-checked) allreduce of
// geoccl/weighted.h on a Communicator or a "geoccl" process group, for one torch CPU tensor.
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

RobustMode parse_robust(const std::string& s) {
  if (s == "none") return RobustMode::kNone;
  if (s == "exclude") return RobustMode::kExclude;
  if (s == "downweight") return RobustMode::kDownweight;
  throw std::invalid_argument(
      "geoccl: robust must be \"none\", \"exclude\" or \"downweight\", got '" + s + "'");
}

RobustStatistic parse_statistic(const std::string& s) {
  if (s == "norm") return RobustStatistic::kNorm;
  if (s == "loss") return RobustStatistic::kLoss;
  if (s == "both") return RobustStatistic::kBoth;
  throw std::invalid_argument("geoccl: statistic must be \"norm\", \"loss\" or \"both\", got '" +
                              s + "'");
}

py::dict result_dict(const WeightedResult& r) {
  using namespace pybind11::literals;
  return py::dict("weights"_a = r.weights, "applied"_a = r.applied, "steps"_a = r.steps,
                  "norms"_a = r.norms, "losses"_a = r.losses, "included"_a = r.included,
                  "outliers"_a = r.outliers, "downweighted"_a = r.downweighted, "stale"_a = r.stale,
                  "total_weight"_a = r.total_weight, "median_norm"_a = r.median_norm,
                  "norm_scale"_a = r.norm_scale, "median_loss"_a = r.median_loss,
                  "loss_scale"_a = r.loss_scale);
}

}  // namespace

void bind_weighted(py::module_& m) {
  m.def(
      "weighted_allreduce",
      [](const py::object& target, const py::object& tensor, double weight, int64_t step,
         std::optional<double> loss, std::optional<int64_t> current_step, int64_t max_staleness,
         const std::string& robust, const std::string& statistic, double threshold,
         double min_relative_scale, std::optional<std::string> compression,
         const std::string& feedback_key, std::optional<double> timeout_s) {
        Communicator& comm = communicator_of(target);
        if (!THPVariable_Check(tensor.ptr()))
          throw py::type_error("geoccl: weighted_allreduce needs a torch tensor");
        const at::Tensor& t = THPVariable_Unpack(tensor.ptr());
        if (!t.device().is_cpu())
          throw std::invalid_argument("geoccl: weighted_allreduce needs a CPU tensor, got " +
                                      t.device().str());
        if (!t.is_contiguous())
          throw std::invalid_argument("geoccl: weighted_allreduce needs a contiguous tensor");
        WeightedOptions o;
        o.weight = weight;
        o.step = step;
        o.loss = loss;
        o.current_step = current_step;
        o.max_staleness = max_staleness;
        o.robust = parse_robust(robust);
        o.statistic = parse_statistic(statistic);
        o.threshold = threshold;
        o.min_relative_scale = min_relative_scale;
        o.op.compression = parse_compression(compression);
        o.op.feedback_key = feedback_key;
        if (timeout_s)
          o.op.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0));
        // A dtype the library does not average still goes into the table (as an invalid value),
        // so that every rank fails alike instead of this one alone.
        const DataType dt = to_geoccl_dtype(t.scalar_type()).value_or(static_cast<DataType>(0));
        void* data = t.data_ptr();
        const size_t count = static_cast<size_t>(t.numel());
        WeightedResult r;
        {
          py::gil_scoped_release nogil;
          r = invalid_as_value_error([&] { return weighted_allreduce(comm, data, count, dt, o); });
        }
        return result_dict(r);
      },
      py::arg("target"), py::arg("tensor"), py::arg("weight") = 1.0, py::arg("step") = -1,
      py::arg("loss") = py::none(), py::arg("current_step") = py::none(),
      py::arg("max_staleness") = 0, py::arg("robust") = "none", py::arg("statistic") = "norm",
      py::arg("threshold") = 3.0, py::arg("min_relative_scale") = 0.05,
      py::arg("compression") = py::none(), py::arg("feedback_key") = "",
      py::arg("timeout") = py::none(),
      "Replaces `tensor` (contiguous CPU float32/float64) on every rank by the weighted mean of "
      "all "
      "ranks' tensors, bit-identical everywhere; blocks. Returns a dict of the decision (weights, "
      "applied, steps, norms, losses, included, outliers, downweighted, stale, total_weight, "
      "median_norm, norm_scale, median_loss, loss_scale), equal on every rank. ValueError on every "
      "rank for a bad weight, dtype or step on any rank, or when no weight is left; GeocclError "
      "(mismatch) when ranks disagree on counts or options. geoccl.weighted wraps it.");
}

}  // namespace geoccl::python
