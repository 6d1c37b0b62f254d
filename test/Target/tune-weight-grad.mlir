// moec tune covers the weight gradient (moe.grouped_weight_grad) on sm_90a: its
// own key, the output gradient (rhs) sized by the op's rows like the lhs,
// and the kernel's default first (block barriers at n = 256: the output is
// 256 wide; its 4 output tiles split each expert's rows 16 ways), then the
// same tile unsplit.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE

// OUT: tuning 1 ops with {{[0-9]+}} candidate kernels for sm_90a

// MANIFEST: "args": [
// MANIFEST-NEXT: "lhs",
// MANIFEST-NEXT: "grad_out",
// MANIFEST-NEXT: "offsets"
// MANIFEST-NEXT: ],
// MANIFEST: "default": true,
// MANIFEST-NEXT: "entry": "tune0_0",
// MANIFEST-NEXT: "tile": "#moe.tile<m = 128, n = 256, k = 64, threads = 256, stages = [[STAGES:[0-9]+]], band_m = 8, row_splits = 16>"
// MANIFEST: "entry": "tune0_1",
// MANIFEST-NEXT: "tile": "#moe.tile<m = 128, n = 256, k = 64, threads = 256, stages = [[STAGES]], band_m = 8, row_splits = 1>"
// MANIFEST: "key": "grouped_matmul weight_grad bf16xbf16->f32 E=4 K=64 N=256"

// BUNDLE: entry tune0_0 [sm_90a]
// BUNDLE-NEXT: symbols: s0=M (buffer 0 dim 0)
// BUNDLE-NEXT: buffers:
// BUNDLE-NEXT: 0 arg0 input bf16 [s0, 64]
// BUNDLE-NEXT: 1 arg1 input bf16 [s0, 256]
func.func @wgrad(%x: tensor<?x64xbf16>, %dy: tensor<?x256xbf16>,
                 %offsets: tensor<4xi32>) -> tensor<4x64x256xf32> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets
      : tensor<?x64xbf16>, tensor<?x256xbf16>, tensor<4xi32>
      -> tensor<4x64x256xf32>
  return %g : tensor<4x64x256xf32>
}
