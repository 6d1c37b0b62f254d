// The bundle gives every input the size symbols of its own dimensions: here
// the second argument named R comes after a T one, and must stay R (it was
// read as the first leading-dimension symbol, T, before).
// RUN: moec compile %s -o %t.moecb --target host && moec inspect %t.moecb | FileCheck %s
// CHECK: symbols: s0=T (buffer 0 dim 0) s1=R (buffer 1 dim 0)
// CHECK: 0 arg0 input bf16 [s0, 64]
// CHECK: 1 arg1 input i32 [s1]
// CHECK: 3 arg3 input f32 [s0, 2]
// CHECK: 4 arg4 input bf16 [s1, 64]
// CHECK: 5 result0 output bf16 [s1, 64]
func.func @grad(%dy: tensor<?x64xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                %offsets: tensor<8xi32>, %w: tensor<?x2xf32>,
                %rows: tensor<?x64xbf16> {moe.sym = "R"})
    -> (tensor<?x64xbf16>, tensor<?x2xf32>) {
  %drows, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %rows : tensor<?x2xf32>, tensor<?x64xbf16> -> tensor<?x2xf32>)
      : tensor<?x64xbf16>, tensor<?xi32>, tensor<8xi32> -> tensor<?x64xbf16>
  return %drows, %dw : tensor<?x64xbf16>, tensor<?x2xf32>
}
