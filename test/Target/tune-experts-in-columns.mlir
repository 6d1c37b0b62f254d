// moec tune on the two matmuls of moe-decompose-lora-grad that read and
// write a LoRA B adapter's [N, E*r] in place (experts_in_columns): their
// keys count the experts from the offsets (dimension 1 of [K, E, N]) and
// name the layout, so that a cache entry for [E, K, N] weights or an
// [E, K, N] gradient of the same sizes does not apply to them; the
// candidates keep the attribute.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE

// OUT: tuning 2 ops with {{[0-9]+}} candidate kernels for sm_90a

// MANIFEST: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=64 N=16 rhs=KEN"
// MANIFEST: "key": "grouped_matmul weight_grad bf16xbf16->f32 E=4 K=64 N=16 out=KEN"

// BUNDLE: entry tune0_0 [sm_90a]
// BUNDLE: 1 arg1 input bf16 [64, 4, 16]
// BUNDLE: moe.grouped_matmul {{.*}} experts_in_columns=true
// BUNDLE: entry tune1_0 [sm_90a]
// BUNDLE: 3 result0 output f32 [64, 4, 16]
// BUNDLE: moe.grouped_weight_grad {{.*}} experts_in_columns=true

func.func @du(%dy: tensor<?x64xbf16>, %b: tensor<64x4x16xbf16>,
              %offsets: tensor<4xi32>) -> tensor<?x16xbf16> {
  %du = moe.grouped_matmul %dy, %b, %offsets {experts_in_columns}
      : tensor<?x64xbf16>, tensor<64x4x16xbf16>, tensor<4xi32>
      -> tensor<?x16xbf16>
  return %du : tensor<?x16xbf16>
}

func.func @db(%dy: tensor<?x64xbf16>, %u: tensor<?x16xbf16>,
              %offsets: tensor<4xi32>) -> tensor<64x4x16xf32> {
  %db = moe.grouped_weight_grad %dy, %u, %offsets
      {experts_in_columns}
      : tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<4xi32>
      -> tensor<64x4x16xf32>
  return %db : tensor<64x4x16xf32>
}
