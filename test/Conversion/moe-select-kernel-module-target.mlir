// RUN: moec-opt %s --moe-select-kernel | FileCheck %s
// RUN: moec-opt %s --moe-select-kernel | moec-opt --convert-moe-to-kernels | FileCheck %s --check-prefix=LOWERED

// Without a target option the module's #moe.target decides, facts
// included: an sm90a whose blocks may use only 1 KiB of shared memory has
// no room for the wgmma pipeline, so the matmul gets the scalar kernel.
// CHECK: module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 1024>}
// CHECK: moe.grouped_matmul {{.*}}strategy = scalar
// CHECK: moe.swiglu {{.*}}strategy = vector
// LOWERED: gpu.func @small_smem_k0_grouped_matmul(
// LOWERED-NOT: wgmma
module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 1024>} {
  func.func @small_smem(%x: tensor<?x256xbf16>, %w: tensor<8x512x256xbf16>,
                        %offsets: tensor<8xi32>) -> tensor<?x256xbf16> {
    %y = moe.grouped_matmul %x, %w, %offsets {transpose_rhs}
        : tensor<?x256xbf16>, tensor<8x512x256xbf16>, tensor<8xi32>
        -> tensor<?x512xbf16>
    %z = moe.swiglu %y : tensor<?x512xbf16> -> tensor<?x256xbf16>
    return %z : tensor<?x256xbf16>
  }
}
