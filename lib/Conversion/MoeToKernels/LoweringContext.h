//===- LoweringContext.h - Host-side state of convert-moe-to-kernels -*- C++ -*-===//
//
// Part of moec. What a kernel generator (Kernels.cpp) may ask of the pass
// (MoeToKernels.cpp): host index values and their size expressions, scratch
// buffers, and "launch this kernel body over this grid".
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H

#include "KernelBuilder.h"

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace moec::kernels {

/// The body of a kernel: `args` are the kernel's arguments (in the order of
/// the launch operands), `block` and `thread` the 1-D block and thread ids.
using KernelBody = std::function<void(KernelBuilder &b, mlir::ValueRange args,
                                      mlir::Value block, mlir::Value thread)>;

class LoweringContext {
public:
  virtual ~LoweringContext() = default;

  /// The builder at the host insertion point (before the op being lowered).
  virtual KernelBuilder &host() = 0;
  /// Host index values giving the sizes of a buffer (memref) value.
  virtual llvm::SmallVector<mlir::Value> sizes(mlir::Value buffer) = 0;
  /// A scratch buffer of the given type and sizes (one Value per dimension).
  virtual mlir::Value allocTemp(mlir::MemRefType type,
                                llvm::ArrayRef<mlir::Value> sizes) = 0;
  /// Emits a kernel named after the op being lowered (plus `suffix`) and its
  /// launch over `gridBlocks` blocks of `tile.getThreads()` threads.
  /// `operands` are host memrefs and index values.
  virtual mlir::LogicalResult launch(llvm::StringRef suffix,
                                     mlir::Value gridBlocks,
                                     moe::TileAttr tile,
                                     mlir::ValueRange operands,
                                     const KernelBody &body) = 0;
};

/// Whether a linalg.matmul reads B as [N, K] (A·Bᵀ); failure for indexing
/// maps other than the plain and B-transposed ones.
mlir::FailureOr<bool> matmulTransposesB(mlir::Operation *matmul);

/// Maps a tensor value of the function being lowered (operand or result of
/// the op) to its buffer; null for a null value.
using BufferMap = llvm::function_ref<mlir::Value(mlir::Value)>;

/// Lowers one op whose operand and result buffers `buffer` gives (the
/// results' buffers are allocated before the call).
mlir::LogicalResult lowerOp(mlir::Operation *op, moe::TileAttr tile,
                            BufferMap buffer, LoweringContext &ctx);

/// Host index values for the sizes of each result of `op`, from the sizes of
/// its operand buffers; fails with a diagnostic where a size cannot be
/// derived.
mlir::LogicalResult
resultSizes(mlir::Operation *op, BufferMap buffer, LoweringContext &ctx,
            llvm::SmallVector<llvm::SmallVector<mlir::Value>> &sizes);

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H
