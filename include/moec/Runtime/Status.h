//===- Status.h - Error codes with messages for the runtime -----*- C++ -*-===//
//
// Part of moec. The runtime reports every failure as a Status: a code a
// program can branch on and a message a person can read. No exceptions, so
// the runtime links into anything.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_RUNTIME_STATUS_H
#define MOEC_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace moec::rt {

enum class ErrorCode {
  Ok = 0,
  InvalidBundle,   ///< malformed or inconsistent bundle bytes
  InvalidArgument, ///< a caller's argument (shape, dtype, pointer) is wrong
  NotFound,        ///< no such entry, kernel or file
  Unsupported,     ///< valid, but not supported here (e.g. no CUDA)
  DeviceError,     ///< the CUDA driver reported an error
  IoError,         ///< reading or writing a file failed
};

const char *errorCodeName(ErrorCode code);

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool isOk() const { return code_ == ErrorCode::Ok; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string &message() const { return message_; }
  /// "invalid bundle: <message>"
  std::string toString() const;

private:
  ErrorCode code_ = ErrorCode::Ok;
  std::string message_;
};

} // namespace moec::rt

#endif // MOEC_RUNTIME_STATUS_H
