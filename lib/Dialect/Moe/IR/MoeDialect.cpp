//===- MoeDialect.cpp - The moe dialect and its attributes ----------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Dialect/Moe/IR/MoeDialect.h"
#include "moec/Dialect/Moe/IR/MoeAttrs.h"
#include "moec/Dialect/Moe/IR/MoeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace moec::moe;

#include "moec/Dialect/Moe/IR/MoeDialect.cpp.inc"
#include "moec/Dialect/Moe/IR/MoeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/IR/MoeAttrs.cpp.inc"

void MoeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "moec/Dialect/Moe/IR/MoeOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moec/Dialect/Moe/IR/MoeAttrs.cpp.inc"
      >();
}
