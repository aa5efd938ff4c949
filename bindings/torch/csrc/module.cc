// braid_torch._C: the Python face of BraidBackend. braid_torch/__init__.py registers it with
// torch.distributed as backend "braid".
#include <pybind11/chrono.h>  // timedelta <-> std::chrono (torch/extension.h leaves it out)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>
#include <torch/version.h>  // TORCH_VERSION_MAJOR / _MINOR: the torch this is compiled against

#include "braid_backend.h"

namespace py = pybind11;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.doc() = "braid's c10d backend (see braid_torch)";
  // torch.distributed must be imported first: it registers the c10d::Backend base class.
  py::module_::import("torch.distributed");
  py::class_<braid_torch::BraidBackend, c10d::Backend, c10::intrusive_ptr<braid_torch::BraidBackend>>(
      module, "BraidBackend")
      .def(py::init<const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds,
                    std::string>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("name") = "braid",
           // Joining waits for the other ranks: let other Python threads run meanwhile.
           py::call_guard<py::gil_scoped_release>())
      // new_group with split_from (braid_torch/__init__.py's creator): the member's child ...
      .def("split_member", &braid_torch::BraidBackend::SplitMember, py::arg("store"),
           py::arg("ranks"), py::arg("rank"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      // ... and what torch calls on a non-member's parent (its name for NCCL's NOCOLOR split).
      .def("perform_nocolor_split",
           [](braid_torch::BraidBackend& self, const py::object& /*device*/) { self.SplitNonMember(); },
           py::arg("device"), py::call_guard<py::gil_scoped_release>());
  // The torch minor version this extension was compiled against ("2.15").
  module.attr("TORCH_BUILT_AGAINST") =
      std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  module.def("version", [] {
    int version = 0;
    braidGetVersion(&version);
    return version;
  }, "braid's version code (major * 10000 + minor * 100 + patch)");
}
