//===- TargetInfo.h - What kernels may use on each target -------*- C++ -*-===//
//
// Part of moec. One TargetInfo per kernel target of convert-moe-to-kernels
// (generic, nvvm, sm90a, rocdl, host): the questions kernel generators ask
// before they use something beyond the plain gpu/scf/arith/memref/vector
// dialects (a warp shuffle, an NVVM instruction, the wgmma matmul), and the
// machine facts kernels size themselves by (SM count, shared memory per
// block). Kernels ask these questions, never the target's name, so that a
// new target is a new TargetInfo, not a search through the kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONVERSION_TARGETINFO_H
#define MOEC_CONVERSION_TARGETINFO_H

#include "moec/Dialect/Moe/IR/MoeAttrs.h"

#include <memory>

namespace moec {

class TargetInfo {
public:
  virtual ~TargetInfo() = default;

  /// The TargetInfo of `attr`'s kind (the attribute's verifier admits only
  /// known kinds).
  static std::unique_ptr<TargetInfo> create(moe::TargetAttr attr);
  /// The attribute for kernel target `kind` (generic, nvvm, sm90a, rocdl,
  /// host) with the facts of the machine moec measures on for that kind
  /// (an H100/H200 for sm90a); null for an unknown kind. `chip` (e.g.
  /// `sm_89` for nvvm) replaces the kind's default chip when not empty.
  static moe::TargetAttr defaultAttr(mlir::MLIRContext *context,
                                     llvm::StringRef kind,
                                     llvm::StringRef chip = "");
  /// The kinds defaultAttr knows, for diagnostics.
  static constexpr llvm::StringLiteral kKinds =
      "generic, nvvm, sm90a, rocdl or host";

  moe::TargetAttr attr() const { return targetAttr; }
  llvm::StringRef kind() const { return targetAttr.getKind(); }
  /// Multiprocessors a persistent grid fills (0 for targets without one:
  /// the verifier requires it for sm90a).
  int64_t smCount() const { return targetAttr.getSmCount(); }
  /// Dynamic shared memory one block may use, in bytes.
  int64_t sharedMemoryPerBlock() const { return targetAttr.getSharedMemory(); }

  /// gpu.shuffle: the threads of a warp run in lockstep and exchange
  /// registers (not on the host, which runs a block's threads one by one).
  virtual bool hasWarpShuffles() const { return false; }
  /// nvvm.redux.sync and nvvm.vote.sync ballot: one-instruction warp
  /// reductions and ballots (sm_80+).
  virtual bool hasWarpReduxAndBallot() const { return false; }
  /// Packed FP8 conversions (cvt ... e4m3x2 / e5m2x2, sm_89+).
  virtual bool hasPackedFP8Conversions() const { return false; }
  /// st.global.cs: stores that are evicted first.
  virtual bool hasStreamingStores() const { return false; }
  /// cp.async.bulk.prefetch.L2 with an evict-last cache policy (sm_90+).
  virtual bool hasBulkL2Prefetch() const { return false; }
  /// cp.async: global-to-shared copies that bypass registers.
  virtual bool hasAsyncCopy() const { return false; }
  /// Hopper's warpgroup MMA with TMA, mbarriers and thread-block clusters
  /// (sm_90a): the sm90_wgmma matmul.
  virtual bool hasWgmma() const { return false; }

protected:
  explicit TargetInfo(moe::TargetAttr attr) : targetAttr(attr) {}

private:
  moe::TargetAttr targetAttr;
};

} // namespace moec

#endif // MOEC_CONVERSION_TARGETINFO_H
