// geoccl._C.Communicator: the C++ Communicator for numpy arrays and torch CPU tensors, in place
// and without copies, plus StoreServer (the rendezvous store the torch backend hosts).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace py = pybind11;

namespace geoccl::python {
namespace {

// A contiguous, CPU-resident view of a numpy array (buffer protocol) or a torch tensor.
struct View {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUInt8;
};

std::optional<DataType> buffer_dtype(const py::buffer_info& info) {
  if (info.format.empty()) return std::nullopt;
  char f = info.format.back();  // skip byte-order prefixes ('<', '=', '@')
  switch (f) {
    case 'f': return info.itemsize == 4 ? std::optional(DataType::kFloat32) : std::nullopt;
    case 'd': return info.itemsize == 8 ? std::optional(DataType::kFloat64) : std::nullopt;
    case 'e': return info.itemsize == 2 ? std::optional(DataType::kFloat16) : std::nullopt;
    case 'b': return DataType::kInt8;
    case 'B': return DataType::kUInt8;
    case 'i': case 'l': case 'q':
      if (info.itemsize == 4) return DataType::kInt32;
      if (info.itemsize == 8) return DataType::kInt64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

View view_of(const py::object& obj, bool writable, const char* what) {
  View v;
  if (THPVariable_Check(obj.ptr())) {
    const at::Tensor& t = THPVariable_Unpack(obj.ptr());
    if (!t.device().is_cpu())
      throw std::invalid_argument(std::string("geoccl: ") + what + " must be a CPU tensor, got " +
                                  t.device().str());
    if (!t.is_contiguous())
      throw std::invalid_argument(std::string("geoccl: ") + what +
                                  " must be contiguous (call .contiguous() first)");
    auto dt = to_geoccl_dtype(t.scalar_type());
    if (!dt)
      throw std::invalid_argument(std::string("geoccl: unsupported dtype ") +
                                  std::string(c10::toString(t.scalar_type())) + " for " + what);
    v.data = t.data_ptr();
    v.count = static_cast<size_t>(t.numel());
    v.dtype = *dt;
    return v;
  }
  if (!py::isinstance<py::buffer>(obj))
    throw std::invalid_argument(std::string("geoccl: ") + what +
                                " must be a numpy array or a torch CPU tensor");
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  // C-contiguity: strides must be the packed row-major ones.
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect)
      throw std::invalid_argument(std::string("geoccl: ") + what + " must be C-contiguous");
    expect *= info.shape[d];
  }
  auto dt = buffer_dtype(info);
  if (!dt)
    throw std::invalid_argument(std::string("geoccl: unsupported buffer format '") + info.format +
                                "' for " + what);
  v.data = info.ptr;
  v.count = static_cast<size_t>(info.size);
  v.dtype = *dt;
  return v;
}

// False once the interpreter is shutting down: a thread that takes the GIL then is ended by
// Python (pthread_exit), which must not happen inside a completion callback.
bool python_alive() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

// Drops a Python reference from any thread: takes the GIL for it (leaks it when the interpreter
// is going, at process exit).
struct DeleteWithGil {
  void operator()(py::object* o) const {
    if (!python_alive()) {
      o->release();
    } else {
      py::gil_scoped_acquire gil;
      *o = py::object();
    }
    delete o;
  }
};

// None, or the Python exception object for a failed operation (GeocclError for geoccl's errors).
py::object error_object(std::exception_ptr e) {
  if (!e) return py::none();
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return py::module_::import("geoccl._C").attr("GeocclError")(err.what());
  } catch (const std::exception& err) {
    return py::reinterpret_borrow<py::object>(PyExc_RuntimeError)(err.what());
  } catch (...) {
    return py::reinterpret_borrow<py::object>(PyExc_RuntimeError)("unknown error");
  }
}

// Destroys a Communicator without the GIL: its completion threads may need it for the Python
// callbacks they still run.
struct DeleteWithoutGil {
  void operator()(Communicator* c) const {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete c;
    } else {
      delete c;
    }
  }
};
using CommHolder = std::unique_ptr<Communicator, DeleteWithoutGil>;

