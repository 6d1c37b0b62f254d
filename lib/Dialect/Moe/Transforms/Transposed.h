//===- Transposed.h - Adapters transposed or split by expert --------------===//
//
// Part of moec. Shared by the LoRA rewrites (moe-transpose-lora-adapters,
// moe-decompose-lora-grad, moe-fp8-recipe), which put adapters and their
// gradients in the layouts the grouped matmul reads and writes.
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

/// [E*r, X] as [E, r, X] (a LoRA adapter's rows split by expert).
inline mlir::Value splitExpertRows(mlir::OpBuilder &builder,
                                   mlir::Location loc, mlir::Value value,
                                   int64_t experts) {
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  auto result = mlir::RankedTensorType::get(
      {experts, type.getDimSize(0) / experts, type.getDimSize(1)},
      type.getElementType());
  return mlir::tensor::ExpandShapeOp::create(
      builder, loc, result, value,
      llvm::ArrayRef<mlir::ReassociationIndices>{{0, 1}, {2}});
}

} // namespace moec::moe

#endif // MOEC_LIB_DIALECT_MOE_TRANSFORMS_TRANSPOSED_H
