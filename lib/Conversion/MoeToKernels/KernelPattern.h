//===- KernelPattern.h - One lowering strategy of one op --------*- C++ -*-===//
//
// Part of moec. convert-moe-to-kernels lowers each op with one strategy
// (scalar, vector, warp, sm90_wgmma: moe::KernelStrategy). A KernelPattern
// is the kernels of one strategy for one op: `matches` says, from the op's
// types, static sizes, attributes and tile and from the target, whether
// they apply (emitting nothing), and `lower` emits them. Each strategy's
// folder (Scalar/, Vector/, Warp/, Hopper/) has a populate function that
// adds its patterns; moe-select-kernel picks, per op, the fastest strategy
// whose pattern matches and records it as `#moe.kernel`, which the
// conversion then follows.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELPATTERN_H
#define MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELPATTERN_H

#include "LoweringContext.h"

#include "moec/Conversion/TargetInfo.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace moec::kernels {

/// The kernels of one strategy for one op.
class KernelPattern {
public:
  KernelPattern(llvm::StringRef opName, moe::KernelStrategy strategy,
                const TargetInfo &target)
      : opName(opName), strategy(strategy), target(target) {}
  virtual ~KernelPattern() = default;

  llvm::StringRef getOpName() const { return opName; }
  moe::KernelStrategy getStrategy() const { return strategy; }

  /// Whether these kernels compute `op` with `tile` on the target. Reads
  /// types, static sizes and attributes only; emits nothing.
  virtual bool matches(mlir::Operation *op, moe::TileAttr tile) const = 0;
  /// The plan moe-select-kernel records for `op` with `tile` (the
  /// `#moe.kernel`'s `plan`): null where the strategy's kernels take
  /// everything from the tile; failure with a diagnostic on `op`. Called
  /// only where `matches` holds.
  virtual mlir::FailureOr<moe::WgmmaPlanAttr>
  selectPlan(mlir::Operation *op, moe::TileAttr tile) const {
    return moe::WgmmaPlanAttr();
  }
  /// Checks that the kernels can be built as `plan` (written on `op`,
  /// by hand or by moe-select-kernel) says; a diagnostic on `op` if not.
  virtual mlir::LogicalResult verifyPlan(mlir::Operation *op,
                                         moe::WgmmaPlanAttr plan) const {
    return mlir::success();
  }
  /// Emits the kernels and their launches. Called only where `matches`
  /// holds; the results' buffers are allocated.
  virtual mlir::LogicalResult lower(mlir::Operation *op, moe::TileAttr tile,
                                    BufferMap buffer,
                                    LoweringContext &ctx) const = 0;

protected:
  const TargetInfo &getTarget() const { return target; }

private:
  std::string opName;
  moe::KernelStrategy strategy;
  const TargetInfo &target;
};

/// A KernelPattern for ops of type OpTy: `match` (default: always) and
/// `emit` get the op typed.
template <typename OpTy> class OpKernelPattern : public KernelPattern {
public:
  OpKernelPattern(moe::KernelStrategy strategy, const TargetInfo &target)
      : KernelPattern(OpTy::getOperationName(), strategy, target) {}

  bool matches(mlir::Operation *op, moe::TileAttr tile) const final {
    return match(mlir::cast<OpTy>(op), tile);
  }
  mlir::LogicalResult lower(mlir::Operation *op, moe::TileAttr tile,
                            BufferMap buffer,
                            LoweringContext &ctx) const final {
    return emit(mlir::cast<OpTy>(op), tile, buffer, ctx);
  }

  virtual bool match(OpTy op, moe::TileAttr tile) const { return true; }
  virtual mlir::LogicalResult emit(OpTy op, moe::TileAttr tile,
                                   BufferMap buffer,
                                   LoweringContext &ctx) const = 0;
};

/// A pattern of two functions: `match` (null: always) and `emit`.
template <typename OpTy>
class FunctionKernelPattern : public OpKernelPattern<OpTy> {
public:
  using MatchFn = bool (*)(OpTy, moe::TileAttr, const TargetInfo &);
  using EmitFn = mlir::LogicalResult (*)(OpTy, moe::TileAttr, BufferMap,
                                         LoweringContext &);

  FunctionKernelPattern(moe::KernelStrategy strategy, const TargetInfo &target,
                        EmitFn emitFn, MatchFn matchFn)
      : OpKernelPattern<OpTy>(strategy, target), emitFn(emitFn),
        matchFn(matchFn) {}

