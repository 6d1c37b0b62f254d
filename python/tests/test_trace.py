"""Tracing kernels into moe IR, and argument errors at trace time."""

import numpy as np
import pytest

import moec
from moec import ops

pytestmark = pytest.mark.compiler


def test_tensor_spec_checks_dims():
    spec = moec.Tensor["T", 2048, "bf16"]
    assert repr(spec) == "Tensor[T, 2048, bf16]"
    assert repr(moec.Tensor["M", 4, "f32"]) == "Tensor[M, 4, f32]"
    with pytest.raises(ValueError, match="must be a name such as 'T'"):
        moec.Tensor["T*2", 4, "f32"]
    with pytest.raises(ValueError, match="first dimension"):
        moec.Tensor[4, "T", "f32"]
    with pytest.raises(ValueError, match="'dtype': unsupported element type"):
        moec.Tensor[4, "complex64"]
    with pytest.raises(TypeError, match="moec.Tensor"):
        moec.Tensor[4]


def test_second_row_symbol_becomes_moe_sym():
    # Rows that are not one per token (T*k grouped rows next to T tokens)
    # get their own symbol: moe.sym on the argument, sizes checked apart.
    @moec.kernel
    def combine(rows: moec.Tensor["M", 16, "f32"],
                weights: moec.Tensor["T", 2, "f32"],
                slots: moec.Tensor["M", "i32"],
                offsets: moec.Tensor[4, "i32"]):
        return ops.unpermute(rows, slots, offsets, k=2, weights=weights)

    text = combine.module
    assert 'moe.name = "rows", moe.sym = "M"' in text
    assert 'moe.name = "weights"}' in text
    entry = moec.compile(combine, "host").entry("combine", "host")
    assert entry.symbols == ["M", "T"]
    assert [b.dims for b in entry.inputs[:3]] == [("M", "16"), ("T", "2"),
                                                  ("M",)]
    rows = np.ones((6, 16), np.float32)
    weights = np.full((3, 2), 0.5, np.float32)
    slots = np.array([0, 2, 4, 1, 3, 5], np.int32)
    offsets = np.array([3, 6, 6, 6], np.int32)
    assert entry(rows, weights, slots, offsets).shape == (3, 16)
    with pytest.raises(ValueError, match="'slots': expected shape \\[6\\]"):
        entry(rows, weights, slots[:5], offsets)  # M is rows' row count


def test_every_op_traces_and_verifies():
    @moec.kernel
    def everything(x: moec.Tensor["T", 64, "bf16"],
                   gate: moec.Tensor[8, 64, "bf16"],
                   w1: moec.Tensor[8, 48, 64, "bf16"],
                   w2: moec.Tensor[8, 64, 24, "bf16"],
                   bias: moec.Tensor[8, 48, "bf16"],
                   packed: moec.Tensor[4, 6, 8, "ui8"],
                   absmax: moec.Tensor[4, 6, "f32"],
                   codebook: moec.Tensor[16, "f32"],
                   experts: moec.Tensor[3, "i32"]):
        logits = ops.matmul(x, gate, transpose_rhs=True)
        w, ids = ops.router_topk(logits, k=2, renormalize=True)
        _, slots, offsets = ops.sort_by_expert(ids, 8, align=4)
        rows, probs = ops.permute(x, slots, offsets, k=2, probs=w)
        h = ops.grouped_matmul(rows, w1, offsets, transpose_rhs=True,
                               bias=bias)
        a = ops.swiglu(h)
        da = ops.swiglu_grad(h, a)
        q, s = ops.quantize(a, group_size=8)
        a2 = ops.dequantize(q, s, group_size=8)
        d = ops.grouped_matmul(a2, w2, offsets, transpose_rhs=True,
                               row_scale=probs)
        y = ops.unpermute(d, slots, offsets, k=2)
        nf4 = ops.dequantize(packed, absmax, group_size=16,
                             codebook=codebook, experts=experts)
        return y, da, nf4

    text = everything.ir("moe")
    for op in ("linalg.matmul", "moe.router_topk", "moe.sort_by_expert",
               "align = 4", "moe.permute", "probs(", "moe.grouped_matmul",
               "bias(", "moe.swiglu", "moe.swiglu_grad", "moe.quantize",
               "moe.dequantize", "row_scale(", "moe.unpermute", "codebook("):
        assert op in text, op
    assert "tensor<3x6x16xbf16>" in text


