// moec tune on an FP8 grouped matmul with block scales: the candidates are
// the wgmma kernel's FP8 tiles (k = 128, a producer warpgroup, n = 256 and
// 128; no block-barrier tile), the default (n = 256, 4 stages) first, and
// the scales are arguments of their own roles.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json

// OUT: tuning 1 ops with {{[0-9]+}} candidate kernels for sm_90a

// MANIFEST: "args": [
// MANIFEST-NEXT: "lhs",
// MANIFEST-NEXT: "rhs",
// MANIFEST-NEXT: "offsets",
// MANIFEST-NEXT: "lhs_scales",
// MANIFEST-NEXT: "rhs_scales"
// MANIFEST-NEXT: ],
// MANIFEST: "default": true,
// MANIFEST-NEXT: "entry": "tune0_0",
// MANIFEST-NEXT: "tile": "#moe.tile<m = 128, n = 256, k = 128, threads = 384, stages = 4, band_m = 8, producers = 128>"
// MANIFEST-NOT: k = 64
// MANIFEST-NOT: threads = 256
// MANIFEST: n = 256{{.*}}cluster = 2
// MANIFEST-NOT: k = 64
// MANIFEST-NOT: threads = 256
// MANIFEST: n = 128, k = 128, threads = 384
// MANIFEST-NOT: k = 64
// MANIFEST-NOT: threads = 256
// MANIFEST: n = 128{{.*}}cluster = 2
// MANIFEST: "key": "grouped_matmul f8E4M3FNxf8E4M3FN->bf16 E=128 K=2048 N=1536 lhs_scales"

func.func @fp8_forward(%x: tensor<?x2048xf8E4M3FN> {moe.sym = "R"},
                       %sx: tensor<?x16xf32> {moe.sym = "R"},
                       %offsets: tensor<128xi32>,
                       %w: tensor<128x1536x2048xf8E4M3FN>,
                       %sw: tensor<128x12x16xf32>) -> tensor<?x1536xbf16> {
  %y = moe.grouped_matmul %x, %w, %offsets
      scales(%sx, %sw : tensor<?x16xf32>, tensor<128x12x16xf32>) {transpose_rhs}
      : tensor<?x2048xf8E4M3FN>, tensor<128x1536x2048xf8E4M3FN>, tensor<128xi32>
      -> tensor<?x1536xbf16>
  return %y : tensor<?x1536xbf16>
}
