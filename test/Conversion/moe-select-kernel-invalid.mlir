// RUN: moec-opt %s --moe-select-kernel=target=host -split-input-file -verify-diagnostics
// RUN: moec-opt %s -split-input-file --convert-moe-to-kernels=target=host -verify-diagnostics

// Checked by moe-select-kernel and, for a hand-written #moe.kernel, by
// convert-moe-to-kernels too.

// A strategy the target has no kernels for (the host has no warp shuffles).
func.func @warp_on_host(%logits: tensor<?x64xf32>)
    -> (tensor<?x2xf32>, tensor<?x2xi32>) {
  // expected-error @+1 {{'moe.router_topk' op has no 'warp' kernel for target 'host' (its moe.kernel)}}
  %w, %ids = moe.router_topk %logits k = 2
      {moe.kernel = #moe.kernel<strategy = warp, tile = <m = 1, n = 1, k = 1, threads = 128>>}
      : tensor<?x64xf32> -> tensor<?x2xf32>, tensor<?x2xi32>
  return %w, %ids : tensor<?x2xf32>, tensor<?x2xi32>
}

// -----

// A strategy whose kernels do not apply to the op's sizes (a row of 36
// bf16 has no 16-byte chunks).
func.func @vector_odd_row(%x: tensor<?x72xbf16>) -> tensor<?x36xbf16> {
  // expected-error @+1 {{'moe.swiglu' op 'vector' kernel does not apply to its types, sizes or tile (its moe.kernel)}}
  %y = moe.swiglu %x
      {moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 256>>}
      : tensor<?x72xbf16> -> tensor<?x36xbf16>
  return %y : tensor<?x36xbf16>
}

// -----

// The module says one target, the option another.
// expected-error @+1 {{kernel target 'host' disagrees with the module's moe.target #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 232448>}}
module attributes {moe.target = #moe.target<kind = "sm90a", chip = "sm_90a", sm_count = 132, shared_memory = 232448>} {
}

// -----

func.func @not_a_kernel(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  // expected-error @+1 {{attribute 'moe.kernel' must be a #moe.kernel<...>, got 1 : i64}}
  %y = moe.swiglu %x {moe.kernel = 1} : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}


// -----

// A hand-written tile with a producer warpgroup for kernels without one.
func.func @producers_for_vector(%x: tensor<?x64xbf16>) -> tensor<?x32xbf16> {
  // expected-error @+1 {{'moe.swiglu' op 'vector' kernels have no producer warpgroup: its moe.kernel tile needs producers = 0}}
  %y = moe.swiglu %x
      {moe.kernel = #moe.kernel<strategy = vector, tile = <m = 1, n = 1, k = 1, threads = 384, producers = 128>>}
      : tensor<?x64xbf16> -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
