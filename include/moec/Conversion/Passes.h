//===- Passes.h - moec conversion passes ------------------------*- C++ -*-===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONVERSION_PASSES_H
#define MOEC_CONVERSION_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace moec {

#define GEN_PASS_DECL
#include "moec/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "moec/Conversion/Passes.h.inc"

} // namespace moec

#endif // MOEC_CONVERSION_PASSES_H
