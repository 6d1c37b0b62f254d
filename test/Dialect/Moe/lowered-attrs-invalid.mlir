// RUN: moec-opt %s -split-input-file -allow-unregistered-dialect -verify-diagnostics
// The dialect checks the form of the attributes convert-moe-to-kernels
// records for the bundle writer (MoeLoweredAttrs.td), so a hand-edited or
// damaged lowered function is rejected when it is parsed, not when the
// bundle writer reads it.

// expected-error @+1 {{attribute 'moe.dims' must be an array of #moe.size, got ["s0"]}}
func.func @dims_as_strings(%x: memref<?xf32> {moe.dims = ["s0"]}) {
  return
}

// -----

// expected-error @+1 {{attribute 'moe.symbols' must be an array of #moe.dim_symbol}}
func.func @symbols_untyped() attributes {moe.symbols = [[0, 0, "T"]]} {
  return
}

// -----

func.func @launch_untyped() {
  // expected-error @+1 {{attribute 'moe.launch' must be a #moe.launch, got "s0 256 cdiv"}}
  "test.launch"() {moe.launch = "s0 256 cdiv"} : () -> ()
  return
}

// -----

// expected-error @+1 {{attribute 'moe.num_buffers' must be a non-negative integer, got -1 : i32}}
func.func @negative_buffers() attributes {moe.num_buffers = -1 : i32} {
  return
}

// -----

// expected-error @+1 {{attribute 'moe.ref_ops' must be an array of #moe.ref_op}}
func.func @ref_ops_untyped() attributes {moe.ref_ops = [{name = "moe.swiglu"}]} {
  return
}

// -----

// expected-error @+1 {{reference op 'moe.swiglu' has 2 operand names for 1 operands}}
func.func @ref_op_names_count() attributes {moe.ref_ops = [#moe.ref_op<
    name = "moe.swiglu", attrs = {}, operands = [0],
    operand_names = ["input", "extra"], results = [1],
    result_names = ["output"]>]} {
  return
}

// -----

// expected-error @+1 {{reference op 'moe.swiglu_grad': operand name "input" is not a non-empty string unique in its list}}
func.func @ref_op_names_unique() attributes {moe.ref_ops = [#moe.ref_op<
    name = "moe.swiglu_grad", attrs = {}, operands = [0, 1],
    operand_names = ["input", "input"], results = [2],
    result_names = ["grad_input"]>]} {
  return
}

// -----

// expected-error @+1 {{expected a symbol s<i>, got 'T'}}
func.func @symbol_by_name(%x: memref<?xf32> {moe.dims = [#moe.size<T * 2>]}) {
  return
}

// -----

// expected-error @+1 {{expected a size: an integer, a symbol s<i>, min(..), max(..) or (..)}}
func.func @dangling_operator(%x: memref<?xf32> {moe.dims = [#moe.size<s0 +>]}) {
  return
}

// -----

// expected-error @+1 {{a size's constants are non-negative, got -3}}
func.func @negative_constant(%x: memref<?xf32> {moe.dims = [#moe.size<-3 + s0>]}) {
  return
}
