// geoccl._C.broadcast_blob / broadcast_blob_file / send_file / recv_file: the blob layer
// (geoccl/blob.h) for a Communicator or a "geoccl" torch process group. python/geoccl/checkpoint.py
// builds the state_dict and checkpoint helpers on these.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "geoccl/blob.h"
#include "process_group.h"

namespace py = pybind11;

namespace geoccl::python {
namespace {

// Runs on the calling thread while the transfer has released the GIL.
std::function<void(const BlobProgress&)> progress_callback(py::object progress) {
  return [progress](const BlobProgress& p) {
    py::gil_scoped_acquire gil;
    py::dict d;
    d["bytes_total"] = p.bytes_total;
    d["bytes_done"] = p.bytes_done;
    d["wire_bytes"] = p.wire_bytes;
    d["rate_bytes_per_s"] = p.rate_bytes_per_s;
    d["eta_s"] = p.eta_s;
    d["chunks_refetched"] = p.chunks_refetched;
    progress(d);
  };
}

// BlobOptions from keyword arguments: chunk_bytes, window, codec, zstd_level, resume,
// expected_size, timeout (seconds), progress (a callable taking a dict). TypeError for others.
BlobOptions options(const py::kwargs& kw) {
  BlobOptions o;
  for (const auto& [k, v] : kw) {
    const auto key = k.cast<std::string>();
    if (key == "chunk_bytes")
      o.chunk_bytes = v.cast<size_t>();
    else if (key == "window")
      o.window_chunks = v.cast<size_t>();
    else if (key == "codec")
      o.codec = v.cast<std::string>();
    else if (key == "zstd_level")
      o.zstd_level = v.cast<int>();
    else if (key == "resume")
      o.resume = v.cast<bool>();
    else if (key == "expected_size" && !v.is_none())
      o.expected_size = v.cast<uint64_t>();
    else if (key == "timeout" && !v.is_none())
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(v.cast<double>() * 1000.0));
    else if (key == "progress" && !v.is_none())
      o.progress = progress_callback(py::reinterpret_borrow<py::object>(v));
    else if (key != "expected_size" && key != "timeout" && key != "progress")
      throw py::type_error("geoccl: unknown blob option '" + key + "'");
  }
  return o;
}

py::dict to_dict(const BlobResult& r) {
  py::dict d;
  d["object_bytes"] = r.object_bytes;
  d["object_hash"] = r.object_hash;
  d["chunks"] = r.chunks;
  d["chunks_sent"] = r.chunks_sent;
  d["chunks_resumed"] = r.chunks_resumed;
  d["chunks_refetched"] = r.chunks_refetched;
  d["rounds"] = r.rounds;
  d["bytes_sent"] = r.bytes_sent;
  d["wire_bytes"] = r.wire_bytes;
  d["chunks_by_codec"] =
      py::dict(py::arg("none") = r.chunks_by_codec[0], py::arg("lz4") = r.chunks_by_codec[1],
               py::arg("zstd") = r.chunks_by_codec[2]);
  d["seconds"] = r.seconds;
  return d;
}

// Runs the transfer without the GIL; the result as a dict.
template <class F>
py::dict released(F&& f) {
  BlobResult r;
  {
    py::gil_scoped_release nogil;
    r = f();
  }
  return to_dict(r);
}

}  // namespace

void bind_blob(py::module_& m) {
  const char* kw_doc =
      " Keyword options: chunk_bytes, window, codec ('auto', 'none', 'lz4', 'zstd'), zstd_level, "
      "resume, "
      "expected_size, timeout (s, per operation), progress (callable receiving a dict).";
  m.def(
      "broadcast_blob",
      [](py::object target, int root, py::object data, const py::kwargs& kw) {
        Communicator& c = communicator_of(target);
        const BlobOptions o = options(kw);
        std::span<const uint8_t> in;
        std::optional<py::buffer_info> info;
        if (c.rank() == root) {
          if (data.is_none())
            throw py::value_error("geoccl: the root must pass the data to broadcast");
          info = py::buffer(data).request();
          in = {static_cast<const uint8_t*>(info->ptr),
                static_cast<size_t>(info->size * info->itemsize)};
        }
        std::vector<uint8_t> out;
        py::dict result = released([&] { return broadcast_blob(c, root, in, &out, o); });
        py::object got =
            c.rank() == root
                ? py::none()
                : py::object(py::bytes(reinterpret_cast<const char*>(out.data()), out.size()));
        return py::make_tuple(got, result);
      },
      py::arg("target"), py::arg("root"), py::arg("data") = py::none(),
      (std::string("Broadcasts bytes (any contiguous buffer) from root on the bulk class; returns "
                   "(bytes, or None at "
                   "the root; result dict). Every rank calls it.") +
       kw_doc)
          .c_str());
  m.def(
      "broadcast_blob_file",
      [](py::object target, int root, const std::string& src, const std::string& dst,
         const py::kwargs& kw) {
        Communicator& c = communicator_of(target);
        const BlobOptions o = options(kw);
        return released([&] { return broadcast_blob_file(c, root, src, dst, o); });
      },
      py::arg("target"), py::arg("root"), py::arg("src"), py::arg("dst"),
      (std::string("Broadcasts the file src (root) to dst on every other rank, resumably; returns "
                   "the result dict.") +
       kw_doc)
          .c_str());
  // The two ends of a point-to-point file transfer.
  using PairFn = BlobResult (*)(Communicator&, int, const std::string&, const BlobOptions&);
  const struct {
    const char* name;
    PairFn fn;
    const char* doc;
  } pair_fns[] = {
      {"send_file", &send_file, "Sends a file to peer, which calls recv_file."},
      {"recv_file", &recv_file, "Receives a file from peer, which calls send_file; resumable."}};
  for (const auto& f : pair_fns)
    m.def(
        f.name,
        [fn = f.fn](py::object target, int peer, const std::string& path, const py::kwargs& kw) {
          Communicator& c = communicator_of(target);
          const BlobOptions o = options(kw);
          return released([&] { return fn(c, peer, path, o); });
        },
        py::arg("target"), py::arg("peer"), py::arg("path"), (std::string(f.doc) + kw_doc).c_str());
}

}  // namespace geoccl::python
