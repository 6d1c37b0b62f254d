//===- PyStatus.h - moec runtime statuses as Python exceptions --*- C++ -*-===//
//
// Part of moec. Shared by the native modules: a failed rt::Status becomes
// ValueError for a caller's mistake (InvalidArgument), KeyError for
// NotFound, and the module's StatusError (a RuntimeError; the package
// re-exports them as moec.MoecError subclasses) for everything else.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PYTHON_PYSTATUS_H
#define MOEC_PYTHON_PYSTATUS_H

#include "moec/Runtime/Status.h"

#include <pybind11/pybind11.h>

#include <stdexcept>

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

} // namespace moec

#endif // MOEC_PYTHON_PYSTATUS_H
