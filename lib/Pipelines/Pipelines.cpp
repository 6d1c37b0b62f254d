//===- Pipelines.cpp - The moec pass pipelines -----------------------------===//
//
// Part of moec. Upstream passes do all the target work: convert-gpu-to-nvvm
// and gpu-module-to-binary (format=isa) for PTX, convert-gpu-to-rocdl for
// AMDGPU, and the usual *-to-llvm conversions for the host.
//
//===----------------------------------------------------------------------===//

#include "moec/Pipelines/Pipelines.h"

#include "moec/Conversion/Passes.h"
#include "moec/Dialect/Moe/Transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace moec {

void buildMoeOptimizePipeline(OpPassManager &pm, const TileOverride &tile,
                              const std::string &kernelTarget) {
  // Before the tile choice: the input gradient's adapter in the forward form
  // is one the wgmma kernel fuses, and on sm90a the adapter gradients are
  // grouped matmuls it runs.
  // Ranks not a multiple of 8 padded, so the wgmma kernels take them (first:
  // an input gradient and the adapter gradients then share the padded
  // adapters, which the transposes read).
  pm.addPass(moe::createMoePadLoraRankPass());
  pm.addPass(moe::createMoeTransposeLoraAdaptersPass());
  moe::MoeDecomposeLoraGradPassOptions decompose;
  decompose.target = kernelTarget;
  pm.addPass(moe::createMoeDecomposeLoraGradPass(decompose));
  pm.addPass(moe::createMoeFusePermutePass());
  pm.addPass(moe::createMoeFuseEpiloguePass());
  pm.addPass(moe::createMoeFuseCombinePass());
  pm.addPass(moe::createMoeSharePositionsPass());
  pm.addPass(createCanonicalizerPass());
  // Tiles the user asked for; the rest is moe-select-kernel's choice.
  if (tile.m || tile.n || tile.k || tile.threads) {
    moe::MoeTilePassOptions tileOptions;
    tileOptions.tileM = tile.m;
    tileOptions.tileN = tile.n;
    tileOptions.tileK = tile.k;
    tileOptions.threads = tile.threads;
    pm.addPass(moe::createMoeTilePass(tileOptions));
  }
}

void buildMoeSelectKernelPipeline(OpPassManager &pm, const TileOverride &tile,
                                  const std::string &target) {
  buildMoeOptimizePipeline(pm, tile, target);
  MoeSelectKernelOptions select;
  select.target = target;
  select.tuningCache = tile.tuningCache;
  select.tuningTarget = tile.tuningTarget;
  pm.addPass(createMoeSelectKernel(select));
}

void buildMoeToKernelsPipeline(OpPassManager &pm, const TileOverride &tile,
                               const std::string &target) {
  buildMoeSelectKernelPipeline(pm, tile, target);
  ConvertMoeToKernelsOptions options;
  options.target = target;
  pm.addPass(createConvertMoeToKernels(options));
  pm.addPass(createCSEPass());
}

/// Structured control flow and the gpu dialect's index ops inside kernels,
/// then the target conversion and cleanup.
template <typename GpuToTarget>
static void lowerGpuModules(OpPassManager &pm, GpuToTarget addTargetPasses) {
  OpPassManager &gpu = pm.nest<gpu::GPUModuleOp>();
  gpu.addPass(createSCFToControlFlowPass());
  addTargetPasses(gpu);
  gpu.addPass(createCanonicalizerPass());
  gpu.addPass(createCSEPass());
  gpu.addPass(createReconcileUnrealizedCastsPass());
}

void buildKernelsToNVVMPipeline(OpPassManager &pm,
                                const GpuTargetOptions &options) {
  GpuNVVMAttachTargetOptions attach;
  attach.chip = options.chip;
  attach.features = options.features;
  attach.optLevel = options.optLevel;
  pm.addPass(createGpuNVVMAttachTarget(attach));
  lowerGpuModules(pm, [](OpPassManager &gpu) {
    gpu.addPass(createConvertGpuOpsToNVVMOps());
    // TMA descriptors are kernel parameters passed by value.
    gpu.addNestedPass<LLVM::LLVMFuncOp>(createMarkGridConstantParams());
    // NVVM ops without an intrinsic (wgmma) become inline PTX.
    gpu.addPass(createConvertNVVMToLLVMPass());
  });
  GpuModuleToBinaryPassOptions toBinary;
  toBinary.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(toBinary));
}

void buildKernelsToROCDLPipeline(OpPassManager &pm,
                                 const GpuTargetOptions &options) {
  GpuROCDLAttachTargetOptions attach;
  attach.chip = options.chip;
  attach.optLevel = options.optLevel;
  pm.addPass(createGpuROCDLAttachTarget(attach));
  lowerGpuModules(pm, [&](OpPassManager &gpu) {
    ConvertGpuOpsToROCDLOpsOptions rocdl;
    rocdl.chipset = options.chip;
    gpu.addPass(createConvertGpuOpsToROCDLOps(rocdl));
  });
}

void buildKernelsToHostPipeline(OpPassManager &pm) {
  pm.addPass(createConvertKernelsToHost());
  pm.addPass(createSCFToControlFlowPass());
  // bf16 conversions become integer ops: no soft-float helpers needed.
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

void registerMoecPipelines() {
  PassPipelineRegistration<>("moe-optimize",
                             "Fuse moe ops (their tiles and kernels: "
                             "moe-select-kernel)",
                             [](OpPassManager &pm) {
                               buildMoeOptimizePipeline(pm);
                             });
  PassPipelineRegistration<>(
      "moe-to-kernels",
      "moe-optimize, then buffers, gpu kernels and launches",
      [](OpPassManager &pm) { buildMoeToKernelsPipeline(pm); });
  PassPipelineRegistration<>(
      "moe-to-nvvm", "moe-to-kernels, then NVVM and PTX for sm_90a",
      [](OpPassManager &pm) {
        buildMoeToKernelsPipeline(pm, {}, "sm90a");
        buildKernelsToNVVMPipeline(pm, {"sm_90a", "+ptx80", 3});
      });
  PassPipelineRegistration<>(
      "moe-to-rocdl", "moe-to-kernels, then ROCDL for gfx942",
      [](OpPassManager &pm) {
        buildMoeToKernelsPipeline(pm, {}, "rocdl");
        buildKernelsToROCDLPipeline(pm, {"gfx942", "", 3});
      });
  PassPipelineRegistration<>(
      "moe-to-host", "moe-to-kernels, then LLVM for the host CPU",
      [](OpPassManager &pm) {
        buildMoeToKernelsPipeline(pm, {}, "host");
        buildKernelsToHostPipeline(pm);
      });
}

} // namespace moec
