//===- RefOpAttrs.cpp - Reading the textual attributes of RefOps ----------===//
//
// Part of moec. Every attribute the reference reads is recorded: a missing
// one is an error naming it, never an ODS default restated here.
//
//===----------------------------------------------------------------------===//

#include "CheckInternal.h"

#include <cerrno>
#include <cstdlib>

namespace moec::check::detail {

namespace {

[[noreturn]] void badAttr(const rt::RefOp &op, const std::string &name,
                          const std::string &text, const char *expected) {
  throw std::invalid_argument("attribute '" + name + "' of " + op.name +
                              " is '" + text + "', expected " + expected);
}

} // namespace

const std::string *findAttr(const rt::RefOp &op, const std::string &name) {
  for (const auto &[key, value] : op.attrs)
    if (key == name)
      return &value;
  return nullptr;
}

namespace {

const std::string &requireAttr(const rt::RefOp &op, const std::string &name) {
  if (const std::string *text = findAttr(op, name))
    return *text;
  throw std::invalid_argument(op.name + " lacks its attribute '" + name + "'");
}

int64_t parseInt(const rt::RefOp &op, const std::string &name,
                 const std::string &text) {
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    badAttr(op, name, text, "an integer");
  return value;
}

std::optional<size_t> slotOf(const std::vector<std::string> &names,
                             const std::string &name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name)
      return i;
  return std::nullopt;
}

} // namespace

int64_t intAttr(const rt::RefOp &op, const std::string &name) {
  return parseInt(op, name, requireAttr(op, name));
}

std::optional<int64_t> optionalIntAttr(const rt::RefOp &op,
                                       const std::string &name) {
  const std::string *text = findAttr(op, name);
  if (!text)
    return std::nullopt;
  return parseInt(op, name, *text);
}

double floatAttr(const rt::RefOp &op, const std::string &name) {
  const std::string &text = requireAttr(op, name);
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    badAttr(op, name, text, "a number");
  return value;
}

bool boolAttr(const rt::RefOp &op, const std::string &name) {
  const std::string &text = requireAttr(op, name);
  if (text == "true")
    return true;
  if (text == "false")
    return false;
  badAttr(op, name, text, "true or false");
}

const std::string &enumAttr(const rt::RefOp &op, const std::string &name) {
  return requireAttr(op, name);
}

std::optional<size_t> operandSlot(const rt::RefOp &op,
                                  const std::string &name) {
  return slotOf(op.operandNames, name);
}

std::optional<size_t> resultSlot(const rt::RefOp &op, const std::string &name) {
  return slotOf(op.resultNames, name);
}

} // namespace moec::check::detail
