// Python module nezha._C: the NezhaBackend class, bound with torch's own pybind11 so the object
// is a c10d.Backend that torch.distributed accepts from a register_backend creator.
#include <torch/csrc/utils/pybind.h>

#include "backend.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "nezha c10d backend (CPU tensors over libnezha's rails)";
  // c10d.Backend must be registered with pybind before we derive from it.
  py::module::import("torch.distributed");
  py::class_<nezha_torch::NezhaBackend, c10d::Backend,
             c10::intrusive_ptr<nezha_torch::NezhaBackend>>(m, "NezhaBackend")
      // Joining the job blocks (rendezvous, rails, probe): release the GIL meanwhile.
      .def(py::init([](c10d::Store& store, int rank, int size) {
             return c10::make_intrusive<nezha_torch::NezhaBackend>(store, rank, size);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::call_guard<py::gil_scoped_release>())
      .def(
          "abort_rail",
          [](nezha_torch::NezhaBackend& b, int rail) { b.communicator().abortRail(rail); },
          py::arg("rail"),
          "Breaks rail `rail`'s connections (fault injection for tests; any thread).")
      .def("rail_names",
           [](nezha_torch::NezhaBackend& b) {
             std::vector<std::string> names;
             for (const auto& r : b.communicator().rails()) names.push_back(r.name);
             return names;
           })
      .def("failover_count", [](nezha_torch::NezhaBackend& b) {
        // Read on the caller's thread while the worker may run: only call between operations.
        return b.communicator().metrics().failovers.size();
      });
}
