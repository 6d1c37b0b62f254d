// moec tune on the weight gradient of [E, N, K] weights (transpose_rhs)
// with gathered rows: its key names the [E, N, K] output, so that an
// [E, K, N] entry of the same sizes does not apply to it; the candidates
// keep the attribute and the gather, with the grouped gradient sized by
// the op's rows (symbol M) and the token rows by T.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE

// OUT: tuning 1 ops with {{[0-9]+}} candidate kernels for sm_90a

// MANIFEST: "key": "grouped_matmul weight_grad bf16xbf16->bf16 E=4 K=256 N=64 out=ENK gather k=2"

// BUNDLE: entry tune0_0 [sm_90a]
// BUNDLE-NEXT: symbols: s0=T (buffer 0 dim 0) s1=M (buffer 1 dim 0)
// BUNDLE: 0 arg0 input bf16 [s0, 256]
// BUNDLE-NEXT: 1 arg1 input bf16 [s1, 64]
// BUNDLE: output bf16 [4, 64, 256]
// BUNDLE: moe.grouped_weight_grad {{.*}}transpose_rhs=true

func.func @dw(%x: tensor<?x256xbf16>, %dy: tensor<?x64xbf16>,
              %offsets: tensor<4xi32>, %slots: tensor<?xi32>)
    -> tensor<4x64x256xbf16> {
  %g = moe.grouped_weight_grad %x, %dy, %offsets gather(%slots : tensor<?xi32>)
      {transpose_rhs, k = 2 : i64}
      : tensor<?x256xbf16>, tensor<?x64xbf16>, tensor<4xi32>
      -> tensor<4x64x256xbf16>
  return %g : tensor<4x64x256xbf16>
}