  bool match(OpTy op, moe::TileAttr tile) const override {
    return !matchFn || matchFn(op, tile, this->getTarget());
  }
  mlir::LogicalResult emit(OpTy op, moe::TileAttr tile, BufferMap buffer,
                           LoweringContext &ctx) const override {
    return emitFn(op, tile, buffer, ctx);
  }

private:
  EmitFn emitFn;
  MatchFn matchFn;
};

/// The patterns of every strategy for a target.
class KernelPatternSet {
public:
  explicit KernelPatternSet(const TargetInfo &target) : target(target) {}

  const TargetInfo &getTarget() const { return target; }
  template <typename PatternTy> void add() {
    patterns.push_back(std::make_unique<PatternTy>(target));
  }
  /// Adds the pattern of `strategy` for OpTy that `emit` lowers where
  /// `match` (null: always) holds.
  template <typename OpTy>
  void add(moe::KernelStrategy strategy,
           typename FunctionKernelPattern<OpTy>::EmitFn emit,
           typename FunctionKernelPattern<OpTy>::MatchFn match = nullptr) {
    patterns.push_back(std::make_unique<FunctionKernelPattern<OpTy>>(
        strategy, target, emit, match));
  }
  /// The pattern for `op`'s kind and `strategy`; null if there is none.
  const KernelPattern *find(mlir::Operation *op,
                            moe::KernelStrategy strategy) const;
  /// The chosen strategy of `op` and its tile: the pattern of the fastest
  /// strategy (sm90_wgmma, warp, vector, scalar) that matches `op` with
  /// the tile that strategy reads from `tile`; null if none does.
  std::pair<const KernelPattern *, moe::TileAttr>
  select(mlir::Operation *op, moe::TileAttr tile) const;
  /// The pattern and tile to lower `op` with: those of its `#moe.kernel`
  /// (checked: the strategy has a pattern for the op that matches, and its
  /// plan, if any, can be built), or select's for its requestedTile;
  /// failure with a diagnostic on `op`.
  mlir::FailureOr<std::pair<const KernelPattern *, moe::TileAttr>>
  kernelFor(mlir::Operation *op) const;

private:
  const TargetInfo &target;
  std::vector<std::unique_ptr<KernelPattern>> patterns;
};

/// The tile strategy `strategy` reads from an op's `tile`: only the
/// sm90_wgmma matmul has a producer warpgroup, the other kernels run the
/// computing threads alone (so a tile tuned for sm90a is valid everywhere).
moe::TileAttr tileForStrategy(moe::TileAttr tile, moe::KernelStrategy strategy);

/// The tile `op` asks for: its `moe.tile`, else the cost model's
/// (moe::defaultTileFor); linalg.matmul gets the scalar matmul's tile.
moe::TileAttr requestedTile(mlir::Operation *op);

/// The kernel target of `module`: its `moe.target` attribute, or the
/// facts of the kind `kind` names (TargetInfo::defaultAttr), or `generic`
/// when both are absent; failure (with a diagnostic) for an unknown kind
/// or one that disagrees with the module's attribute.
mlir::FailureOr<moe::TargetAttr> resolveKernelTarget(mlir::ModuleOp module,
                                                     llvm::StringRef kind);

/// Declares the `match<Name>` and `emit<Name>` functions of one pattern of
/// a strategy (a strategy folder's header lists its ops with it); they
/// are registered with KernelPatternSet::add.
#define MOEC_DECLARE_KERNEL_PATTERN(OpTy, Name)                                \
  bool match##Name(OpTy op, moe::TileAttr tile, const TargetInfo &target);     \
  mlir::LogicalResult emit##Name(OpTy op, moe::TileAttr tile,                  \
                                 BufferMap buffer, LoweringContext &ctx);

/// Whether `op` is a zero linalg.fill of a tensor.empty that only
/// linalg.matmul ops take as their accumulator: not a kernel, the matmul
/// zeroes its own.
bool isAccumulatorFill(mlir::Operation *op);

void populateScalarKernelPatterns(KernelPatternSet &patterns,
                                  const TargetInfo &target);
void populateVectorKernelPatterns(KernelPatternSet &patterns,
                                  const TargetInfo &target);
void populateWarpKernelPatterns(KernelPatternSet &patterns,
                                const TargetInfo &target);
void populateHopperKernelPatterns(KernelPatternSet &patterns,
                                  const TargetInfo &target);
/// Every strategy's patterns: what moe-select-kernel and
/// convert-moe-to-kernels choose from.
void populateMoeToKernelsPatterns(KernelPatternSet &patterns,
                                  const TargetInfo &target);

} // namespace moec::kernels

#endif // MOEC_LIB_CONVERSION_MOETOKERNELS_KERNELPATTERN_H
