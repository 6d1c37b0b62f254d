// RUN: moec-opt %s --convert-moe-to-kernels=target=nvvm | FileCheck %s --check-prefix=NVVM
// RUN: moec-opt %s --convert-moe-to-kernels=target=host | FileCheck %s --check-prefix=HOST
// RUN: not moec-opt %s --convert-moe-to-kernels=target=ptx 2>&1 | FileCheck %s --check-prefix=BAD

// The target option picks the kernels. With nvvm, one thread per 16-byte chunk:
// the group's amax combined with xor shuffles, FP8 encoded by the hardware
// conversion in pairs. With host (threads run one by one), one thread per group,
// integer FP8 encoding.
// NVVM: gpu.func @quantize_k0_quantize_rowwise_warp
// NVVM-COUNT-4: gpu.shuffle xor
// NVVM: nvvm.convert.f32x2.to.f8x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>, sat = #nvvm.sat_mode<satfinite>}
// HOST: gpu.func @quantize_k0_quantize_rowwise_vec
// HOST-NOT: gpu.shuffle
// HOST-NOT: nvvm.
// BAD: unknown target 'ptx' (expected generic, nvvm, rocdl or host)
func.func @quantize(%x: tensor<?x256xbf16>)
    -> (tensor<?x256xf8E4M3FN>, tensor<?x2xf32>) {
  %d, %s = moe.quantize %x group_size = 128
      : tensor<?x256xbf16> -> tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
  return %d, %s : tensor<?x256xf8E4M3FN>, tensor<?x2xf32>
}
