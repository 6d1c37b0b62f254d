//===- Expr.cpp - Size expressions over symbols ---------------------------===//
//
// Part of moec. One interpreter serves both validateExpr (types only: every
// value is "some non-negative int64") and evalExpr (real values, with every
// overflow, negative result and division by zero reported).
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Expr.h"

#include <cstring>
#include <string_view>

namespace moec::rt {

namespace {

enum class OpKind { Add, Sub, Mul, Div, CDiv, Min, Max };

/// Expressions can be long (the writer caps them at 1 MiB); messages quote
/// only their beginning.
std::string quoteExpr(const std::string &rpn) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  for (size_t i = 0; i < rpn.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(rpn[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (rpn.size() > kMax)
    out += "...";
  return out + "'";
}

bool parseOp(std::string_view tok, OpKind &op) {
  static const struct {
    const char *text;
    OpKind op;
  } kOps[] = {{"+", OpKind::Add},  {"-", OpKind::Sub},     {"*", OpKind::Mul},
              {"/", OpKind::Div},  {"cdiv", OpKind::CDiv}, {"min", OpKind::Min},
              {"max", OpKind::Max}};
  for (const auto &entry : kOps) {
    if (tok == entry.text) {
      op = entry.op;
      return true;
    }
  }
  return false;
}

/// Decimal digits only (no sign); false when empty, not digits, or above
/// INT64_MAX.
bool parseDecimal(std::string_view digits, int64_t &value) {
  if (digits.empty())
    return false;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return false;
    if (__builtin_mul_overflow(v, int64_t(10), &v) ||
        __builtin_add_overflow(v, int64_t(c - '0'), &v))
      return false;
  }
  value = v;
  return true;
}

bool allDigits(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (c < '0' || c > '9')
      return false;
  return true;
}

/// Applies `op`; on failure returns false and sets `why`.
bool apply(OpKind op, int64_t a, int64_t b, int64_t &r, const char *&why) {
  switch (op) {
  case OpKind::Add:
    if (__builtin_add_overflow(a, b, &r)) {
      why = "overflows int64";
      return false;
    }
    return true;
  case OpKind::Sub:
    r = a - b; // a, b >= 0: cannot overflow
    if (r < 0) {
      why = "negative result";
      return false;
    }
    return true;
  case OpKind::Mul:
    if (__builtin_mul_overflow(a, b, &r)) {
      why = "overflows int64";
      return false;
    }
    return true;
  case OpKind::Div:
  case OpKind::CDiv:
    if (b == 0) {
      why = "division by zero";
      return false;
    }
    r = a / b + (op == OpKind::CDiv && a % b != 0);
    return true;
  case OpKind::Min:
    r = a < b ? a : b;
    return true;
  case OpKind::Max:
    r = a > b ? a : b;
    return true;
  }
  why = "unknown operator";
  return false;
}

/// Runs `rpn`. With `symbols` null, only checks syntax and symbol indices
/// (against `numSymbols`); otherwise computes `value`.
Status interpret(const std::string &rpn, size_t numSymbols,
                 const std::vector<int64_t> *symbols, int64_t *value) {
  auto fail = [&](const std::string &what) {
    return Status(ErrorCode::InvalidArgument,
                  "expression " + quoteExpr(rpn) + ": " + what);
  };
  if (rpn.empty())
    return fail("empty");

  std::vector<int64_t> stack;
  size_t pos = 0, index = 0;
  while (true) {
    size_t end = rpn.find(' ', pos);
    if (end == std::string::npos)
      end = rpn.size();
    std::string_view tok(rpn.data() + pos, end - pos);
    // Built only on error: evaluation runs on every launch.
    auto where = [&] {
      return "token " + std::to_string(index) + " (column " +
             std::to_string(pos) + ")";
    };
    if (tok.empty())
      return fail(where() +
                  ": empty token (tokens are separated by single spaces)");

    OpKind op;
    int64_t literal;
    if (tok[0] >= '0' && tok[0] <= '9') {
      if (!parseDecimal(tok, literal))
        return fail(where() + ": '" + std::string(tok) +
                    "' is not a decimal integer in [0, 2^63-1]");
      stack.push_back(literal);
    } else if (tok[0] == 's' && allDigits(tok.substr(1))) {
      int64_t i;
      if (!parseDecimal(tok.substr(1), i) ||
          static_cast<uint64_t>(i) >= numSymbols)
        return fail(where() + ": symbol " + std::string(tok) +
                    " out of range (" + std::to_string(numSymbols) +
                    " symbols)");
      int64_t v = 0;
      if (symbols) {
        v = (*symbols)[static_cast<size_t>(i)];
        if (v < 0)
          return fail(where() + ": symbol " + std::string(tok) +
                      " is negative (" + std::to_string(v) + ")");
      }
      stack.push_back(v);
    } else if (parseOp(tok, op)) {
      if (stack.size() < 2)
        return fail(where() + ": '" + std::string(tok) +
                    "' needs two operands, the stack has " +
                    std::to_string(stack.size()));
      int64_t b = stack.back();
      stack.pop_back();
      int64_t a = stack.back();
      int64_t r = 0;
      if (symbols) {
        const char *why = "";
        if (!apply(op, a, b, r, why))
          return fail(where() + ": " + std::to_string(a) + " " +
                      std::string(tok) + " " + std::to_string(b) + ": " + why);
      }
      stack.back() = r;
    } else {
      return fail(where() + ": unknown token " + quoteExpr(std::string(tok)));
    }

    ++index;
    if (end == rpn.size())
      break;
    pos = end + 1;
    if (pos == rpn.size())
      return fail("trailing space");
  }
  if (stack.size() != 1)
    return fail("leaves " + std::to_string(stack.size()) +
                " values on the stack, expected 1");
  if (value)
    *value = stack.back();
  return Status::ok();
}

} // namespace

Status validateExpr(const std::string &rpn, size_t numSymbols) {
  return interpret(rpn, numSymbols, nullptr, nullptr);
}

Status evalExpr(const std::string &rpn, const std::vector<int64_t> &symbols,
                int64_t &value) {
  return interpret(rpn, symbols.size(), &symbols, &value);
}

} // namespace moec::rt
