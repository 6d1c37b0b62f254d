//===- Target.h - From moe functions to bundle entries -----------*- C++ -*-===//
//
// Part of moec. The compiler's back half: runs the pipelines of lib/Pipelines,
// turns each lowered function into a bundle entry (buffers, symbols, launch
// steps with their expanded memref parameters, reference op list) and each
// of its gpu modules into a binary for a target:
//   sm_90a  PTX from MLIR's NVPTX path, then ptxas (CUDA_HOME/bin, PATH,
//           /usr/local/cuda/bin) to a cubin; PTX alone, with a note, without
//           ptxas (the CUDA driver JIT-compiles PTX);
//   gfx942  LLVM's AMDGPU backend to an object, then ld.lld to an HSACO;
//   host    LLVM for the host CPU to a relocatable object (moec run JITs the
//           same module with MLIR's ExecutionEngine).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_TARGET_TARGET_H
#define MOEC_TARGET_TARGET_H

#include "moec/Pipelines/Pipelines.h"
#include "moec/Runtime/Bundle.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace moec {

struct CompileOptions {
  std::vector<std::string> targets = {"host"};
  /// Also keep each target's assembly (PTX, AMDGPU ISA) in `assembly`.
  bool keepAssembly = false;
  /// Matmul tile fields replacing the cost model's (moe-tile options).
  TileOverride tile;
  /// Multiprocessors the persistent kernels of sm_90a targets fill (the
  /// #moe.target sm_count; other targets have none); 0 keeps the chip's
  /// (132).
  /// Fewer leave SMs free for kernels that run beside them, e.g. NCCL's
  /// all-to-all overlapping an expert-parallel layer's matmuls. A module
  /// with its own #moe.target keeps it.
  int64_t smCount = 0;
  /// Run ptxas on sm_90a PTX when it is found; false ships the PTX (the
  /// compiler fuzzer: a child process per input would dominate its time).
  bool assemble = true;
};

struct CompileResult {
  rt::Bundle bundle;
  /// Things a user should know that are not errors, e.g. "ptxas not found".
  std::vector<std::string> notes;
  /// (entry name, target) -> assembly text, when keepAssembly.
  std::vector<std::pair<std::string, std::string>> assembly;
};

/// Compiles every function of `module` (moe dialect on tensors; the module
/// is not modified) for every target. Failures are reported as diagnostics.
mlir::LogicalResult compileModule(mlir::ModuleOp module,
                                  const CompileOptions &options,
                                  CompileResult &result);

/// One op's kernel as moe-select-kernel chose it for a target.
struct KernelChoice {
  std::string function, op, location;
  std::string strategy; ///< sm90_wgmma, warp, vector, scalar
  std::string tile;     ///< the #moe.tile asked for
  /// Where the tile comes from: "moe.tile" (written on the op: by hand, by
  /// tile options or from the tuning cache), "its moe.kernel" (written by
  /// hand), "cost model", or "the op kind's" (linalg, tensor ops); with
  /// ", moe.tile_buckets" where the op has row buckets (their kernels are
  /// the plan's buckets).
  std::string tileSource;
  std::string plan;     ///< the #moe.wgmma_plan followed; empty without
};

/// The kernel choice of every op of `module` for the compile target
/// `target` (sm_90a, gfx942, host, ...), after the same fusion and with the
/// same options (tuning cache, SM count) as compileModule: what `moec
/// compile --print-plan` shows. Failures are reported as diagnostics.
mlir::FailureOr<std::vector<KernelChoice>>
kernelChoices(mlir::ModuleOp module, const std::string &target,
              const CompileOptions &options);

/// The host-lowered LLVM-dialect module of every function of `module`
/// (kernels as host functions taking the block count first), for the
/// ExecutionEngine; entries (without binaries) go to `entries`.
mlir::OwningOpRef<mlir::ModuleOp>
lowerForHost(mlir::ModuleOp module, std::vector<rt::Entry> &entries,
             const TileOverride &tile = {});

/// The stages a module can be printed at, in pipeline order: "moe" (as
/// given, verified), "optimized" (moe-optimize), "kernels" (moe-to-kernels),
/// "nvvm" (kernels to NVVM and PTX for sm_90a), "rocdl" (kernels to ROCDL
/// for gfx942), "host" (kernels to LLVM for the host CPU).
const std::vector<std::string> &loweringStages();

/// A clone of `module` lowered to `stage` (one of loweringStages()).
/// Failures, an unknown stage included, are reported as diagnostics.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
lowerToStage(mlir::ModuleOp module, const std::string &stage,
             const TileOverride &tile = {});

/// Registers the LLVM IR translations the targets need (call once).
void registerTargetTranslations(mlir::DialectRegistry &registry);

/// Makes `context` ready for the compiler: every upstream dialect and
/// extension, the moe dialect and the target translations, all loaded.
void loadCompilerDialects(mlir::MLIRContext &context);

/// Where ptxas is, or empty: $MOEC_PTXAS, $CUDA_HOME/bin, PATH, then
/// /usr/local/cuda/bin. The Python package sets MOEC_PTXAS to pip's
/// nvidia-cuda-nvcc where none of the others has one (moec/compiler/_ptxas.py).
std::string findPtxas();

/// Where the ld.lld that links gfx942's HSACO is, or empty: $MOEC_LLD,
/// $ROCM_PATH/llvm/bin, /opt/rocm/llvm/bin, /usr/lib/llvm-22/bin, then
/// ld.lld-22 and ld.lld on PATH.
std::string findLld();

} // namespace moec

#endif // MOEC_TARGET_TARGET_H
