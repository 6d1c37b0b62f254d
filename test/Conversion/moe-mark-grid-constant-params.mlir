// RUN: moec-opt %s -split-input-file -verify-diagnostics \
// RUN:   --pass-pipeline='builtin.module(gpu.module(llvm.func(moe-mark-grid-constant-params)))' | FileCheck %s

// The listed parameters become 128-byte, 64-byte-aligned grid constants
// (TMA descriptors passed by value); the list is removed, other parameters
// and kernels are left alone.
// CHECK-LABEL: llvm.func @tma_kernel
// CHECK-SAME: (%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}, %{{.*}}: !llvm.ptr, %{{.*}}: i64, %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant})
// CHECK-NOT: moe.grid_constant_args
// CHECK-LABEL: llvm.func @plain_kernel
// CHECK-SAME: (%{{.*}}: !llvm.ptr, %{{.*}}: i64)
module attributes {gpu.container_module} {
  gpu.module @kernels {
    llvm.func @tma_kernel(%map: !llvm.ptr, %out: !llvm.ptr, %n: i64,
                          %map2: !llvm.ptr)
        attributes {nvvm.kernel, moe.grid_constant_args = array<i64: 0, 3>} {
      llvm.return
    }
    llvm.func @plain_kernel(%out: !llvm.ptr, %n: i64) attributes {nvvm.kernel} {
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    // expected-error @+1 {{moe.grid_constant_args lists parameter 2 of a kernel with 2 parameters}}
    llvm.func @past_the_end(%map: !llvm.ptr, %n: i64)
        attributes {nvvm.kernel, moe.grid_constant_args = array<i64: 2>} {
      llvm.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    // expected-error @+1 {{moe.grid_constant_args lists parameter 1 of type 'i64', not !llvm.ptr}}
    llvm.func @not_a_pointer(%map: !llvm.ptr, %n: i64)
        attributes {nvvm.kernel, moe.grid_constant_args = array<i64: 1>} {
      llvm.return
    }
  }
}
