//===- Status.cpp - Error codes with messages for the runtime -------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Status.h"

namespace moec::rt {

const char *errorCodeName(ErrorCode code) {
  switch (code) {
  case ErrorCode::Ok:
    return "ok";
  case ErrorCode::InvalidBundle:
    return "invalid bundle";
  case ErrorCode::InvalidArgument:
    return "invalid argument";
  case ErrorCode::NotFound:
    return "not found";
  case ErrorCode::Unsupported:
    return "unsupported";
  case ErrorCode::DeviceError:
    return "device error";
  case ErrorCode::IoError:
    return "I/O error";
  }
  return "unknown error";
}

std::string Status::toString() const {
  if (isOk())
    return "ok";
  return std::string(errorCodeName(code_)) + ": " + message_;
}

} // namespace moec::rt
