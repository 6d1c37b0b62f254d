//===- LoweringContext.h - Host-side state of convert-moe-to-kernels -*- C++ -*-===//
//
// Part of moec. What a kernel generator (a KernelPattern's emit) may ask of
// the pass (MoeToKernels.cpp): the target, host index values and their size
// expressions, scratch buffers, and "launch this kernel body over this
// grid"; and the helpers the generators of every strategy share.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H

#include "KernelBuilder.h"

#include "moec/Conversion/TargetInfo.h"
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
  /// What the kernels may use.
  virtual const TargetInfo &target() = 0;
  /// Host index values giving the sizes of a buffer (memref) value.
  virtual llvm::SmallVector<mlir::Value> sizes(mlir::Value buffer) = 0;
  /// A scratch buffer of the given type and sizes (one Value per dimension).
  virtual mlir::Value allocTemp(mlir::MemRefType type,
                                llvm::ArrayRef<mlir::Value> sizes) = 0;
  /// The host value of an index value of the function being lowered (a
  /// constant or a tensor.dim already lowered); null for any other.
  virtual mlir::Value hostScalar(mlir::Value value) = 0;
  /// The host index value of the token count T: the symbol of the
  /// function arguments' dynamic leading dimensions (those `moe.sym` does
  /// not name otherwise); null when no argument has one.
  virtual mlir::Value tokenCount() = 0;
  /// Emits a kernel named after the op being lowered (plus `suffix`) and its
  /// launch over `gridBlocks` blocks of `tile.getThreads()` threads.
  /// `operands` are host memrefs and index values. `dynamicSharedBytes` of
  /// workgroup memory come with each block (gpu.dynamic_shared_memory).
  /// `clusterBlocks` > 1 launches the blocks in clusters of that many; the
  /// kernel must then walk its work with a grid stride (a launcher may run
  /// fewer clusters than the grid asks for, docs/bundle.md).
  virtual mlir::LogicalResult launch(llvm::StringRef suffix,
                                     mlir::Value gridBlocks,
                                     moe::TileAttr tile,
                                     mlir::ValueRange operands,
                                     const KernelBody &body,
                                     int64_t dynamicSharedBytes = 0,
                                     int64_t clusterBlocks = 1) = 0;
};

/// Whether a linalg.matmul reads B as [N, K] (A·Bᵀ); failure for indexing
/// maps other than the plain and B-transposed ones.
mlir::FailureOr<bool> matmulTransposesB(mlir::Operation *matmul);

/// How a linalg.matmul reads its operands: A as [M, K] or, transposed, as
/// [K, M] (the weight gradient Aᵀ·dC of a dense layer); B as [K, N] or
/// [N, K]. Failure for other indexing maps.
struct MatmulLayout {
  bool transposeA = false;
  bool transposeB = false;
};
mlir::FailureOr<MatmulLayout> matmulLayout(mlir::Operation *matmul);

/// Maps a tensor value of the function being lowered (operand or result of
/// the op) to its buffer; null for a null value.
using BufferMap = llvm::function_ref<mlir::Value(mlir::Value)>;

/// Host index values for the sizes of each result of `op`: the op's
/// ReifyRankedShapedTypeOpInterface (lib/Dialect/Moe/IR/MoeResultShapes.cpp;
/// linalg's for linalg.matmul) translated to the host, with the sizes of
/// its operand buffers for their tensor.dim; fails with a diagnostic where a
/// size cannot be derived.
mlir::LogicalResult
resultSizes(mlir::Operation *op, BufferMap buffer, LoweringContext &ctx,
            llvm::SmallVector<llvm::SmallVector<mlir::Value>> &sizes);

//===----------------------------------------------------------------------===//
// Helpers shared by the kernel generators (KernelHelpers.cpp unless noted)
//===----------------------------------------------------------------------===//

/// Lanes of a warp, as the warp kernels (shuffles, ballots, redux) use
/// them (NVIDIA warps; AMD wave64 runs two such groups per wavefront).
constexpr int64_t kWarp = 32;

/// The element type of a memref or tensor value (a buffer, or the op's
/// operand it stands for: both have the same shape and element type).
inline mlir::Type elementType(mlir::Value shaped) {
  return mlir::cast<mlir::ShapedType>(shaped.getType()).getElementType();
}

/// The static size of dimension d of a memref or tensor value, if any.
inline std::optional<int64_t> staticDim(mlir::Value shaped, unsigned d) {
  int64_t size = mlir::cast<mlir::ShapedType>(shaped.getType()).getDimSize(d);
  if (mlir::ShapedType::isDynamic(size))
    return std::nullopt;
  return size;
}

/// The address of a memref's first element, as index.
mlir::Value addressOf(KernelBuilder &b, mlir::Value memref);

/// A launch operand that passes the TMA descriptor (CUtensorMap) of
/// `buffer`, a 16-bit memref, by value, for boxes of `box` elements
/// (innermost dimension first, one per dimension): the kernel receives an
/// !llvm.ptr to the descriptor, for cp.async.bulk.tensor. The runtime
/// encodes it per launch (bundle param kind "tensor map").
mlir::Value tensorMapOperand(KernelBuilder &h, mlir::Value buffer,
                             llvm::ArrayRef<int64_t> box);
