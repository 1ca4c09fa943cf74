// Python module nezha._C: the NezhaBackend class, bound with torch's own pybind11 so the object
// is a c10d.Backend that torch.distributed accepts from a register_backend creator.
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <vector>

#include "backend.h"

namespace py = pybind11;

namespace {

// The backends this process created, for the interpreter-exit hook (nezha/torch/__init__.py):
// a job that never calls destroy_process_group still has the worker threads running when
// Python finalizes, and NezhaBackend::shutdown must run before that. Process-wide because
// torch keeps backends inside C++ process groups that Python cannot enumerate; weak, so a
// destroyed group's backend is never kept alive by it.
class LiveBackends {
 public:
  void add(const c10::intrusive_ptr<nezha_torch::NezhaBackend>& b) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(backends_, [](const auto& w) { return w.expired(); });
    backends_.emplace_back(b);
  }
  void shutdownAll() {
    std::vector<c10::weak_intrusive_ptr<nezha_torch::NezhaBackend>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all.swap(backends_);
    }
    for (auto& w : all) {
      if (auto b = w.lock()) b->shutdown();
    }
  }

 private:
  std::mutex mu_;
  std::vector<c10::weak_intrusive_ptr<nezha_torch::NezhaBackend>> backends_;
};

LiveBackends& liveBackends() {
  static LiveBackends* live = new LiveBackends();  // never destroyed: used until exit
  return *live;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "nezha c10d backend (CPU tensors over libnezha's rails)";
  // c10d.Backend must be registered with pybind before we derive from it.
  py::module::import("torch.distributed");
  py::class_<nezha_torch::NezhaBackend, c10d::Backend,
             c10::intrusive_ptr<nezha_torch::NezhaBackend>>(m, "NezhaBackend")
      // Joining the job blocks (rendezvous, rails, probe): release the GIL meanwhile.
      .def(py::init([](c10d::Store& store, int rank, int size, bool rendezvousThroughStore,
                       int64_t timeoutMs, bool checkSignatures) {
             TORCH_CHECK(timeoutMs > 0, "nezha backend: timeout_ms must be positive, got ",
                         timeoutMs);
             auto b = c10::make_intrusive<nezha_torch::NezhaBackend>(
                 store, rank, size, rendezvousThroughStore, std::chrono::milliseconds(timeoutMs),
                 checkSignatures);
             liveBackends().add(b);
             return b;
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("rendezvous_through_store") = false, py::arg("timeout_ms") = 1800000,
           py::arg("check_signatures") = true, py::call_guard<py::gil_scoped_release>())
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
      .def(
          "allreduce_with_priority",
          [](nezha_torch::NezhaBackend& b, const at::Tensor& tensor, int64_t priority) {
            return b.allreduceWithPriority(tensor, priority);
          },
          py::arg("tensor"), py::arg("priority"),
          "SUM allreduce of `tensor` in place that may overtake queued prioritised operations "
          "(priority 0..2^31-1, higher first); returns a Work. See nezha.torch.priority_hook.")
      .def("recent_order", &nezha_torch::NezhaBackend::recentOrder,
           "(issue number, priority or -1) of the last 4096 collectives, in the order this rank's "
           "worker started them (issue number 0: the first collective).")
      .def("shutdown", &nezha_torch::NezhaBackend::shutdown,
           "Runs queued operations, joins the backend's threads; later operations raise.")
      .def("failover_count", [](nezha_torch::NezhaBackend& b) {
        // Read on the caller's thread while the worker may run: only call between operations.
        return b.communicator().metrics().failovers.size();
      });
  m.def(
      "_shutdown_all", [] { liveBackends().shutdownAll(); },
      py::call_guard<py::gil_scoped_release>(),
      "Shuts down every live NezhaBackend (the interpreter-exit hook; see "
      "NezhaBackend::shutdown).");
}
