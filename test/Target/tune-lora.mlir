// moec tune of LoRA matmuls: the candidates are the tiles the fused
// adapter allows (no cluster): up to rank 64 n = 256 with and without a
// producer warpgroup (the default) and n = 128; past it n = 128 with block
// barriers only. The key names the rank, which decides the plan.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: FileCheck %s --check-prefix=NEG < %t.moecb.json
// RUN: FileCheck %s --check-prefix=RANK72 < %t.moecb.json

// OUT: tuning 2 ops with 21 candidate kernels for sm_90a

// MANIFEST: "args": [
// MANIFEST-NEXT: "lhs",
// MANIFEST-NEXT: "rhs",
// MANIFEST-NEXT: "offsets",
// MANIFEST-NEXT: "gather_slots",
// MANIFEST-NEXT: "lora_a",
// MANIFEST-NEXT: "lora_b"
// MANIFEST-NEXT: ],
// MANIFEST: "tile": "#moe.tile<m = 128, n = 256, k = 64, threads = 384, stages = 3, band_m = 8, producers = 128>"
// MANIFEST: "tile": "#moe.tile<m = 128, n = 256, k = 64, threads = 256,
// MANIFEST: "tile": "#moe.tile<m = 128, n = 256, k = 64, threads = 384,
// MANIFEST: "tile": "#moe.tile<m = 128, n = 128, k = 64, threads = 256,
// MANIFEST: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=256 N=512 gather k=2 lora r=16"
// MANIFEST-NOT: n = 256
// MANIFEST: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=512 N=256 lora r=72"
// NEG-NOT: cluster
// RANK72: lora r=16
// RANK72-NOT: producers
// RANK72: lora r=72
func.func @lora(%x: tensor<?x256xbf16>, %slots: tensor<?xi32> {moe.sym = "R"},
                %offsets: tensor<4xi32>, %w: tensor<4x512x256xbf16>,
                %a: tensor<64x256xbf16>, %b: tensor<512x64xbf16>,
                %wd: tensor<4x256x512xbf16>, %a2: tensor<288x512xbf16>,
                %b2: tensor<256x288xbf16>) -> tensor<?x256xbf16> {
  %h = moe.grouped_matmul %x, %w, %offsets gather(%slots : tensor<?xi32>)
      lora(%a, %b : tensor<64x256xbf16>, tensor<512x64xbf16>)
      {k = 2 : i64, transpose_rhs}
      : tensor<?x256xbf16>, tensor<4x512x256xbf16>, tensor<4xi32>
      -> tensor<?x512xbf16>
  %y = moe.grouped_matmul %h, %wd, %offsets
      lora(%a2, %b2 : tensor<288x512xbf16>, tensor<256x288xbf16>)
      {transpose_rhs}
      : tensor<?x512xbf16>, tensor<4x256x512xbf16>, tensor<4xi32>
      -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
