//===- MoeDialect.h - The moe dialect ---------------------------*- C++ -*-===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEDIALECT_H
#define MOEC_DIALECT_MOE_IR_MOEDIALECT_H

#include "mlir/IR/Dialect.h"
#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include "moec/Dialect/Moe/IR/MoeDialect.h.inc"

#endif // MOEC_DIALECT_MOE_IR_MOEDIALECT_H