// The handle of one operation. Holds references to the arrays involved until the operation has
// completed, so Python cannot free memory the library still owns.
class PyWork {
 public:
  PyWork(Work w, std::vector<py::object> keep) : work_(std::move(w)), keep_(std::move(keep)) {}
  ~PyWork() {
    if (work_.valid() && !work_.test()) {
      py::gil_scoped_release nogil;
      try {
        work_.wait();
      } catch (...) {
      }
    }
  }
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  void wait(std::optional<double> timeout_s) {
    {
      py::gil_scoped_release nogil;
      if (timeout_s)
        work_.wait(std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0)));
      else
        work_.wait();
    }
    keep_.clear();
  }
  bool test() const { return work_.test(); }
  bool ok() const { return work_.ok(); }

  // Runs fn(None) or fn(GeocclError) once on completion: on a completion thread with the GIL
  // taken there, or at once on this thread when already complete. What fn raises goes to
  // sys.unraisablehook.
  void on_complete(py::function fn) {
    std::shared_ptr<py::object> held(new py::object(std::move(fn)), DeleteWithGil{});
    work_.on_complete([held](std::exception_ptr e) {
      if (!python_alive()) return;  // process exit
      py::gil_scoped_acquire gil;
      try {
        (*held)(error_object(e));
      } catch (py::error_already_set& err) {
        err.discard_as_unraisable("geoccl Work.on_complete callback");
      }
    });
  }

 private:
  Work work_;
  std::vector<py::object> keep_;
};

OpOptions opts(std::optional<double> timeout_s, const std::string& algo, const std::string& priority) {
  OpOptions o;
  if (timeout_s) o.timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0));
  o.algo = algo;
  o.priority = parse_priority(priority);
  return o;
}

void same_type(const View& a, const View& b) {
  if (a.dtype != b.dtype)
    throw std::invalid_argument("geoccl: send and recv buffers must have the same dtype");
}

void need_count(const View& v, size_t n, const char* what) {
  if (v.count != n)
    throw std::invalid_argument(std::string("geoccl: ") + what + " must hold " + std::to_string(n) +
                                " elements, has " + std::to_string(v.count));
}

template <typename F>
std::unique_ptr<PyWork> issue(std::vector<py::object> keep, F&& f) {
  Work w;
  {
    py::gil_scoped_release nogil;
    w = invalid_as_value_error(f);
  }
  return std::make_unique<PyWork>(std::move(w), std::move(keep));
}

using Comm = Communicator;

}  // namespace

