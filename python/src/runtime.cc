//===- runtime.cc - moec._runtime: bundles, without MLIR or CUDA ----------===//
//
// Part of moec. The part of the Python package every machine can import: it
// reads and writes bundle files, describes their entries, evaluates buffer
// shapes for given sizes and reads DLPack capsules. Launching on a GPU is
// moec._cuda (it links libcuda); compiling is moec._compiler (it links MLIR).
//
//===----------------------------------------------------------------------===//

#include "PyStatus.h"

#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/Executor.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>

namespace py = pybind11;
using namespace moec;

namespace {

//===----------------------------------------------------------------------===//
// DLPack: the structs of the DLPack ABI (v0.8 unversioned and v1.x
// versioned capsules), as the protocol specifies them.
//===----------------------------------------------------------------------===//

struct DLDevice {
  int32_t deviceType; ///< 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed
  int32_t deviceId;
};
struct DLDataType {
  uint8_t code; ///< 0 int, 1 uint, 2 float, 4 bfloat, 10 f8e4m3fn, 12 f8e5m2
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; ///< in elements; null means row-major contiguous
  uint64_t byteOffset;
};
struct DLManagedTensor {
  DLTensor tensor;
  void *managerContext;
  void (*deleter)(DLManagedTensor *);
};
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *managerContext;
  void (*deleter)(DLManagedTensorVersioned *);
  uint64_t flags;
  DLTensor tensor;
};

/// The moec element type name of a DLPack dtype, or "" when moec has none.
std::string dlpackTypeName(DLDataType type) {
  if (type.lanes != 1)
    return "";
  switch (type.code) {
  case 0:
    return type.bits == 32 ? "i32" : type.bits == 64 ? "i64" : "";
  case 1:
    return type.bits == 8 ? "ui8" : "";
  case 2:
    return type.bits == 32 ? "f32" : type.bits == 16 ? "f16" : "";
  case 4:
    return type.bits == 16 ? "bf16" : "";
  case 10:
    return type.bits == 8 ? "f8E4M3FN" : "";
  case 12:
    return type.bits == 8 ? "f8E5M2" : "";
  default:
    return "";
  }
}

/// Describes the tensor in a DLPack capsule without consuming it (the
/// capsule's destructor still releases it; the producer's object keeps the
/// memory alive). Returns a dict the Python side validates.
py::dict describeDLPack(py::capsule capsule) {
  const char *name = capsule.name();
  const DLTensor *tensor = nullptr;
  if (name && std::strcmp(name, "dltensor") == 0)
    tensor = &static_cast<DLManagedTensor *>(capsule.get_pointer())->tensor;
  else if (name && std::strcmp(name, "dltensor_versioned") == 0)
    tensor =
        &static_cast<DLManagedTensorVersioned *>(capsule.get_pointer())->tensor;
  else
    throw py::value_error(std::string("not a DLPack capsule (name '") +
                          (name ? name : "") +
                          "'; was it consumed already?)");
  py::dict out;
  out["data"] = reinterpret_cast<uintptr_t>(tensor->data) +
                static_cast<uintptr_t>(tensor->byteOffset);
  out["device_type"] = tensor->device.deviceType;
  out["device_id"] = tensor->device.deviceId;
  std::string dtype = dlpackTypeName(tensor->dtype);
  out["dtype"] = dtype.empty()
                     ? "dlpack(code=" + std::to_string(tensor->dtype.code) +
                           ", bits=" + std::to_string(tensor->dtype.bits) +
                           ", lanes=" + std::to_string(tensor->dtype.lanes) +
                           ")"
                     : dtype;
  py::list shape, strides;
  for (int32_t i = 0; i < tensor->ndim; ++i) {
    shape.append(tensor->shape[i]);
    if (tensor->strides)
      strides.append(tensor->strides[i]);
  }
  out["shape"] = py::tuple(shape);
  out["strides"] = tensor->strides ? py::object(py::tuple(strides))
                                   : py::object(py::none());
  return out;
}

//===----------------------------------------------------------------------===//
// Bundles
//===----------------------------------------------------------------------===//

py::dict describeEntry(const rt::Entry &entry) {
  py::dict out;
  out["name"] = entry.name;
  out["target"] = entry.target;
  out["binary_kind"] = rt::binaryKindName(entry.binaryKind);
  out["binary_size"] = entry.binary.size();
  py::list symbols;
  for (const rt::SymbolDesc &s : entry.symbols)
    symbols.append(py::make_tuple(s.name, s.buffer, s.dim));
  out["symbols"] = symbols;
  py::list buffers;
  for (const rt::BufferDesc &b : entry.buffers) {
    py::dict d;
    d["name"] = b.name;
    d["role"] = rt::bufferRoleName(b.role);
    d["dtype"] = rt::elemTypeName(b.elem);
    d["dims"] = b.dims;
    buffers.append(d);
  }
  out["buffers"] = buffers;
  py::list steps;
  for (const rt::LaunchStep &s : entry.steps) {
    py::dict d;
    d["kernel"] = s.kernel;
    d["grid"] = s.grid;
    d["block"] = s.blockSize;
    d["shared_bytes"] = s.dynamicSharedBytes;
    d["tile"] = s.tile;
    steps.append(d);
  }
  out["steps"] = steps;
  py::list refOps;
  for (const rt::RefOp &op : entry.refOps) {
    py::dict d, attrs;
    d["name"] = op.name;
    for (auto &[k, v] : op.attrs)
      attrs[py::str(k)] = v;
    d["attrs"] = attrs;
    d["operands"] = op.operands;
    d["operand_names"] = op.operandNames;
    d["results"] = op.results;
    d["result_names"] = op.resultNames;
    refOps.append(d);
  }
  out["ref_ops"] = refOps;
  out["source"] = entry.source;
  return out;
}

