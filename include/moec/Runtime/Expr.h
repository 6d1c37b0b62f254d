//===- Expr.h - Size expressions over symbols --------------------*- C++ -*-===//
//
// Part of moec. Buffer sizes, kernel scalars and grid sizes in a bundle are
// expressions over the entry's symbols (dynamic input dimensions), in reverse
// Polish notation with space-separated tokens:
//   non-negative integer literal, `s<i>` (symbol i),
//   binary `+ - * / cdiv min max` (`/` floors, `cdiv` rounds up).
// Every intermediate value must stay within int64 and be non-negative;
// division by zero is an error. "s0 8 * 127 +" is 8·s0 + 127.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_RUNTIME_EXPR_H
#define MOEC_RUNTIME_EXPR_H

#include "moec/Runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::rt {

/// Checks the syntax: known tokens, symbols below `numSymbols`, exactly one
/// value left on the stack.
Status validateExpr(const std::string &rpn, size_t numSymbols);

/// Evaluates `rpn` with `symbols[i]` for `s<i>`.
Status evalExpr(const std::string &rpn, const std::vector<int64_t> &symbols,
                int64_t &value);

} // namespace moec::rt

#endif // MOEC_RUNTIME_EXPR_H
