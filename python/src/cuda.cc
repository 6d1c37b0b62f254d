//===- cuda.cc - moec._cuda: launch bundle entries with the CUDA driver ---===//
//
// Part of moec. Links only the CUDA driver API (libcuda) and the MLIR-free
// runtime. Importing it fails where libcuda.so.1 is missing (no GPU
// driver); the Python package reports that as "CUDA unavailable".
//
//===----------------------------------------------------------------------===//

#include "PyStatus.h"

#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/CudaLauncher.h"
#include "moec/Runtime/Executor.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>

namespace py = pybind11;
using namespace moec;

namespace {

/// A parsed bundle and one CudaLauncher per stream (a launcher caches the
/// loaded modules, so repeated launches do not reload them).
class Program {
public:
  explicit Program(py::bytes data) {
    std::string bytes = data;
    throwIfError(rt::readBundle(reinterpret_cast<const uint8_t *>(bytes.data()),
                                bytes.size(), bundle_));
  }

  void run(size_t index, const std::vector<ArraySpec> &inputs,
           const std::vector<ArraySpec> &outputs, uintptr_t stream) {
    if (index >= bundle_.entries.size())
      throw py::index_error("entry index out of range");
    const rt::Entry &entry = bundle_.entries[index];
    std::vector<rt::ArrayRef> in = toArrays(inputs, "input");
    std::vector<rt::ArrayRef> out = toArrays(outputs, "output");
    py::gil_scoped_release release;
    throwIfError(rt::runEntry(entry, in, out, launcherFor(stream)));
  }

  void synchronize(uintptr_t stream) {
    py::gil_scoped_release release;
    throwIfError(launcherFor(stream).synchronize());
  }

private:
  rt::CudaLauncher &launcherFor(uintptr_t stream) {
    std::unique_ptr<rt::CudaLauncher> &launcher = launchers_[stream];
    if (!launcher)
      launcher = std::make_unique<rt::CudaLauncher>(
          reinterpret_cast<void *>(stream));
    return *launcher;
  }

  rt::Bundle bundle_;
  std::map<uintptr_t, std::unique_ptr<rt::CudaLauncher>> launchers_;
};

} // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "moec bundle launches through the CUDA driver API";
  registerStatusExceptions(m);

  m.def(
      "init", [] { throwIfError(rt::cudaInit()); },
      "Initializes the driver and makes a context current (PyTorch's if it "
      "has one). Raises StatusError without a usable GPU.");
  m.def("device_info", [] {
    rt::CudaDeviceInfo info;
    throwIfError(rt::cudaDeviceInfo(info));
    py::dict out;
    out["name"] = info.name;
    out["capability"] = py::make_tuple(info.major, info.minor);
    out["multiprocessors"] = info.multiprocessors;
    out["total_memory"] = info.totalMemory;
    return out;
  });

  py::class_<Program>(m, "Program")
      .def(py::init<py::bytes>(), py::arg("bundle_bytes"))
      .def("run", &Program::run, py::arg("index"), py::arg("inputs"),
           py::arg("outputs"), py::arg("stream"),
           "Launches entry `index` on `stream` (a CUstream as an int; 0 is "
           "the default stream). Arrays are (address, dtype, shape). "
           "Asynchronous.")
      .def("synchronize", &Program::synchronize, py::arg("stream"));
}
