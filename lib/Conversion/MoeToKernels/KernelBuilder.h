//===- KernelBuilder.h - Helpers to write naive GPU kernel bodies -*- C++ -*-===//
//
// Part of moec. The kernels of the compiler-pipeline issue are plain scalar
// code (one thread per output element or per row): correct first, fast
// later. This header is the small vocabulary they are written in: constants,
// loads widened to f32, rounded stores, loops and conditionals on top of the
// scf, arith, math and memref dialects, so each op's kernel reads like the
// reference loop it mirrors.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELBUILDER_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELBUILDER_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include "moec/Conversion/TargetInfo.h"

#include <functional>

namespace moec::kernels {

/// An ImplicitLocOpBuilder with the helpers kernel bodies need.
class KernelBuilder : public mlir::ImplicitLocOpBuilder {
public:
  using ImplicitLocOpBuilder::ImplicitLocOpBuilder;

  /// What the kernels may use beyond the plain dialects (set by the pass
  /// before a kernel body is written).
  const TargetInfo *targetInfo = nullptr;
  const TargetInfo &target() const {
    assert(targetInfo && "KernelBuilder without a target");
    return *targetInfo;
  }

  // Constants.
  mlir::Value idx(int64_t v);
  mlir::Value f32(double v);
  mlir::Value i32(int64_t v);

  // Index arithmetic.
  mlir::Value add(mlir::Value a, mlir::Value b);
  mlir::Value sub(mlir::Value a, mlir::Value b);
  mlir::Value mul(mlir::Value a, mlir::Value b);
  mlir::Value div(mlir::Value a, mlir::Value b); ///< unsigned floor
  mlir::Value rem(mlir::Value a, mlir::Value b); ///< unsigned
  mlir::Value ceilDiv(mlir::Value a, mlir::Value b);
  mlir::Value minIdx(mlir::Value a, mlir::Value b);
  mlir::Value ult(mlir::Value a, mlir::Value b);
  mlir::Value ule(mlir::Value a, mlir::Value b);
  mlir::Value eq(mlir::Value a, mlir::Value b);
  mlir::Value land(mlir::Value a, mlir::Value b);
  mlir::Value select(mlir::Value c, mlir::Value a, mlir::Value b);

  // f32 arithmetic.
  mlir::Value fadd(mlir::Value a, mlir::Value b);
  mlir::Value fsub(mlir::Value a, mlir::Value b);
  mlir::Value fmul(mlir::Value a, mlir::Value b);
  mlir::Value fdiv(mlir::Value a, mlir::Value b);
  mlir::Value fmax(mlir::Value a, mlir::Value b);
  /// |x| of an f32 by clearing its sign bit, not math.absf or llvm.fabs,
  /// which the NVVM conversion turns into a libdevice call (__nv_fabsf)
  /// that ptxas cannot resolve without libdevice linked in.
  mlir::Value fabs(mlir::Value x);
  mlir::Value fgt(mlir::Value a, mlir::Value b);
  /// e^x as 2^(x·log2 e): exp2 lowers to one hardware instruction on NVPTX
  /// and AMDGPU without the vendors' device math libraries.
  mlir::Value exp(mlir::Value x);
  mlir::Value sigmoid(mlir::Value x);
  /// SwiGLU (f32): silu(gate)·up = gate·sigmoid(gate)·up, the one formula
  /// every kernel's SwiGLU uses.
  mlir::Value swiglu(mlir::Value gate, mlir::Value up);
  /// SwiGLU's input gradient (f32): {dGate, dUp} of silu(gate)·up for the
  /// output gradient `dy`.
  std::pair<mlir::Value, mlir::Value> swigluGrad(mlir::Value dy,
                                                 mlir::Value gate,
                                                 mlir::Value up);

  // FP8 (f8E4M3FN, f8E5M2) from and to f32 as bit patterns: round to
  // nearest even, saturating at the format's largest finite value, as the
  // reference does. Written with integer ops so that every backend (and the
  // host) handles them without FP8 support.
  mlir::Value encodeFP8(mlir::Value value, mlir::Type fp8Type); ///< -> i8
  mlir::Value decodeFP8(mlir::Value bits, mlir::Type fp8Type);  ///< i8 ->

