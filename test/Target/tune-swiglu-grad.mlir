// moec tune on a backward's down-projection dX into SwiGLU's gradient:
// the pair fuses (activation = swiglu_grad), so the tuned op is the fused
// matmul and its candidates take the saved input as an argument of its own
// role, with the grouped rows' symbol M.
// RUN: moec tune %s -o %t.moecb | FileCheck %s --check-prefix=OUT
// RUN: FileCheck %s --check-prefix=MANIFEST < %t.moecb.json
// RUN: moec inspect %t.moecb | FileCheck %s --check-prefix=BUNDLE

// OUT: tuning 1 ops with {{[0-9]+}} candidate kernels for sm_90a

// MANIFEST: "args": [
// MANIFEST-NEXT: "lhs",
// MANIFEST-NEXT: "rhs",
// MANIFEST-NEXT: "offsets",
// MANIFEST-NEXT: "activation_input"
// MANIFEST-NEXT: ],
// MANIFEST: "key": "grouped_matmul bf16xbf16->bf16 E=4 K=64 N=256 rhs=EKN swiglu_grad(bf16)"

// BUNDLE: entry tune0_0 [sm_90a]
// BUNDLE: 0 arg0 input bf16 [s0, 64]
// BUNDLE: 3 arg3 input bf16 [s0, 512]
// BUNDLE: moe.grouped_matmul (0, 1, 2, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 3) -> (4) activation=swiglu_grad

func.func @down_dx(%dy: tensor<?x64xbf16> {moe.sym = "M"},
                   %w: tensor<4x64x256xbf16>, %offsets: tensor<4xi32>,
                   %h: tensor<?x512xbf16> {moe.sym = "M"})
    -> tensor<?x512xbf16> {
  %da = moe.grouped_matmul %dy, %w, %offsets
      : tensor<?x64xbf16>, tensor<4x64x256xbf16>, tensor<4xi32>
      -> tensor<?x256xbf16>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x512xbf16>, tensor<?x256xbf16> -> tensor<?x512xbf16>
  return %dh : tensor<?x512xbf16>
}
