//===- RefOpAttrs.cpp - Reading the textual attributes of RefOps ----------===//
//
// Part of moec.
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

int64_t intAttr(const rt::RefOp &op, const std::string &name,
                int64_t defaultValue) {
  const std::string *text = findAttr(op, name);
  if (!text)
    return defaultValue;
  errno = 0;
  char *end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE)
    badAttr(op, name, *text, "an integer");
  return value;
}

int64_t requiredIntAttr(const rt::RefOp &op, const std::string &name) {
  if (!findAttr(op, name))
    throw std::invalid_argument(op.name + " lacks its attribute '" + name +
                                "'");
  return intAttr(op, name, 0);
}

double floatAttr(const rt::RefOp &op, const std::string &name,
                 double defaultValue) {
  const std::string *text = findAttr(op, name);
  if (!text)
    return defaultValue;
  char *end = nullptr;
  double value = std::strtod(text->c_str(), &end);
  if (text->empty() || *end != '\0')
    badAttr(op, name, *text, "a number");
  return value;
}

bool boolAttr(const rt::RefOp &op, const std::string &name) {
  const std::string *text = findAttr(op, name);
  if (!text)
    return false;
  if (text->empty() || *text == "true" || *text == "1" || *text == "unit")
    return true;
  if (*text == "false" || *text == "0")
    return false;
  badAttr(op, name, *text, "true or false");
}

std::string enumAttr(const rt::RefOp &op, const std::string &name,
                     const std::string &defaultValue) {
  const std::string *text = findAttr(op, name);
  return text ? *text : defaultValue;
}

int64_t sortExperts(const rt::RefOp &op) {
  if (findAttr(op, "num_experts"))
    return intAttr(op, "num_experts", 0);
  if (findAttr(op, "experts"))
    return intAttr(op, "experts", 0);
  throw std::invalid_argument(
      "moe.sort_by_expert lacks its attribute 'num_experts'");
}

} // namespace moec::check::detail
