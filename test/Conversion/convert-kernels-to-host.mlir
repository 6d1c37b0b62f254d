// RUN: moec-opt %s --convert-moe-to-kernels --convert-kernels-to-host | FileCheck %s

// Each kernel becomes a host function taking the block count first and
// running every (block, thread) pair; the launching function is dropped
// (the bundle holds the launch sequence).
// CHECK-NOT: gpu.module
// CHECK: func.func @swiglu_k0_swiglu_vec(%[[BLOCKS:.*]]: index, %{{.*}}: memref<?x64xbf16>, %{{.*}}: memref<?x32xbf16>, %{{.*}}: index)
// CHECK: scf.for %[[B:.*]] = %{{.*}} to %[[BLOCKS]]
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %c256
// CHECK: arith.muli %[[B]], %c256
// CHECK-NOT: gpu.
// CHECK-NOT: func.func @swiglu(
func.func @swiglu(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  %y = moe.swiglu %x : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