const rt::Entry &entryAt(const rt::Bundle &bundle, size_t index) {
  if (index >= bundle.entries.size())
    throw py::index_error("entry index " + std::to_string(index) +
                          " out of range (the bundle has " +
                          std::to_string(bundle.entries.size()) + ")");
  return bundle.entries[index];
}

} // namespace

PYBIND11_MODULE(_runtime, m) {
  m.doc() = "moec bundles without MLIR or CUDA: read, write, describe";
  registerStatusExceptions(m);

  py::class_<rt::Bundle>(m, "Bundle")
      .def_static(
          "from_bytes",
          [](py::bytes data) {
            std::string bytes = data;
            rt::Bundle bundle;
            throwIfError(rt::readBundle(
                reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(),
                bundle));
            return bundle;
          },
          py::arg("data"), "Parses and validates bundle bytes.")
      .def_static(
          "read",
          [](const std::string &path) {
            rt::Bundle bundle;
            throwIfError(rt::readBundleFile(path, bundle));
            return bundle;
          },
          py::arg("path"), "Reads and validates a .moecb file.")
      .def(
          "to_bytes",
          [](const rt::Bundle &bundle) {
            std::vector<uint8_t> bytes;
            throwIfError(rt::writeBundle(bundle, bytes));
            return py::bytes(reinterpret_cast<const char *>(bytes.data()),
                             bytes.size());
          })
      .def(
          "save",
          [](const rt::Bundle &bundle, const std::string &path) {
            throwIfError(rt::writeBundleFile(bundle, path));
          },
          py::arg("path"))
      .def_property_readonly("producer",
                             [](const rt::Bundle &b) { return b.producer; })
      .def_property_readonly("version",
                             [](const rt::Bundle &b) { return b.version; })
      .def_property_readonly("num_entries",
                             [](const rt::Bundle &b) {
                               return b.entries.size();
                             })
      .def(
          "entry",
          [](const rt::Bundle &b, size_t index) {
            return describeEntry(entryAt(b, index));
          },
          py::arg("index"),
          "The entry as a dict: name, target, binary_kind, symbols, buffers "
          "(name, role, dtype, dims), steps, ref_ops, source.")
      .def(
          "binary",
          [](const rt::Bundle &b, size_t index) {
            const rt::Entry &entry = entryAt(b, index);
            return py::bytes(reinterpret_cast<const char *>(entry.binary.data()),
                             entry.binary.size());
          },
          py::arg("index"))
      .def(
          "bind_symbols",
          [](const rt::Bundle &b, size_t index,
             const std::vector<std::vector<int64_t>> &inputShapes) {
            const rt::Entry &entry = entryAt(b, index);
            std::vector<rt::ArrayRef> inputs;
            for (size_t i = 0; i < inputShapes.size(); ++i) {
              rt::ArrayRef array;
              array.shape = inputShapes[i];
              inputs.push_back(array);
            }
            std::vector<int64_t> symbols;
            throwIfError(rt::bindSymbols(entry, inputs, symbols));
            return symbols;
          },
          py::arg("index"), py::arg("input_shapes"),
          "The values of the entry's symbols read from the input shapes.")
      .def(
          "buffer_shapes",
          [](const rt::Bundle &b, size_t index,
             const std::vector<int64_t> &symbols) {
            std::vector<std::vector<int64_t>> shapes;
            throwIfError(rt::bufferShapes(entryAt(b, index), symbols, shapes));
            return shapes;
          },
          py::arg("index"), py::arg("symbols"),
          "The shape of every buffer of the entry for the given symbols.")
      .def(
          "scratch_bytes",
          [](const rt::Bundle &b, size_t index,
             const std::vector<int64_t> &symbols) {
            const rt::Entry &entry = entryAt(b, index);
            std::vector<std::vector<int64_t>> shapes;
            throwIfError(rt::bufferShapes(entry, symbols, shapes));
            rt::ScratchPlan plan;
            throwIfError(rt::planScratch(entry, shapes, plan));
            return plan.bytes;
          },
          py::arg("index"), py::arg("symbols"),
          "Bytes of the one scratch allocation a call of the entry makes "
          "for the given symbols (temps not live together share bytes).");

  m.def("describe_dlpack", &describeDLPack, py::arg("capsule"),
        "Pointer, device, dtype, shape and strides of a DLPack capsule.");
}
