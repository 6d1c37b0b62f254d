// A hand-written #moe.wgmma_plan is followed into the PTX: block_n = 128
// with a producer warpgroup (a width the cost model never picks for it),
// 3 stages, bands of 4 m-tiles and a register split of 224 / 56 instead of
// 216 / 72. @chosen has the same op with the plan moe-select-kernel picks.
// N = 520 and K = 1000 leave partial tiles and slices; scripts/
// gpu-correctness.sh runs both against the float64 reference on the H200.
// RUN: rm -rf %t && mkdir -p %t
// RUN: moec compile %s --target sm_90a --print-plan | FileCheck %s --check-prefix=PLAN
// RUN: moec compile %s -o %t/k.moecb --target sm_90a --emit-asm %t
// RUN: moec inspect %t/k.moecb | FileCheck %s --check-prefix=BUNDLE
// RUN: FileCheck %s --check-prefix=HAND < %t/hand.sm_90a.ptx
// RUN: FileCheck %s --check-prefix=CHOSEN < %t/chosen.sm_90a.ptx

// PLAN-LABEL: kernels for sm_90a:
// PLAN: @hand moe.grouped_matmul
// PLAN-NEXT: sm90_wgmma, tile #moe.tile<m = 128, n = 128, k = 64, threads = 384, producers = 128> (its moe.kernel)
// PLAN-NEXT: plan #moe.wgmma_plan<block_m = 128, block_n = 128, block_k = 64, stages = 3, band_m = 4, producers = 128, mma_registers = 224, producer_registers = 56>
// PLAN: @chosen moe.grouped_matmul
// PLAN-NEXT: sm90_wgmma, tile #moe.tile<m = 16, n = 16, k = 32, threads = 256> (cost model)
// PLAN-NEXT: plan #moe.wgmma_plan<block_m = 128, block_n = 256, block_k = 64, stages = 4, band_m = 8, producers = 128, mma_registers = 216, producer_registers = 72>

// 3 stages of 128 + 128 rows: 99488 bytes of shared memory; 4 of 128 + 256.
// BUNDLE: hand_k{{[0-9]+}}_grouped_matmul_wgmma grid {{.*}} x 384 threads, {{.*}} smem 99488 #moe.tile<m = 128, n = 128, k = 64, threads = 384, stages = 3, band_m = 4, producers = 128>
// BUNDLE: chosen_k{{[0-9]+}}_grouped_matmul_wgmma grid {{.*}} x 384 threads, {{.*}} smem 197808 #moe.tile<m = 128, n = 256, k = 64, threads = 384, stages = 4, band_m = 8, producers = 128>

// HAND: .entry hand_k{{[0-9]+}}_grouped_matmul_wgmma(
// HAND: setmaxnreg.dec.sync.aligned.u32 56
// HAND: setmaxnreg.inc.sync.aligned.u32 224
// HAND: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// HAND-NOT: m64n256k16
// CHOSEN: .entry chosen_k{{[0-9]+}}_grouped_matmul_wgmma(
// CHOSEN: setmaxnreg.dec.sync.aligned.u32 72
// CHOSEN: setmaxnreg.inc.sync.aligned.u32 216
// CHOSEN: wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16

func.func @hand(%x: tensor<?x1000xbf16>, %ids: tensor<?x1xi32>,
                %w: tensor<8x520x1000xbf16>) -> tensor<?x520xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs,
      moe.kernel = #moe.kernel<strategy = sm90_wgmma,
          tile = <m = 128, n = 128, k = 64, threads = 384, producers = 128>,
          plan = <block_m = 128, block_n = 128, block_k = 64, stages = 3,
                  band_m = 4, producers = 128, mma_registers = 224,
                  producer_registers = 56>>}
      : tensor<?x1000xbf16>, tensor<8x520x1000xbf16>, tensor<8xi32>
      -> tensor<?x520xbf16>
  return %y : tensor<?x520xbf16>
}

func.func @chosen(%x: tensor<?x1000xbf16>, %ids: tensor<?x1xi32>,
                  %w: tensor<8x520x1000xbf16>) -> tensor<?x520xbf16> {
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 8
      : tensor<?x1xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<8xi32>
  %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
      : tensor<?x1000xbf16>, tensor<8x520x1000xbf16>, tensor<8xi32>
      -> tensor<?x520xbf16>
  return %y : tensor<?x520xbf16>
}