  // Memory. Loads of bf16/f16/f32/FP8 return f32; stores round to the element
  // type. i32 loads/stores convert to and from index (signed).
  mlir::Value loadF(mlir::Value memref, mlir::ValueRange indices);
  void storeF(mlir::Value value, mlir::Value memref, mlir::ValueRange indices);
  mlir::Value loadIdx(mlir::Value memref, mlir::ValueRange indices);
  /// Loads an i32 and returns (value as index, value >= 0).
  std::pair<mlir::Value, mlir::Value> loadSigned(mlir::Value memref,
                                                 mlir::ValueRange indices);
  void storeI32(mlir::Value indexValue, mlir::Value memref,
                mlir::ValueRange indices);
  void storeI32Const(int64_t v, mlir::Value memref, mlir::ValueRange indices);
  mlir::Value dim(mlir::Value memref, int64_t d);

  // Vector memory access (the bandwidth-bound kernels): `n` consecutive
  // elements along the last dimension, starting at `indices`, as one access
  // of up to 16 bytes. The caller guarantees the alignment this claims:
  // buffers start 16-byte aligned (the runtime and Python check it), the
  // row length is a multiple of `n` and the last index a multiple of `n`.
  /// Elements of `elem` per 16-byte access (0 for types without one).
  static int64_t vectorWidth(mlir::Type elem);
  mlir::Value loadVec(mlir::Value memref, mlir::ValueRange indices,
                      int64_t n);
  void storeVec(mlir::Value vector, mlir::Value memref,
                mlir::ValueRange indices);
  /// storeVec for lines written once and not read again by the kernel: on
  /// NVVM a 16-byte piece goes out as `st.global.cs` (evict first), which
  /// keeps them from pushing the kernel's inputs out of the caches; other
  /// targets and sizes get storeVec. `memref` must be contiguous row-major.
  void storeVecStreaming(mlir::Value vector, mlir::Value memref,
                         mlir::ValueRange indices);
  /// loadVec that stays where it is issued: on NVVM one `ld.global.ca` of
  /// 4, 8 or 16 bytes of a plain global buffer as inline assembly with side
  /// effects, which neither LLVM nor ptxas moves past other memory accesses
  /// (other targets and sizes get loadVec). For a batch of loads meant to
  /// be in flight together ahead of stores that may alias them.
  mlir::Value loadVecInPlace(mlir::Value memref, mlir::ValueRange indices,
                             int64_t n);
  /// The byte address (index) of the element at `indices` of a contiguous
  /// row-major `memref`.
  mlir::Value elementAddress(mlir::Value memref, mlir::ValueRange indices);
  /// Brings `bytes` (a multiple of 16) from the element at `indices` on
  /// into L2 with the evict-last priority, ahead of later loads: one bulk
  /// prefetch (NVVM only; other targets emit nothing). `memref` must be
  /// contiguous row-major.
  void prefetchL2(mlir::Value memref, mlir::ValueRange indices,
                  int64_t bytes);
  /// loadVec widened to vector<n x f32> (FP8 decoded).
  mlir::Value loadVecF32(mlir::Value memref, mlir::ValueRange indices,
                         int64_t n);
  /// Rounds a vector<n x f32> to the element type and stores it.
  void storeVecF32(mlir::Value vector, mlir::Value memref,
                   mlir::ValueRange indices);
  /// A vector of zeros (FP8 vectors too, as bit patterns).
  mlir::Value zeroVec(mlir::VectorType type);
  /// loadVec widened to f32, one scalar per element (FP8 decoded).
  llvm::SmallVector<mlir::Value> loadVecF(mlir::Value memref,
                                          mlir::ValueRange indices, int64_t n);
  /// Rounds f32 scalars to the element type and stores them as one vector.
  void storeVecF(llvm::ArrayRef<mlir::Value> values, mlir::Value memref,
                 mlir::ValueRange indices);
  /// A private (per-thread) array, allocated at the top of the kernel so
  /// that backends see a fixed-size stack slot, not a dynamic allocation.
  mlir::Value alloca(mlir::MemRefType type);

  // Control flow.
  using LoopBody =
      std::function<llvm::SmallVector<mlir::Value>(mlir::Value iv,
                                                   mlir::ValueRange iters)>;
  /// scf.for from lb to ub (by `step`, 1 if null) carrying `inits`;
  /// returns the results.
  llvm::SmallVector<mlir::Value> loop(mlir::Value lb, mlir::Value ub,
                                      mlir::ValueRange inits,
                                      const LoopBody &body,
                                      mlir::Value step = {});
  /// scf.for with no carried values.
  void loop(mlir::Value lb, mlir::Value ub,
            const std::function<void(mlir::Value iv)> &body);
  void ifThen(mlir::Value cond, const std::function<void()> &then);
  /// scf.if yielding one value of each branch.
  mlir::Value ifElse(mlir::Value cond, mlir::Type type,
                     const std::function<mlir::Value()> &then,
                     const std::function<mlir::Value()> &otherwise);
};

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELBUILDER_H