def test_backward_ops_trace_and_verify():
    @moec.kernel
    def backward(dy: moec.Tensor["T", 64, "bf16"],
                 w: moec.Tensor["T", 2, "f32"],
                 ids: moec.Tensor["T", 2, "i32"],
                 x: moec.Tensor["T", 64, "bf16"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8, align=4)
        rows, probs = ops.permute(x, slots, offsets, k=2, probs=w)
        drows, dw = ops.unpermute_grad(dy, slots, offsets, k=2, weights=w,
                                       rows=rows)
        plain = ops.unpermute_grad(dy, slots, offsets, k=2, out_dtype="f32")
        dx, dprobs = ops.permute_grad(drows, slots, offsets, k=2, probs=probs)
        return dx, dprobs, dw, plain, ops.permute_grad(plain, slots, offsets,
                                                       k=2)

    text = backward.ir("moe")
    for op in ("moe.unpermute_grad", "weights(", "moe.permute_grad",
               "probs(", "-> tensor<?x2xf32>)", "tensor<?x64xf32>"):
        assert op in text, op
    assert "gpu.launch_func" in backward.ir("kernels")


def test_ir_at_each_stage_and_fusion():
    @moec.kernel
    def layer(x: moec.Tensor["T", 40, "bf16"], w: moec.Tensor[8, 40, 40, "bf16"],
              ids: moec.Tensor["T", 2, "i32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8)
        rows = ops.permute(x, slots, offsets, k=2)
        return ops.swiglu(ops.grouped_matmul(rows, w, offsets))

    optimized = layer.ir("optimized")
    # permute fused into the matmul prologue, swiglu into its epilogue
    assert "gather(" in optimized and "moe.permute" not in optimized
    assert "#moe.activation<swiglu>" in optimized
    # tiles are moe-select-kernel's choice, unless asked for
    assert "#moe.tile<" not in optimized
    tiled = layer.ir("optimized", tile={"m": 32, "n": 8})
    assert "m = 32, n = 8" in tiled
    assert "gpu.launch_func" in layer.ir("kernels")
    assert "llvm.func" in layer.ir("host")
    with pytest.raises(ValueError, match="'stage': expected one of"):
        layer.ir("ptx-ish")


def test_print_ir_is_one_call(capsys):
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "f32"]):
        return ops.swiglu(x)

    act.print_ir()
    printed = capsys.readouterr().out
    for stage in ("moe", "optimized", "kernels"):
        assert f"act at stage '{stage}'" in printed


def trace(fn, **specs):
    return moec.kernel(fn, signature=specs).module


def test_errors_name_the_argument():
    f32 = lambda *d: moec.Tensor[(*d, "f32")]
    with pytest.raises(ValueError, match="router_topk: 'k' \\(9\\) exceeds"):
        trace(lambda l: ops.router_topk(l, k=9), l=f32("T", 8))
    with pytest.raises(ValueError, match="router_topk: 'logits' must have rank"
                       " 2"):
        trace(lambda l: ops.router_topk(l, k=1), l=f32(8))
    with pytest.raises(ValueError, match="sort_by_expert: 'ids' must be i32"):
        trace(lambda i: ops.sort_by_expert(i, 8), i=f32("T", 2))
    with pytest.raises(ValueError, match="'align' must be a power of two"):
        trace(lambda i: ops.sort_by_expert(i, 8, align=3),
              i=moec.Tensor["T", 2, "i32"])
    with pytest.raises(ValueError, match="'lhs' columns and the reduction"):
        trace(lambda x, w, o: ops.grouped_matmul(x, w, o),
              x=f32("T", 8), w=f32(4, 9, 8), o=moec.Tensor[4, "i32"])
    with pytest.raises(ValueError, match="'scales' are required for FP8"):
        trace(lambda x, w, o: ops.grouped_matmul(x, w, o),
              x=moec.Tensor["T", 8, "f8E4M3FN"],
              w=moec.Tensor[4, 8, 8, "f8E4M3FN"], o=moec.Tensor[4, "i32"])
    with pytest.raises(ValueError, match="unpermute_grad: 'weights' and "
                       "'rows' must be given together"):
        trace(lambda g, s, o, w: ops.unpermute_grad(g, s, o, k=2, weights=w),
              g=f32("T", 8), s=moec.Tensor["T", "i32"],
              o=moec.Tensor[4, "i32"], w=f32("T", 2))
    with pytest.raises(ValueError, match="permute_grad: 'probs' must have "
                       "rank 1"):
        trace(lambda g, s, o, p: ops.permute_grad(g, s, o, k=2, probs=p),
              g=f32("T", 8), s=moec.Tensor["T", "i32"],
              o=moec.Tensor[4, "i32"], p=f32("T", 2))
    with pytest.raises(ValueError, match="sort_by_expert: 'positions' must "
                       "be a bool"):
        trace(lambda i: ops.sort_by_expert(i, 8, positions=1),
              i=moec.Tensor["T", 2, "i32"])
    with pytest.raises(ValueError, match="permute: 'positions' must be i32"):
        trace(lambda x, s, o, p: ops.permute(x, s, o, k=2, positions=p),
              x=f32("T", 8), s=moec.Tensor[16, "i32"],
              o=moec.Tensor[4, "i32"], p=f32(16))
    with pytest.raises(ValueError, match="grouped_matmul: 'scatter_positions'"
                       " needs 'scatter'"):
        trace(lambda x, w, o, p: ops.grouped_matmul(x, w, o,
                                                    scatter_positions=p),
              x=f32("T", 8), w=f32(4, 8, 4), o=moec.Tensor[4, "i32"],
              p=moec.Tensor[16, "i32"])
    with pytest.raises(TypeError, match="'logits' must be a tensor of the "
                       "traced kernel"):
        trace(lambda l: ops.router_topk([1.0], k=1), l=f32("T", 8))
    with pytest.raises(RuntimeError, match="inside a function decorated"):
        ops.swiglu(None)


def test_kernel_needs_annotations_and_tensor_results():
    with pytest.raises(TypeError, match="parameter 'x' needs a type"):
        moec.kernel(lambda x: x)
    with pytest.raises(TypeError, match="must return a moec tensor"):
        moec.kernel(lambda x: 3, signature={"x": moec.Tensor[4, "f32"]}).module


def test_verifier_errors_become_compile_errors():
    bad = """
func.func @bad(%ids: tensor<?x2xi32>) -> tensor<?xi32> {
  %s, %slots, %o = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  return %slots : tensor<?xi32>
}"""
    with pytest.raises(moec.CompileError) as info:
        moec.compile(bad, target="host")
    message = str(info.value)
    assert "error:" in message and "offsets" in message
    with pytest.raises(moec.CompileError, match="does not parse"):
        moec.ir("func.func @f( {", "moe")


def test_tile_option_checked():
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "f32"]):
        return ops.swiglu(x)

    with pytest.raises(ValueError, match="unknown field 'q'"):
        act.compile("host", tile={"q": 1})
    with pytest.raises(ValueError, match="'target': unknown target"):
        act.compile("tpu")


def test_static_tokens_with_align_keep_their_count():
    # With a static token count and align, the slots have T*k + E*(align-1)
    # rows: the ops that return to token order take T from the sort, not
    # from the slot count.
    @moec.kernel
    def static_tokens(x: moec.Tensor[5, 64, "bf16"],
                      ids: moec.Tensor[5, 2, "i32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8, align=4)
        rows = ops.permute(x, slots, offsets, k=2)
        y = ops.unpermute(rows, slots, offsets, k=2)
        dx = ops.permute_grad(rows, slots, offsets, k=2)
        return y, dx

    text = static_tokens.ir("moe")
    assert "tensor<34x64xbf16>" in text  # 5*2 + 8*3 rows
    assert "-> tensor<5x64xbf16>" in text
    assert "tensor<17x64xbf16>" not in text  # 34 // 2, the old guess
