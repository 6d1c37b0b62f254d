//===- Transposed.h - A tensor transposed into a new tensor.empty ---------===//
//
// Part of moec. Shared by the LoRA rewrites (moe-transpose-lora-adapters,
// moe-decompose-lora-grad), which put adapters and their gradients in the
// layouts the grouped matmul reads and writes.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_DIALECT_MOE_TRANSFORMS_TRANSPOSED_H
#define MOEC_LIB_DIALECT_MOE_TRANSFORMS_TRANSPOSED_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace moec::moe {

/// `value` with result dimension d taken from its dimension
/// permutation[d] (`linalg.transpose` into a `tensor.empty`).
inline mlir::Value transposed(mlir::OpBuilder &builder, mlir::Location loc,
                              mlir::Value value,
                              llvm::ArrayRef<int64_t> permutation) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  llvm::SmallVector<mlir::OpFoldResult> sizes =
      mlir::tensor::getMixedSizes(builder, loc, value);
  llvm::SmallVector<mlir::OpFoldResult> permuted;
  for (int64_t p : permutation)
    permuted.push_back(sizes[p]);
  mlir::Value init = mlir::tensor::EmptyOp::create(builder, loc, permuted,
                                                   type.getElementType());
  return mlir::linalg::TransposeOp::create(builder, loc, value, init,
                                           permutation)
      .getResult()[0];
}

} // namespace moec::moe

#endif // MOEC_LIB_DIALECT_MOE_TRANSFORMS_TRANSPOSED_H
