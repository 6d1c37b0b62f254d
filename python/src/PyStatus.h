//===- PyStatus.h - moec runtime statuses as Python exceptions --*- C++ -*-===//
//
// Part of moec. Shared by the native modules: a failed rt::Status becomes
// ValueError for a caller's mistake (InvalidArgument), KeyError for
// NotFound, and the module's StatusError (a RuntimeError; the package
// re-exports them as moec.MoecError subclasses) for everything else. Also
// the (address, dtype, shape) arrays the package passes to launches.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PYTHON_PYSTATUS_H
#define MOEC_PYTHON_PYSTATUS_H

#include "moec/Runtime/Executor.h"
#include "moec/Runtime/Status.h"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace moec {

/// Thrown for failed statuses that are not argument errors; safe to throw
/// with the GIL released (pybind11 translates it once the call returns).
class StatusError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Registers StatusError as `<module>.StatusError`, local to the module so
/// that each native module can register its own.
inline void registerStatusExceptions(pybind11::module_ &m) {
  pybind11::register_local_exception<StatusError>(m, "StatusError",
                                                  PyExc_RuntimeError);
}

inline void throwIfError(const rt::Status &status) {
  if (status.isOk())
    return;
  if (status.code() == rt::ErrorCode::InvalidArgument)
    throw pybind11::value_error(status.message());
  if (status.code() == rt::ErrorCode::NotFound)
    throw pybind11::key_error(status.message());
  throw StatusError(status.toString());
}

/// (address, element type name, shape): an array as the package passes it.
using ArraySpec = std::tuple<uintptr_t, std::string, std::vector<int64_t>>;

/// The runtime's view of `specs`; `what` ("input", "output") names them in
/// the error for an unknown element type.
inline std::vector<rt::ArrayRef> toArrays(const std::vector<ArraySpec> &specs,
                                          const char *what) {
  std::vector<rt::ArrayRef> arrays;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto &[address, dtype, shape] = specs[i];
    rt::ArrayRef array;
    array.data = reinterpret_cast<void *>(address);
    if (!rt::parseElemType(dtype, array.elem))
      throw pybind11::value_error(std::string(what) + " " +
                                  std::to_string(i) +
                                  ": unknown element type '" + dtype + "'");
    array.shape = shape;
    arrays.push_back(std::move(array));
  }
  return arrays;
}

} // namespace moec

#endif // MOEC_PYTHON_PYSTATUS_H