// tensorMapOf (moec/Conversion/LaunchABI.h) reads such a value back.

/// An LLVM pointer in `addressSpace` (1 global, 3 shared) at an index
/// address (for NVVM ops such as cp.async that take pointers).
mlir::Value pointerAt(KernelBuilder &b, mlir::Value address,
                      unsigned addressSpace);

/// Launches `body(b, args, id)` once per work item `id < count`, on
/// ceil(count / threads) blocks; `args` are the kernel's copies of
/// `operands`.
mlir::LogicalResult launchPerItem(
    LoweringContext &ctx, llvm::StringRef suffix, mlir::Value count,
    moe::TileAttr tile, mlir::ValueRange operands,
    const std::function<void(KernelBuilder &, mlir::ValueRange, mlir::Value)>
        &body);

/// First row of group e (0 for e = 0, else offsets[e - 1]).
mlir::Value groupStart(KernelBuilder &b, mlir::Value offsets, mlir::Value e);

/// The `group`-row blocks of the groups before e: sum over e' < e of
/// ceil(rows of e' / group), the first block of group e in moe.quantize's
/// colwise scales (and its column / group in the transposed data).
mlir::Value blocksBefore(KernelBuilder &b, mlir::Value offsets, mlir::Value e,
                         int64_t group);

/// The expert of grouped row `row`: the number of group ends <= row (so
/// `numExperts` for a row past the last group).
mlir::Value expertOfRow(KernelBuilder &b, mlir::Value offsets,
                        mlir::Value numExperts, mlir::Value row);

/// A buffer [numSlots] holding the grouped row of each slot (-1 if none):
/// `positions` when the op was given sort_by_expert's map (nothing to
/// launch), else a scratch buffer filled by two kernels, a fill and a
/// scatter over the valid rows.
mlir::FailureOr<mlir::Value> emitInverse(LoweringContext &ctx,
                                         moe::TileAttr tile, mlir::Value slots,
                                         mlir::Value offsets,
                                         mlir::Value numSlots,
                                         mlir::Value positions);

/// Whether grouped row r holds no slot: alignment padding (slot -1) or a
/// row at or past the last group's end.
mlir::Value isPaddingRow(KernelBuilder &b, mlir::Value slots,
                         mlir::Value offsets, mlir::Value r);

/// Elements per thread for rows of `rowLength` elements of the (float)
/// types accessed: the widest 16-byte vector of the narrowest type, if it
/// divides the row; 0 otherwise. (Vector/VectorCommon.cpp)
int64_t chunkWidth(std::optional<int64_t> rowLength,
                   std::initializer_list<mlir::Type> types);

/// Elements per chunk of emitCombine over `rows` into `out` (memrefs or
/// tensors); 0 where it does not apply. (Vector/Permute.cpp)
int64_t combineWidth(mlir::Value rows, mlir::Value out);

/// The vectorized combine of unpermute: out[t] = sum over j < k of
/// weights[t, j] (1 without weights) times the grouped row of slot t·k + j
/// in `rows` (found through `positions`, or else the inverse of `slots`;
/// none: zero); nullopt where the row length has no 16-byte vector access
/// (combineWidth is 0). (Vector/Permute.cpp)
std::optional<mlir::LogicalResult>
emitCombine(LoweringContext &ctx, moe::TileAttr tile, mlir::Value rows,
            mlir::Value slots, mlir::Value offsets, mlir::Value weights,
            mlir::Value out, int64_t k, mlir::Value positions);

/// The probability gradient of permute_grad: out[s / k, s % k] =
/// values[r] for every grouped row r < offsets[E-1] with a slot s >= 0, 0
/// for slots without a row (out is [T, k], values [M]): a fill and a
/// scatter over the rows, or with `positions` (every slot has a row) one
/// gather over the slots.
mlir::LogicalResult emitSlotScatter(LoweringContext &ctx, moe::TileAttr tile,
                                    mlir::Value values, mlir::Value slots,
                                    mlir::Value offsets, mlir::Value out,
                                    mlir::Value positions);

/// Column of the gate (or up) value of SwiGLU output column c.
mlir::Value gateUpColumn(KernelBuilder &b, moe::GateUpLayout layout,
                         mlir::Value half, mlir::Value c, bool up);

/// The FP8 scale of a group with absolute maximum `amax` (1 for an all-zero
/// group), optionally rounded up to a power of two.
mlir::Value groupScale(KernelBuilder &b, mlir::Value amax, double fp8Max,
                       bool pow2);

/// Smallest i in [0, n) with table[i] > value (index), or n: a binary
/// search over a non-decreasing i32 table, unrolled (n is static and small).
mlir::Value firstGreater(KernelBuilder &b, mlir::Value table, int64_t n,
                         mlir::Value value);

/// Largest finite value of an FP8 type.
double fp8MaxOf(mlir::Type type);

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_LOWERINGCONTEXT_H