void bind_communicator(py::module_& m) {
  m.def(
      "compression_name", [](const std::string& text) { return parse_compression(text)->name(); },
      py::arg("text"),
      "The canonical spelling of a compression (\"topk:0.010\" -> \"topk:0.01\"); ValueError "
      "for a bad one.");

  m.def(
      "auto_codec_ladder",
      [] {
        std::vector<std::string> out;
        for (const auto& c : auto_codec_ladder()) out.push_back(c.name());
        return out;
      },
      "The codecs compression \"auto\" chooses among, least lossy first.");
  m.def(
      "choose_bucket_codecs",
      [](const std::vector<double>& ready_ms, const std::vector<std::vector<double>>& predicted_ms,
         double deadline_ms) {
        if (ready_ms.size() != predicted_ms.size())
          throw py::value_error("ready_ms and predicted_ms need one entry per bucket");
        std::vector<BucketTiming> b(ready_ms.size());
        for (size_t i = 0; i < b.size(); ++i) b[i] = {ready_ms[i], predicted_ms[i]};
        return choose_bucket_codecs(b, deadline_ms);
      },
      py::arg("ready_ms"), py::arg("predicted_ms"), py::arg("deadline_ms"),
      "Compression \"auto\": the ladder level of each bucket (geoccl/auto_codec.h) from when "
      "each was ready in the last iteration, its predicted allreduce time at every ladder level, "
      "and the time by which all must end.");

  py::class_<StoreServer, std::shared_ptr<StoreServer>>(m, "StoreServer",
      "The embedded rendezvous store (port 0 = any free port).")
      .def(py::init([](const std::string& addr, int port) {
             py::gil_scoped_release nogil;
             return std::make_shared<StoreServer>(addr, static_cast<uint16_t>(port));
           }),
           py::arg("bind_addr") = "127.0.0.1", py::arg("port") = 0)
      .def_property_readonly("port", &StoreServer::port);

  py::class_<PyWork>(m, "Work", "Handle of one asynchronous operation.")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Blocks until completion and its callbacks (timeout in seconds); raises GeocclError on "
           "failure.")
      .def("test", &PyWork::test, "True once completed (successfully or not).")
      .def("is_success", &PyWork::ok, "True when completed successfully.")
      .def("on_complete", &PyWork::on_complete, py::arg("fn"),
           "Calls fn(None) on success or fn(GeocclError) on failure, once, on a completion thread "
           "(never the one that runs collectives: fn may issue operations and wait on them); at "
           "once if already complete. wait() returns after fn has.");

  py::class_<Comm, CommHolder>(m, "Communicator",
      "A group of ranks. Buffers are numpy arrays or torch CPU tensors, contiguous, used in place. "
      "Every operation takes priority=\"gradient\" (default, highest) or \"bulk\" (background); "
      "every rank must use the same class for an operation.")
      .def(py::init([](int rank, int world_size, const std::string& master_addr, int master_port,
                       const std::string& session, std::optional<double> timeout_s) {
             Config c = group_config(rank, world_size, master_addr, master_port, session);
             if (timeout_s) c.op_timeout = std::chrono::milliseconds(static_cast<int64_t>(*timeout_s * 1000.0));
             py::gil_scoped_release nogil;
             return CommHolder(new Comm(std::move(c)));
           }),
           py::arg("rank"), py::arg("world_size"), py::arg("master_addr") = "127.0.0.1",
           py::arg("master_port") = 29500, py::arg("session") = "", py::arg("timeout") = py::none())
      .def_static("from_env", [] {
             py::gil_scoped_release nogil;
             return CommHolder(Comm::from_env().release());
           }, "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GEOCCL_* variables.")
      .def_property_readonly("rank", &Comm::rank)
      .def_property_readonly("size", &Comm::size)
      .def_property_readonly("epoch", &Comm::epoch, "The membership epoch (geoccl.elastic).")
      .def("abort", [](Comm& c, const std::string& reason) {
             py::gil_scoped_release nogil;
             c.abort(reason);
           }, py::arg("reason") = "",
           "Fails every pending operation here and on every reachable peer with GeocclError "
           "(aborted: rank and reason) within about a round trip; later operations fail at once.")
      .def("allreduce", [](Comm& c, py::object buf, const std::string& op, std::optional<double> t, const std::string& algo, const std::string& pr, std::optional<std::string> compression, const std::string& feedback_key) {
             View v = view_of(buf, true, "buf");
             ReduceOp o = parse_op(op);
             OpOptions oo = opts(t, algo, pr);
             oo.compression = parse_compression(compression);
             oo.feedback_key = feedback_key;
             return issue({buf}, [&] { return c.allreduce(v.data, v.count, v.dtype, o, oo); });
           }, py::arg("buf"), py::arg("op") = "sum", py::arg("timeout") = py::none(), py::arg("algo") = "", py::arg("priority") = "gradient",
           py::arg("compression") = py::none(), py::arg("feedback_key") = "",
           "In place. compression: a codec for the hops that cross domains (\"none\", \"fp16\", "
           "\"bf16\", \"int8\", \"int4\", \"int2\", \"int2-sr\", \"topk:RATIO\", "
           "\"topk-int8:RATIO\", \"topk-int4:RATIO\", \"topk-int2:RATIO\", optionally "
           "\"@allgather\" or \"@ring\"); "
           "None = GEOCCL_WAN_COMPRESSION for float32 sum/avg buffers of 64 KiB and up. An "
           "explicit codec on another dtype or op is a "
           "ValueError. feedback_key: keep what the codec dropped on this rank under this key and "
           "add it to the next allreduce with the same key (error feedback); \"\" = none.")
      .def("compression_stats", [](const Comm& c) { return compression_stats_dict(c.compression_stats()); },
           "What compressed allreduces did on this rank: calls, elements_encoded, bytes_encoded, "
           "feedback_keys and feedback_bytes (the memory of the error-feedback residuals).")
      .def("forget_feedback", [](Comm& c, const std::string& key) {
             py::gil_scoped_release nogil;
             c.forget_feedback(key);
           }, py::arg("key") = "",
           "Drops the residual kept under key (\"\" = all); a later allreduce with it starts afresh.")
      .def("broadcast", [](Comm& c, py::object buf, int root, std::optional<double> t, const std::string& pr) {
             View v = view_of(buf, true, "buf");
             return issue({buf}, [&] { return c.broadcast(v.data, v.count, v.dtype, root, opts(t, "", pr)); });
           }, py::arg("buf"), py::arg("root") = 0, py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("allgather", [](Comm& c, py::object send, py::object recv, std::optional<double> t, const std::string& pr) {
             View s = view_of(send, false, "send"), r = view_of(recv, true, "recv");
             same_type(s, r);
             need_count(r, s.count * static_cast<size_t>(c.size()), "recv");
             return issue({send, recv}, [&] { return c.allgather(s.data, r.data, s.count, s.dtype, opts(t, "", pr)); });
           }, py::arg("send"), py::arg("recv"), py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("reduce_scatter", [](Comm& c, py::object send, py::object recv, const std::string& op, std::optional<double> t, const std::string& pr) {
             View s = view_of(send, false, "send"), r = view_of(recv, true, "recv");
             same_type(s, r);
             need_count(s, r.count * static_cast<size_t>(c.size()), "send");
             ReduceOp o = parse_op(op);
             return issue({send, recv}, [&] { return c.reduce_scatter(s.data, r.data, r.count, s.dtype, o, opts(t, "", pr)); });
           }, py::arg("send"), py::arg("recv"), py::arg("op") = "sum", py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("reduce", [](Comm& c, py::object buf, int root, const std::string& op, std::optional<double> t, const std::string& pr) {
             View v = view_of(buf, true, "buf");
             ReduceOp o = parse_op(op);
             return issue({buf}, [&] { return c.reduce(v.data, v.count, v.dtype, o, root, opts(t, "", pr)); });
           }, py::arg("buf"), py::arg("root") = 0, py::arg("op") = "sum", py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("gather", [](Comm& c, py::object send, py::object recv, int root, std::optional<double> t, const std::string& pr) {
             View s = view_of(send, false, "send");
             View r;
             if (!recv.is_none()) {
               r = view_of(recv, true, "recv");
               same_type(s, r);
               need_count(r, s.count * static_cast<size_t>(c.size()), "recv");
             } else if (c.rank() == root) {
               throw std::invalid_argument("geoccl: gather needs recv at the root");
             }
             return issue({send, recv}, [&] { return c.gather(s.data, r.data, s.count, s.dtype, root, opts(t, "", pr)); });
           }, py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0, py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("scatter", [](Comm& c, py::object send, py::object recv, int root, std::optional<double> t, const std::string& pr) {
             View r = view_of(recv, true, "recv");
             View s;
             if (!send.is_none()) {
               s = view_of(send, false, "send");
               same_type(s, r);
               need_count(s, r.count * static_cast<size_t>(c.size()), "send");
             } else if (c.rank() == root) {
               throw std::invalid_argument("geoccl: scatter needs send at the root");
             }
             return issue({send, recv}, [&] { return c.scatter(s.data, r.data, r.count, r.dtype, root, opts(t, "", pr)); });
           }, py::arg("send"), py::arg("recv"), py::arg("root") = 0, py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("alltoall", [](Comm& c, py::object send, py::object recv, std::optional<double> t, const std::string& pr) {
             View s = view_of(send, false, "send"), r = view_of(recv, true, "recv");
             same_type(s, r);
             need_count(r, s.count, "recv");
             if (s.count % static_cast<size_t>(c.size()) != 0)
               throw std::invalid_argument("geoccl: alltoall buffers must hold a multiple of size() elements");
             size_t per = s.count / static_cast<size_t>(c.size());
             return issue({send, recv}, [&] { return c.alltoall(s.data, r.data, per, s.dtype, opts(t, "", pr)); });
           }, py::arg("send"), py::arg("recv"), py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("barrier", [](Comm& c, std::optional<double> t, const std::string& pr) {
             return issue({}, [&] { return c.barrier(opts(t, "", pr)); });
           }, py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("send", [](Comm& c, py::object buf, int peer, uint32_t tag, std::optional<double> t, const std::string& pr) {
             View v = view_of(buf, false, "buf");
             return issue({buf}, [&] { return c.send(v.data, v.count, v.dtype, peer, tag, opts(t, "", pr)); });
           }, py::arg("buf"), py::arg("peer"), py::arg("tag") = 0, py::arg("timeout") = py::none(), py::arg("priority") = "gradient")
      .def("recv", [](Comm& c, py::object buf, int peer, uint32_t tag, std::optional<double> t, const std::string& pr) {
             View v = view_of(buf, true, "buf");
             return issue({buf}, [&] { return c.recv(v.data, v.count, v.dtype, peer, tag, opts(t, "", pr)); });
           }, py::arg("buf"), py::arg("peer"), py::arg("tag") = 0, py::arg("timeout") = py::none(), py::arg("priority") = "gradient");
}

}  // namespace geoccl::python
