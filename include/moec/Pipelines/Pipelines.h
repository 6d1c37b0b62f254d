//===- Pipelines.h - The moec pass pipelines, assembled in one place -*- C++ -*-===//
//
// Part of moec. Every pass sequence the compiler runs is built here, and
// moec-opt exposes each as a named pipeline:
//
//   moe-optimize     fusion (permute, epilogue, combine)
//   moe-to-kernels   moe-optimize, moe-select-kernel (tiles, kernel plans),
//                    then convert-moe-to-kernels
//   moe-to-nvvm      moe-to-kernels, then gpu modules to NVVM and PTX
//   moe-to-rocdl     moe-to-kernels, then gpu modules to ROCDL (LLVM dialect)
//   moe-to-host      moe-to-kernels, then kernels to LLVM for the host CPU
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_PIPELINES_PIPELINES_H
#define MOEC_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

namespace moec {

struct GpuTargetOptions {
  std::string chip;     ///< "sm_90a", "gfx942"
  std::string features; ///< "+ptx80" for sm_90a
  unsigned optLevel = 3;
};

/// Matmul tile fields that replace the cost model's choice (moe-tile's
/// options); 0 keeps the model's value.
struct TileOverride {
  int64_t m = 0, n = 0, k = 0, threads = 0;
  /// An autotuner cache whose measured tiles replace the model's, and the
  /// compile target whose entries apply (moe-select-kernel's tuning-cache,
  /// tuning-target).
  std::string tuningCache, tuningTarget;
};

/// Fusion on tensors (and moe-tile where `tile` sets matmul tile fields).
/// `kernelTarget` (sm90a, host, ...; empty: the module's #moe.target)
/// enables target-specific rewrites (moe-decompose-lora-grad).
void buildMoeOptimizePipeline(mlir::OpPassManager &pm,
                              const TileOverride &tile = {},
                              const std::string &kernelTarget = "");
/// moe-optimize + moe-select-kernel: every op's kernel choice recorded
/// (#moe.kernel, with the sm90a wgmma plan), as the conversion follows it.
/// `target` as for buildMoeToKernelsPipeline.
void buildMoeSelectKernelPipeline(mlir::OpPassManager &pm,
                                  const TileOverride &tile = {},
                                  const std::string &target = "generic");
/// moe-optimize, moe-select-kernel, convert-moe-to-kernels (+ cleanup).
/// `target` is the passes' option: generic, nvvm, sm90a, rocdl or host.
void buildMoeToKernelsPipeline(mlir::OpPassManager &pm,
                               const TileOverride &tile = {},
                               const std::string &target = "generic");
/// Kernels (gpu.module) to NVVM and PTX text in a gpu.binary (format=isa):
/// works without the CUDA toolkit; ptxas runs afterwards (Target/).
void buildKernelsToNVVMPipeline(mlir::OpPassManager &pm,
                                const GpuTargetOptions &options);
/// Kernels (gpu.module) to the LLVM dialect with ROCDL intrinsics; the
/// AMDGPU backend takes it from there (Target/), without ROCm device libs.
void buildKernelsToROCDLPipeline(mlir::OpPassManager &pm,
                                 const GpuTargetOptions &options);
/// Kernels to host functions in the LLVM dialect (ExecutionEngine-ready).
void buildKernelsToHostPipeline(mlir::OpPassManager &pm);

/// Registers the named pipelines above (moec-opt).
void registerMoecPipelines();

} // namespace moec

#endif // MOEC_PIPELINES_PIPELINES_H
