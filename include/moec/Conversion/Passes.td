//===- Passes.td - moec conversion passes ------------------*- tablegen -*-===//
//
// Part of moec. Passes that take the moe dialect down to kernels: tensors to
// buffers and launches, and gpu kernels to host functions.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CONVERSION_PASSES_TD
#define MOEC_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeSelectKernel : Pass<"moe-select-kernel", "mlir::ModuleOp"> {
  let summary = "Choose each op's lowering strategy, tile and kernel plan "
                "(#moe.kernel)";
  let description = [{
    Records, for every `moe` op and `linalg.matmul` in the module's
    functions, how `convert-moe-to-kernels` will lower it: the discardable
    attribute `moe.kernel = #moe.kernel<strategy = ..., tile = ...>`, and
    on the module the target, `moe.target = #moe.target<...>`.

    The strategy is the fastest one whose kernels apply to the op on the
    target: `sm90_wgmma` (the Hopper grouped matmul), then `warp` (targets
    with warp shuffles), then `vector` (16-byte accesses), then `scalar`,
    which applies to every moe op. Whether kernels apply is decided from the
    op's element types, static sizes, attributes and tile alone, by each
    strategy's pattern (lib/Conversion/MoeToKernels/*/Patterns.cpp). The
    tile is the op's `moe.tile` (from `moe-tile`, which holds the cost
    model and the tuning cache, or written by hand), else the cost model's,
    as the chosen strategy reads it: only `sm90_wgmma` keeps a producer
    warpgroup (`producers`, `cluster`); the other kernels run the computing
    threads alone.

    For `sm90_wgmma` the pass also decides the whole kernel and records it
    as the kernel's `plan` (`#moe.wgmma_plan`): block width, pipeline
    depth, tile order, warp roles and their register split, cluster, row
    splits, LoRA runs, bulk stores, and the kernels of the row buckets
    (the op's `moe.tile_buckets`, else the weight gradient's measured
    defaults). This is the kernel's cost model (the defaults measured on
    the H200, lib/Conversion/MoeToKernels/Hopper/HopperPlan.cpp), applied
    to the tile asked for. `convert-moe-to-kernels` builds the plan as
    written and rejects, with the reason, one it cannot build (shared
    memory, registers, the op's types and attributes).

    An op that already has a `moe.kernel` keeps it, after a check that its
    strategy has kernels for the op on this target, that they apply and
    that its plan, if written, can be built; one without a plan gets the
    plan its tile selects.

    With `tuning-cache` (a JSON file written by the autotuner, format in
    include/moec/Dialect/Moe/Transforms/TuningCache.h) and `tuning-target`
    (the compile target the tiles were measured on, e.g. `sm_90a`), a
    `moe.grouped_matmul` or `moe.grouped_weight_grad` without a
    `moe.tile`, `moe.tile_buckets` or `moe.kernel` of its own that the
    cache has measured is asked for the measured tiles: on `sm_90a`, whose
    lowering builds a kernel per bucket, every measured row-count bucket
    as `moe.tile_buckets` (the plan's `buckets`) and the cost model's tile
    for the rows above the largest (never measured); on other targets
    `moe.tile` from the largest bucket and `moe.tile_buckets` for the
    smaller ones that measured another tile. A tile written on an op (by
    hand, or by `moe-tile` from its options) takes precedence. A cache
    that cannot be read fails the pass.

    `moec compile --print-plan` prints every op's choice.

    ```mlir
    %rows = moe.permute %x, %slots, %offsets k = 8
        {moe.kernel = #moe.kernel<strategy = vector,
                                  tile = <m = 1, n = 1, k = 1, threads = 256>>}
        : ...
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "The kernel target (generic, nvvm, sm90a, rocdl or host, as for "
           "convert-moe-to-kernels). Empty: the module's `moe.target`, else "
           "`generic`">,
    Option<"tuningCache", "tuning-cache", "std::string", /*default=*/"",
           "Autotuner cache (JSON) whose measured tiles replace the cost "
           "model's">,
    Option<"tuningTarget", "tuning-target", "std::string", /*default=*/"",
           "Compile target whose cache entries apply (e.g. sm_90a)">
  ];
  let dependentDialects = ["::moec::moe::MoeDialect"];
}

def ConvertMoeToKernels : Pass<"convert-moe-to-kernels", "mlir::ModuleOp"> {
  let summary = "Turn moe functions on tensors into buffers, gpu kernels and "
                "launches";
  let description = [{
    Every function of the module becomes a function on memrefs in
    destination-passing style: tensor arguments become memref arguments and
    each result becomes a trailing output memref argument. Each `moe` op (and
    `linalg.matmul` on a zero-filled `tensor.empty`) becomes one or more
    `gpu.func` kernels in a `gpu.module @<func>_kernels` and the
    `gpu.launch_func` ops that run them, in program order; intermediates are
    `memref.alloc`s. Kernels use the op's `#moe.kernel` (from
    `moe-select-kernel`; chosen the same way for an op without one): its
    strategy and tile, and for the sm90a wgmma kernels its `plan`, built
    exactly as written (a plan the kernel cannot build is an error).

    Grouped matmuls walk a ragged tile schedule: a 1-D grid sized by an upper
    bound on the number of (expert, m-tile, n-tile) tiles, each block finding
    its expert from the offsets, so the host never reads token counts.

    The pass records what the bundle writer needs as attributes: `moe.symbols`
    and `moe.ref_ops` on the function, `moe.dims` (size expressions) on output
    arguments and allocations, `moe.buffer` (buffer index) on allocations,
    and `moe.grid` / `moe.scalars` on launches. Expressions are in the RPN of
    docs/bundle.md over the symbols (dynamic input dimensions).
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"\"",
           "Which kernels to emit: `generic` (plain dialects only: any "
           "backend), `nvvm` (NVVM FP8 conversions and warp shuffles: "
           "sm_89+), `sm90a` (nvvm plus Hopper's wgmma grouped matmul: "
           "sm_90a only), `rocdl` (warp shuffles) or `host` (no intra-warp "
           "communication: the host runs a block's threads one by one). "
           "Empty: the module's `moe.target`, else `generic`">
  ];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::func::FuncDialect",
    "mlir::gpu::GPUDialect", "mlir::LLVM::LLVMDialect",
    "mlir::NVVM::NVVMDialect", "mlir::math::MathDialect",
    "mlir::memref::MemRefDialect", "mlir::scf::SCFDialect",
    "mlir::vector::VectorDialect", "::moec::moe::MoeDialect"
  ];
}

