//===- MoeAttrs.td - Attributes of the moe dialect ---------*- tablegen -*-===//
//
// Part of moec. Enumerations that select between variants of one op where the
// math is shared (attributes rather than new ops), and the tile configuration
// `#moe.tile` that the tiling pass attaches to ops.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_IR_MOEATTRS_TD
#define MOEC_DIALECT_MOE_IR_MOEATTRS_TD

include "moec/Dialect/Moe/IR/MoeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

class Moe_EnumAttr<EnumAttrInfo enumInfo, string name>
    : EnumAttr<Moe_Dialect, enumInfo, name> {
  let assemblyFormat = "`<` $value `>`";
}

def Moe_Scoring : I32EnumAttr<"Scoring",
    "how router logits become expert scores", [
      I32EnumAttrCase<"softmax", 0>,
      I32EnumAttrCase<"sigmoid", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_ScoringAttr : Moe_EnumAttr<Moe_Scoring, "scoring">;

def Moe_TopKOrder : I32EnumAttr<"TopKOrder",
    "whether softmax runs over all experts or over the selected k", [
      I32EnumAttrCase<"softmax_then_topk", 0>,
      I32EnumAttrCase<"topk_then_softmax", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_TopKOrderAttr : Moe_EnumAttr<Moe_TopKOrder, "order">;

def Moe_Activation : I32EnumAttr<"Activation",
    "activation applied in a grouped matmul's epilogue", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"swiglu", 1>,
      // The gradient of SwiGLU's input, from the saved input (the matmul's
      // `activation_input`) and the matmul's result as the output gradient.
      I32EnumAttrCase<"swiglu_grad", 2>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_ActivationAttr : Moe_EnumAttr<Moe_Activation, "activation">;

def Moe_GateUpLayout : I32EnumAttr<"GateUpLayout",
    "where the gate and up values sit in a [.., 2I] row", [
      // Columns [0, I) are gate, [I, 2I) are up.
      I32EnumAttrCase<"halves", 0>,
      // Even columns are gate, odd columns are up.
      I32EnumAttrCase<"interleaved", 1>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_GateUpLayoutAttr : Moe_EnumAttr<Moe_GateUpLayout, "layout">;

def Moe_QuantAxis : I32EnumAttr<"QuantAxis",
    "which way a quantization group runs", [
      // A group is `group_size` consecutive columns of one row.
      I32EnumAttrCase<"rowwise", 0>,
      // A group is `group_size` consecutive rows of one column, inside one
      // expert group.
      I32EnumAttrCase<"colwise", 1>,
      // A group is a `group_size` x `group_size` block of one expert's
      // matrix of [E, rows, columns] weights.
      I32EnumAttrCase<"blocks", 2>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_QuantAxisAttr : Moe_EnumAttr<Moe_QuantAxis, "axis">;

def Moe_KernelStrategy : I32EnumAttr<"KernelStrategy",
    "the family of kernels an op is lowered with", [
      // One thread per output element or row: every op, every target.
      I32EnumAttrCase<"scalar", 0>,
      // 16-byte vector accesses per thread (bandwidth-bound ops).
      I32EnumAttrCase<"vector", 1>,
      // A warp per row or chunk, with shuffles (routing, row-wise
      // quantization): targets with warp shuffles.
      I32EnumAttrCase<"warp", 2>,
      // The Hopper warpgroup-MMA matmul (wgmma, TMA, mbarriers): sm90a.
      I32EnumAttrCase<"sm90_wgmma", 3>
    ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Tile configuration
//===----------------------------------------------------------------------===//

def Moe_TileAttr : AttrDef<Moe_Dialect, "Tile"> {
  let mnemonic = "tile";
  let summary = "How a kernel decomposes its work into thread blocks";
  let description = [{
    The work decomposition of the kernel an op lowers to. Attached to an op
    as the discardable attribute `moe.tile` (by hand, by the tuning cache
    in `moe-select-kernel`, or by the `moe-tile` pass from its options);
    ops without one get the cost model's (`moec::moe::defaultTileFor`).

    * Matmul-like ops (`moe.grouped_matmul`, `linalg.matmul`): a thread
      block computes an `m`×`n` tile of the output, stepping `k` columns at
      a time along the reduction, with `threads` threads. Each thread
      computes `m*n/threads` outputs when `threads` divides `m*n`; when
      `m*n` divides `threads`, `threads/(m*n)` threads share an output
      (split reduction). With `moe.grouped_weight_grad` the output tile is
      `m` rows of K by `n` columns of N of one expert, and `k` steps along the
      grouped rows.
    * Row-wise and element-wise ops (routing, sorting, permutation,
      activation, quantization): a thread block handles `m` rows with
      `threads` threads; `n` and `k` are 1 unless an op gives them a
      meaning.

    * Pipelined matmul kernels (the `sm90a` wgmma kernel) also read
      `stages`, the shared-memory pipeline depth (K slices in flight), and
      `band_m`, the m-tiles per band of the persistent tile order (the
      tiles of a band share their B columns in L2). 0, the default, leaves
      each to the kernel: as many stages as fit in shared memory, 8 m-tiles
      per band. Other kernels ignore them. The autotuner (`moec tune`)
      searches these with `n`.
    * `producers`, also only for the `sm90a` wgmma matmul: how many of the
      block's `threads` only copy operands into shared memory (0, the
      default, or 128: one producer warpgroup, warp specialization). The
      other `threads - producers` threads compute; they wait for stages on
      mbarriers instead of block barriers. Other kernels (other targets,
      other operand types) run the `threads - producers` computing threads
      alone, so a tile tuned for `sm90a` stays valid everywhere.
    * `cluster`, also only for the `sm90a` wgmma matmul: blocks per
      thread-block cluster (1, the default, or 2). With 2, the blocks of a
      cluster compute two m-tiles of the same expert and columns, and each
      loads half of their common weight tile by TMA multicast into both
      blocks' shared memory (the weights then cross from L2 once per pair).
      Needs `producers = 128`. Other kernels ignore it.
    * `row_splits`, only for the `sm90a` row reductions
      (`moe.grouped_weight_grad`, and a dense `linalg.matmul` of the form
      Aᵀ·B such as a
      router's weight gradient): the most chunks each group's rows are
      split into, so that few output tiles still fill the GPU. Each chunk's
      tiles write f32 partial sums that a second kernel adds in chunk order
      (the result is the same run to run). 0, the default, leaves it to the
      kernel: a dense Aᵀ·B splits where its output tiles fill at most half
      the SMs, a weight gradient where its experts' tiles number fewer
      than the SMs. 1 never splits. Chunks keep at least 256 rows (a
      weight gradient's at least 1.25x its experts' average), so an expert
      with few rows stays one chunk. Weight gradients with
      `experts_in_columns` ignore it; past the kernel's group table
      (E x S + 1 <= 1024 groups) it takes fewer chunks. A tile of
      `moe.tile_buckets` splits its bucket's launches. Other kernels
      ignore it. The autotuner measures the split against none.

    Constraints (checked by the verifier): `m`, `n` and `k` are powers of
    two (1 included); `threads` is a multiple of 32 (a whole number of
    warps) in `[32, 1024]`; `producers` is 0 or 128 and less than
    `threads`; and one of `m*n` and `threads - producers` divides the
    other, so that outputs split evenly over the computing threads. `stages` is 0 or in
    `[3, 16]` (a pipeline keeps one slice computing and one loading);
    `band_m` is 0 or a power of two up to 64; `cluster` is 1 or 2, and 2
    only with `producers = 128`; `row_splits` is in `[0, 16]`.

    Example:

    ```mlir
    %y = moe.grouped_matmul %x, %w, %offsets
        {moe.tile = #moe.tile<m = 16, n = 16, k = 32, threads = 256>}
        : tensor<?x2048xbf16>, tensor<128x2048x768xbf16>, tensor<128xi32>
        -> tensor<?x768xbf16>
    ```
  }];
  let parameters = (ins
    "int64_t":$m,
    "int64_t":$n,
    "int64_t":$k,
    "int64_t":$threads,
    DefaultValuedParameter<"int64_t", "0">:$stages,
    DefaultValuedParameter<"int64_t", "0">:$band_m,
    DefaultValuedParameter<"int64_t", "0">:$producers,
    DefaultValuedParameter<"int64_t", "1">:$cluster,
    DefaultValuedParameter<"int64_t", "0">:$row_splits
  );
  let builders = [
    AttrBuilder<(ins "int64_t":$m, "int64_t":$n, "int64_t":$k,
                     "int64_t":$threads), [{
      return $_get($_ctxt, m, n, k, threads, /*stages=*/0, /*band_m=*/0,
                   /*producers=*/0, /*cluster=*/1, /*row_splits=*/0);
    }]>,
    AttrBuilder<(ins "int64_t":$m, "int64_t":$n, "int64_t":$k,
                     "int64_t":$threads, "int64_t":$stages,
                     "int64_t":$band_m, "int64_t":$producers), [{
      return $_get($_ctxt, m, n, k, threads, stages, band_m, producers,
                   /*cluster=*/1, /*row_splits=*/0);
    }]>,
    AttrBuilder<(ins "int64_t":$m, "int64_t":$n, "int64_t":$k,
                     "int64_t":$threads, "int64_t":$stages,
                     "int64_t":$band_m, "int64_t":$producers,
                     "int64_t":$cluster), [{
      return $_get($_ctxt, m, n, k, threads, stages, band_m, producers,
                   cluster, /*row_splits=*/0);
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_TileBucketAttr : AttrDef<Moe_Dialect, "TileBucket"> {
  let mnemonic = "tile_bucket";
  let summary = "A tile for the launches of at most `max_rows` rows";
  let description = [{
    One entry of the discardable op attribute `moe.tile_buckets`, an array
    of these in strictly increasing `max_rows`. A kernel whose row count is
    only known at run time is then built once per bucket and once with the
    op's `moe.tile`; each launch runs the variant whose bucket holds the
    row count: the first bucket with `rows <= max_rows`, or `moe.tile` for
    more rows than any bucket holds. The choice is made by the launch grid
    (the other variants get 0 blocks), so it costs no host synchronization.

    The autotuner's cache (`moe-select-kernel{tuning-cache=...}`) attaches buckets
    to `moe.grouped_matmul` when different token counts were measured
    fastest with different tiles. Only the `sm90a` grouped matmul reads
    them; other lowerings use `moe.tile`.

    Example:

    ```mlir
    {moe.tile = #moe.tile<m = 128, n = 256, k = 64, threads = 256>,
     moe.tile_buckets = [#moe.tile_bucket<max_rows = 4096,
         tile = #moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6>>]}
    ```
  }];
  let parameters = (ins "int64_t":$max_rows, "TileAttr":$tile);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Kernel selection
//===----------------------------------------------------------------------===//

def Moe_WgmmaPlanAttr : AttrDef<Moe_Dialect, "WgmmaPlan"> {
  let mnemonic = "wgmma_plan";
  let summary = "Every decision of one sm90a wgmma grouped matmul kernel";
  let description = [{
    The complete plan of the `sm90_wgmma` kernel an op lowers to, written
    by `moe-select-kernel` into the op's `#moe.kernel` (its `plan`) and
    followed by `convert-moe-to-kernels`, which changes nothing in it: a
    plan the kernel cannot build for the op on the target (shared memory,
    registers, the op's types, sizes or attributes) is an error, never a
    silent change. What the op itself settles (types, the experts, K,
    gathers, the epilogue, the LoRA rank and scaling, operand layouts) is
    not repeated here.

    * `block_m`, `block_n`, `block_k`: a block computes `block_m` (128)
      output rows by `block_n` (64, 128 or 256; the gate and up halves
      together with SwiGLU) columns, `block_k` of the reduction per
      pipeline stage: 64 for 16-bit operands, 128 for FP8 (one 128-byte
      row either way; with FP8 also one block of the 1x128 / 128x128
      scales, promoted into the f32 accumulators slice by slice, and
      `block_n` at most 128).
    * `stages`: the shared-memory pipeline depth, in [3, 16].
    * `band_m`: the tile order; m-tiles per band of the persistent tile
      order (a power of two up to 64), whose tiles share their weight
      columns in L2.
    * `producers`: warp roles. 0: 256 threads, every warp copies and
      computes, stages handed over by block barriers; 128: a producer
      warpgroup copies (TMA where it can), the two MMA warpgroups compute,
      stages handed over by mbarriers. Then `mma_registers` and
      `producer_registers` are the register split `setmaxnreg` makes
      (registers per thread of each role; multiples of 8 in [24, 256],
      256 x mma + 128 x producer at most 168 x 384, what the block starts
      with); both 0 without producers.
    * `cluster`: blocks per thread-block cluster (1, or 2 with producers:
      the pair multicasts the weight tile).
    * `row_splits`: the row reductions' chunks per group (1: not split;
      more: f32 partial sums and a second kernel adding them in order).
    * `lora_run_tiles`: with a fused LoRA term in the warp-specialized
      kernel, the n-tiles of one m-tile a block computes in a row, reusing
      the first one's x · Aᵀ (1: none); it divides the n-tiles.
    * `bulk_stores`: the warp-specialized weight gradient with a 16-bit
      output stores its tiles through a staging tile by bulk async copies.
    * `buckets`: kernels for smaller row counts, as `moe.tile_buckets`
      describes: an array of `#moe.wgmma_bucket<max_rows, plan>` in
      strictly increasing `max_rows`; this plan serves the rows above the
      last one.

    Example (the Qwen3-30B-A3B gate_up projection):

    ```mlir
    #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4,
                    band_m = 8, producers = 128, mma_registers = 216,
                    producer_registers = 72>
    ```
  }];
  let parameters = (ins
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$block_k,
    "int64_t":$stages,
    "int64_t":$band_m,
    DefaultValuedParameter<"int64_t", "0">:$producers,
    DefaultValuedParameter<"int64_t", "0">:$mma_registers,
    DefaultValuedParameter<"int64_t", "0">:$producer_registers,
    DefaultValuedParameter<"int64_t", "1">:$cluster,
    DefaultValuedParameter<"int64_t", "1">:$row_splits,
    DefaultValuedParameter<"int64_t", "1">:$lora_run_tiles,
    DefaultValuedParameter<"bool", "false">:$bulk_stores,
    OptionalParameter<"::mlir::ArrayAttr">:$buckets
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_WgmmaBucketAttr : AttrDef<Moe_Dialect, "WgmmaBucket"> {
  let mnemonic = "wgmma_bucket";
  let summary = "The wgmma kernel plan for launches of at most `max_rows` rows";
  let description = [{
    One entry of a `#moe.wgmma_plan`'s `buckets`: the plan of the kernel
    variant that runs when the op's row count is at most `max_rows` (and
    above the previous bucket's). Its plan has no buckets of its own.
  }];
  let parameters = (ins "int64_t":$max_rows, "WgmmaPlanAttr":$plan);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_KernelAttr : AttrDef<Moe_Dialect, "Kernel"> {
  let mnemonic = "kernel";
  let summary = "The lowering strategy chosen for an op, and its tile";
  let description = [{
    Attached to an op as the discardable attribute `moe.kernel` by the
    `moe-select-kernel` pass: which family of kernels
    `convert-moe-to-kernels` lowers the op with, and the tile those kernels
    are built with. The strategy is the fastest one whose kernels apply to
    the op's types and static sizes on the target (`sm90_wgmma`, then
    `warp`, then `vector`, then `scalar`, which applies to every moe op).

    The tile is the op's `moe.tile` (or the cost model's) as the strategy
    reads it: kernels other than `sm90_wgmma` run the computing threads
    alone (`producers = 0`, required in a hand-written `#moe.kernel`);
    `sm90_wgmma` keeps the tile as asked, and `plan` is the whole kernel
    built from it (`#moe.wgmma_plan`: block, stages, tile order, warp roles
    and registers, cluster, row splits, buckets): what the tile leaves open
    (`stages`, `band_m`, `n` for a tile not of its form, the warp roles)
    is decided there, by `moe-select-kernel`. Only `sm90_wgmma` has a plan.
    A hand-written plan is followed as written, or rejected with the
    reason; a `#moe.kernel` without one gets the plan its tile selects.

    Example:

    ```mlir
    %y = moe.grouped_matmul %x, %w, %offsets {moe.kernel = #moe.kernel<
        strategy = sm90_wgmma,
        tile = <m = 128, n = 256, k = 64, threads = 384, producers = 128>,
        plan = <block_m = 128, block_n = 256, block_k = 64, stages = 4,
                band_m = 8, producers = 128, mma_registers = 216,
                producer_registers = 72>>}
        : ...
    ```
  }];
  let parameters = (ins EnumParameter<Moe_KernelStrategy>:$strategy,
                        "TileAttr":$tile,
                        OptionalParameter<"WgmmaPlanAttr">:$plan);
  let builders = [
    AttrBuilder<(ins "KernelStrategy":$strategy, "TileAttr":$tile), [{
      return $_get($_ctxt, strategy, tile, WgmmaPlanAttr());
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_TargetAttr : AttrDef<Moe_Dialect, "Target"> {
  let mnemonic = "target";
  let summary = "The machine kernels are generated for";
  let description = [{
    Attached to a module as `moe.target` by `moe-select-kernel`, and read by
    `convert-moe-to-kernels`: the kernel target `kind` (`generic`, `nvvm`,
    `sm90a`, `rocdl` or `host`; what each may use: docs/README.md, "Lowering
    strategies and targets"),
    the chip the code is for (e.g. `sm_90a`, `gfx942`; empty when not one
    chip), and the facts kernels size themselves by: `sm_count`, the
    multiprocessors a persistent grid fills (at least 1 for sm90a), and
    `shared_memory`, the dynamic shared memory in bytes one block may use
    (at most 227 KiB for sm90a). Today the sm90a matmul reads both: its
    grid and its pipeline depth; other kernels do not.

    Example:

    ```mlir
    module attributes {moe.target = #moe.target<kind = "sm90a",
        chip = "sm_90a", sm_count = 132, shared_memory = 232448>} { ... }
    ```
  }];
  let parameters = (ins
    StringRefParameter<"kernel target">:$kind,
    StringRefParameter<"chip", "\"\"">:$chip,
    DefaultValuedParameter<"int64_t", "0">:$sm_count,
    DefaultValuedParameter<"int64_t", "0">:$shared_memory
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

include "moec/Dialect/Moe/IR/MoeLoweredAttrs.td"

#endif // MOEC_DIALECT_MOE_IR_MOEATTRS_TD
