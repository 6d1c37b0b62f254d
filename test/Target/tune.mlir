// moec tune: one function per (tunable op, candidate tile), after fusion,
// plus the manifest the GPU-side tuner reads. The permute is fused into
// the matmul's gather, so the tuned op is the gathered one; the two down
// projections have one key and are tuned once. Outputs 128 wide take
// n = 128 only: 7 stages (the deepest that fits with 4 experts) and 6,
// bands of 4, 8, 16; the kernel's own choice (6 stages, bands of 8) first.
// RUN: moec tune %s -o %t.moecb 2> %t.progress | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=PROGRESS < %t.progress
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE
// RUN: not moec tune %s -o %t.host.moecb --target host 2>&1 | FileCheck %s --check-prefix=HOST
// RUN: not moec tune %s -o %t.two.moecb --target sm_90a,host 2>&1 | FileCheck %s --check-prefix=TWO

// PROGRESS: moec: [{{ *}}{{[0-9.]+}} s] building the tuning candidates for sm_90a
// PROGRESS-NEXT: moec: [{{ *}}{{[0-9.]+}} s] compiling 2 ops' candidates for sm_90a
// PROGRESS-NEXT: moec: [{{ *}}{{[0-9.]+}} s] compiled 12 candidate kernels
// OUT: tuning 2 ops with 12 candidate kernels for sm_90a: wrote {{.*}}.moecb and {{.*}}.moecb.json
// HOST: error: nothing to tune for host
// TWO: moec: error: 'tune' takes one target, got 'sm_90a,host'

// MANIFEST: "moec_tuning_manifest": 1,
// MANIFEST: "args": [
// MANIFEST-NEXT: "lhs",
// MANIFEST-NEXT: "rhs",
// MANIFEST-NEXT: "offsets",
// MANIFEST-NEXT: "gather_slots"
// MANIFEST-NEXT: ],
// MANIFEST: "default": true,
// MANIFEST-NEXT: "entry": "tune0_0",
// MANIFEST-NEXT: "tile": "#moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 8>"
// MANIFEST-COUNT-5: "default": false,
// MANIFEST: "function": "layer",
// MANIFEST-NEXT: "k": 2,
// MANIFEST-NEXT: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=64 N=128 gather k=2"
// MANIFEST: "entry": "tune1_5",
// MANIFEST-NEXT: "tile": "#moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 16>"
// MANIFEST: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=128 N=128"
// MANIFEST: "target": "sm_90a"

// The row count is the symbol M; the gathered lhs's tokens are T.
// BUNDLE: entry tune0_0 [sm_90a]
// BUNDLE-NEXT: symbols: s0=T (buffer 0 dim 0) s1=M (buffer 3 dim 0)
// BUNDLE: tune0_0_k0_grouped_matmul_wgmma grid {{.*}} #moe.tile<m = 128, n = 128, k = 64, threads = 256, stages = 6, band_m = 8>
// BUNDLE: entry tune1_0 [sm_90a]
// BUNDLE-NEXT: symbols: s0=M (buffer 0 dim 0)
// BUNDLE-NOT: entry tune2_
func.func @layer(%x: tensor<?x64xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                 %offsets: tensor<4xi32>, %w: tensor<4x128x64xbf16>,
                 %wd: tensor<4x128x128xbf16>) -> (tensor<?x128xbf16>, tensor<?x128xbf16>) {
  %rows = moe.permute %x, %slots, %offsets k = 2
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<4xi32> -> tensor<?x64xbf16>
  %h = moe.grouped_matmul %rows, %w, %offsets {transpose_rhs}
      : tensor<?x64xbf16>, tensor<4x128x64xbf16>, tensor<4xi32> -> tensor<?x128xbf16>
  %y = moe.grouped_matmul %h, %wd, %offsets {transpose_rhs}
      : tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<4xi32> -> tensor<?x128xbf16>
  %z = moe.grouped_matmul %h, %wd, %offsets {transpose_rhs}
      : tensor<?x128xbf16>, tensor<4x128x128xbf16>, tensor<4xi32> -> tensor<?x128xbf16>
  return %y, %z : tensor<?x128xbf16>, tensor<?x128xbf16>
}