def ConvertKernelsToHost : Pass<"convert-kernels-to-host", "mlir::ModuleOp"> {
  let summary = "Turn gpu kernels into host functions that loop over the grid";
  let description = [{
    For the host CPU backend. Each `gpu.func` kernel (with a
    `known_block_size`) of each `gpu.module` becomes a `func.func` of the same
    name in the enclosing module whose first argument is the number of blocks
    and whose body runs the kernel body for every (block, thread) pair in
    order. Valid for kernels without barriers or shared memory, which is
    checked. The gpu modules and the host functions that launched them are
    removed: the runtime executes launches from the bundle's steps.
  }];
  let dependentDialects = [
    "mlir::func::FuncDialect", "mlir::scf::SCFDialect",
    "mlir::arith::ArithDialect"
  ];
}

def MarkGridConstantParams
    : Pass<"moe-mark-grid-constant-params", "mlir::LLVM::LLVMFuncOp"> {
  let summary = "Pass the kernel parameters that hold TMA descriptors by value";
  let description = [{
    Runs on the LLVM kernels of a gpu module after `convert-gpu-ops-to-nvvm`.
    A kernel whose `moe.grid_constant_args` attribute lists parameter
    indices (of the lowered signature) gets, on each of those `!llvm.ptr`
    parameters, `llvm.byval = !llvm.array<128 x i8>`, `llvm.align = 64` and
    `nvvm.grid_constant`: the launch then copies 128 bytes (a CUtensorMap)
    into a 64-byte-aligned `.param`, and the pointer is that parameter's
    own address, which TMA copies (`cp.async.bulk.tensor`) can read
    (`__grid_constant__` in CUDA). The attribute is removed. A listed index
    past the parameters, or a parameter that is not `!llvm.ptr`, is an
    error.
  }];
}

#endif // MOEC_CONVERSION_PASSES_TD
