// geoccl._C.ElasticGroup: elastic membership (geoccl/elastic.h) for Python. Each epoch's
// communicator is handed out as a ProcessGroupGeoccl (a torch process group of backend "geoccl"),
// made once per epoch and shared with the group; python/geoccl/elastic.py builds the per-step
// quorum manager on it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <string>

#include "common.h"
#include "geoccl/elastic.h"
#include "process_group.h"

namespace py = pybind11;

namespace geoccl::python {
namespace {

// The group and the process group of its current epoch (rebuilt when the epoch changes).
struct PyElastic {
  std::unique_ptr<ElasticGroup> group;
  c10::intrusive_ptr<ProcessGroupGeoccl> pg;
  uint32_t pg_epoch = 0;

  c10::intrusive_ptr<ProcessGroupGeoccl> process_group() {
    if (!pg || pg_epoch != group->epoch()) {
      pg = c10::make_intrusive<ProcessGroupGeoccl>(group->shared_comm());
      pg_epoch = group->epoch();
    }
    return pg;
  }
  // The old epoch's process group goes before the next is formed, so that its connections close
  // unless the caller still holds it.
  void drop_pg() {
    py::gil_scoped_release nogil;
    pg.reset();
  }
};

}  // namespace

void bind_elastic(py::module_& m) {
  py::class_<PyElastic>(m, "ElasticGroup",
      "Elastic membership: epochs of communicators that survive member loss and admit joiners "
      "(docs/elastic.md). Needs a standalone store at master_addr:master_port.")
      .def(py::init([](int rank, int world_size, const std::string& master_addr, int master_port,
                       const std::string& session, double timeout_s, double join_window_s,
                       double join_timeout_s, double connect_timeout_s, int min_members, bool join) {
             Config c = group_config(rank, world_size, master_addr, master_port, session);
             c.op_timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
             auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0)); };
             ElasticOptions o;
             o.join_window = ms(join_window_s);
             o.join_timeout = ms(join_timeout_s);
             o.connect_timeout = ms(connect_timeout_s);
             o.min_members = min_members;
             c.connect_timeout = o.connect_timeout;
             auto p = std::make_unique<PyElastic>();
             py::gil_scoped_release nogil;
             p->group = join ? ElasticGroup::join(std::move(c), o) : std::make_unique<ElasticGroup>(std::move(c), o);
             return p;
           }),
           py::arg("rank"), py::arg("world_size"), py::arg("master_addr") = "127.0.0.1",
           py::arg("master_port") = 29500, py::arg("session") = "", py::arg("timeout") = 300.0,
           py::arg("join_window") = 3.0, py::arg("join_timeout") = 300.0,
           py::arg("connect_timeout") = 30.0, py::arg("min_members") = 1, py::arg("join") = false,
           "Epoch 0 among world_size ranks, or (a group of this session exists, or join=True) "
           "waits to be admitted into the running group.")
      .def_property_readonly("epoch", [](PyElastic& p) { return p.group->epoch(); })
      .def_property_readonly("rank", [](PyElastic& p) { return p.group->rank(); })
      .def_property_readonly("size", [](PyElastic& p) { return p.group->size(); })
      .def_property_readonly("joined", [](PyElastic& p) { return p.group->joined(); },
                             "True when this process is new in the current epoch (its state is stale).")
      .def_property_readonly("state_source", [](PyElastic& p) { return p.group->state_source(); },
                             "Lowest rank that continued from the previous epoch (-1: none).")
      .def_property_readonly("members", [](PyElastic& p) {
             py::list out;
             for (const auto& m : p.group->members())
               out.append(py::dict(py::arg("uid") = m.uid, py::arg("prev_rank") = m.prev_rank,
                                   py::arg("label") = m.label));
             return out;
           })
      .def("process_group", &PyElastic::process_group,
           "The current epoch's torch process group (backend \"geoccl\"), one per epoch.")
      .def("next_epoch", [](PyElastic& p) {
             p.drop_pg();
             py::gil_scoped_release nogil;
             return p.group->next_epoch();
           }, "After a failure: forms the next epoch among the survivors and waiting joiners.")
      .def("maybe_grow", [](PyElastic& p) {
             py::gil_scoped_release nogil;
             return p.group->maybe_grow();
           }, "At a step boundary on every member: True when joiners were admitted (new epoch).");
}

}  // namespace geoccl::python
