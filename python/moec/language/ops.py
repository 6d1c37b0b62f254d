"""The moe dialect's ops, for writing kernels in Python.

Call these inside a function decorated with `@moec.kernel`; each appends one
op to the traced module and returns its result tensor(s). Arguments are
checked as they are given (the error names the argument); the dialect's
verifier checks the module again when it is compiled. The semantics of every
op are those of the dialect (docs/dialects/moe.md).
"""

from __future__ import annotations

import math
from typing import Optional

from . import _dtypes
from ._checks import (_attr_dict, _choice, _dtype_in, _float, _positions_text,
                      _positive, _rank, _same_dim, _token_rows)
from ._ir import Dim, Sym, Value, check_value, current_builder
# The grouped matmul's ops live in their own module (the most options of
# the dialect); re-exported here.
from ._matmul_ops import grouped_matmul, grouped_weight_grad, lora_grad

__all__ = [
    "matmul", "router_topk", "router_topk_grad", "sort_by_expert", "permute",
    "permute_probs", "unpermute", "permute_grad", "unpermute_grad",
    "grouped_matmul", "grouped_weight_grad",
    "lora_grad", "swiglu", "swiglu_grad", "quantize", "dequantize",
]


def matmul(x, w, *, transpose_rhs: bool = False, out_dtype="f32") -> Value:
    """`x · w` (or `x · wᵀ`) as linalg.fill + linalg.matmul, e.g. the router.

    x is [T, K]; w is [K, N], or [N, K] with transpose_rhs (nn.Linear).
    Accumulates in f32 and returns [T, N] of `out_dtype`.
    """
    op = "matmul"
    x = check_value(x, "x", op)
    w = check_value(w, "w", op)
    _rank(x, 2, "x", op)
    _rank(w, 2, "w", op)
    if x.dtype != w.dtype:
        raise ValueError(f"{op}: 'x' and 'w' must share an element type, got "
                         f"{x.dtype} and {w.dtype}")
    out_dtype = _dtypes.canonical(out_dtype, "out_dtype")
    k_dim, n_dim = (w.shape[1], w.shape[0]) if transpose_rhs else w.shape
    _same_dim(x.shape[1], k_dim, "'x' columns and the reduction size of 'w'",
              op)
    if isinstance(n_dim, Sym):
        raise ValueError(f"{op}: 'w' must have static sizes")
    b = current_builder()
    out = b.fresh((x.shape[0], n_dim), out_dtype)
    zero, init, acc = (b.fresh((), "f32").name for _ in range(3))
    dyn = ""
    if isinstance(x.shape[0], Sym):
        c0, rows = b.fresh((), "index").name, b.fresh((), "index").name
        b.emit(f"{c0} = arith.constant 0 : index")
        b.emit(f"{rows} = tensor.dim {x.name}, {c0} : {x.type}")
        dyn = rows
    zero_text = "0.0" if out_dtype in _dtypes.FLOATS else "0"
    elem = out_dtype
    b.emit(f"{zero} = arith.constant {zero_text} : {elem}")
    b.emit(f"{init} = tensor.empty({dyn}) : {out.type}")
    b.emit(f"{acc} = linalg.fill ins({zero} : {elem}) outs({init} : "
           f"{out.type}) -> {out.type}")
    rhs_map = "(n, k)" if transpose_rhs else "(k, n)"
    b.emit(f"{out.name} = linalg.matmul indexing_maps = ["
           f"affine_map<(m, n, k) -> (m, k)>, "
           f"affine_map<(m, n, k) -> {rhs_map}>, "
           f"affine_map<(m, n, k) -> (m, n)>] "
           f"ins({x.name}, {w.name} : {x.type}, {w.type}) "
           f"outs({acc} : {out.type}) -> {out.type}")
    return out


def _router_attrs(op: str, scoring: str, order: str, renormalize: bool,
                  scaling_factor: float) -> dict:
    """The scoring attributes router_topk and router_topk_grad share."""
    _choice(scoring, "scoring", op, ("softmax", "sigmoid"))
    _choice(order, "order", op, ("softmax_then_topk", "topk_then_softmax"))
    if not scaling_factor > 0:
        raise ValueError(f"{op}: 'scaling_factor' must be positive")
    attrs = {}
    if scoring != "softmax":
        attrs["scoring"] = f"#moe.scoring<{scoring}>"
    if order != "softmax_then_topk":
        attrs["order"] = f"#moe.order<{order}>"
    if renormalize:
        attrs["renormalize"] = True
    if scaling_factor != 1.0:
        attrs["scaling_factor"] = f"{_float(scaling_factor)} : f32"
    return attrs


def router_topk(logits, k: int, *, scoring: str = "softmax",
                order: str = "softmax_then_topk", renormalize: bool = False,
                bias=None, num_groups: Optional[int] = None,
                topk_groups: Optional[int] = None,
                scaling_factor: float = 1.0):
    """Top-k experts per token: returns (weights [T, k] f32, ids [T, k] i32).

    `order="topk_then_softmax"` is Mixtral's routing; `renormalize=True` is
    Qwen3's norm_topk_prob; `bias`, `num_groups`, `topk_groups` and
    `scaling_factor` are DeepSeek-V3's.
    """
    op = "router_topk"
    logits = check_value(logits, "logits", op)
    _rank(logits, 2, "logits", op)
    _dtype_in(logits, _dtypes.FLOATS, "logits", op)
    k = _positive(k, "k", op)
    experts = logits.shape[1]
    if isinstance(experts, int) and k > experts:
        raise ValueError(f"{op}: 'k' ({k}) exceeds the number of experts "
                         f"({experts})")
    attrs = _router_attrs(op, scoring, order, renormalize, scaling_factor)
    if (num_groups is None) != (topk_groups is None):
        raise ValueError(f"{op}: give 'num_groups' and 'topk_groups' together")
    if num_groups is not None:
        attrs["num_groups"] = f"{_positive(num_groups, 'num_groups', op)} : i64"
        attrs["topk_groups"] = (
            f"{_positive(topk_groups, 'topk_groups', op)} : i64")
    bias_text = ""
    if bias is not None:
        bias = check_value(bias, "bias", op)
        _rank(bias, 1, "bias", op)
        _same_dim(bias.shape[0], experts, "'bias' size and the expert count",
                  op)
        bias_text = f" bias({bias.name} : {bias.type})"
    b = current_builder()
    weights = b.fresh((logits.shape[0], k), "f32")
    ids = b.fresh((logits.shape[0], k), "i32")
    b.emit(f"{weights.name}, {ids.name} = moe.router_topk {logits.name}"
           f"{bias_text} k = {k}{_attr_dict(attrs)} : {logits.type} -> "
           f"{weights.type}, {ids.type}")
    return weights, ids


def router_topk_grad(logits, ids, grad_weights, *, scoring: str = "softmax",
                     order: str = "softmax_then_topk",
                     renormalize: bool = False, scaling_factor: float = 1.0,
                     out_dtype=None) -> Value:
    """Gradient of router_topk's weights with respect to its logits.

    `ids` [T, k] i32 are the experts the forward selected and
    `grad_weights` [T, k] f32 the gradient of its weights; `scoring`,
    `order`, `renormalize` and `scaling_factor` must be the forward's.
    Returns [T, E] of `out_dtype` (default: the logits' type).
    """
    op = "router_topk_grad"
    logits = check_value(logits, "logits", op)
    ids = check_value(ids, "ids", op)
    grad_weights = check_value(grad_weights, "grad_weights", op)
    _rank(logits, 2, "logits", op)
    _rank(ids, 2, "ids", op)
    _rank(grad_weights, 2, "grad_weights", op)
    _dtype_in(logits, _dtypes.FLOATS, "logits", op)
    _dtype_in(ids, ("i32",), "ids", op)
    _dtype_in(grad_weights, ("f32",), "grad_weights", op)
    _same_dim(ids.shape, grad_weights.shape, "'ids' and 'grad_weights' shapes",
              op)
    _same_dim(ids.shape[0], logits.shape[0],
              "'ids' and 'logits' token counts", op)
    out_dtype = (logits.dtype if out_dtype is None
                 else _dtypes.canonical(out_dtype, "out_dtype"))
    if out_dtype not in ("bf16", "f16", "f32"):
        raise ValueError(f"{op}: 'out_dtype' must be bf16, f16 or f32, got "
                         f"{out_dtype}")
    attrs = _router_attrs(op, scoring, order, renormalize, scaling_factor)
    b = current_builder()
    out = b.fresh(logits.shape, out_dtype)
    b.emit(f"{out.name} = moe.router_topk_grad {logits.name}, {ids.name}, "
           f"{grad_weights.name}{_attr_dict(attrs)} : {logits.type}, "
           f"{ids.type}, {grad_weights.type} -> {out.type}")
    return out


def sort_by_expert(ids, num_experts: int, *, align: Optional[int] = None,
                   positions: bool = False):
    """Sorts the T*k slots by expert: returns (sorted_expert_ids [M],
    slots [M], offsets [E]) with M = T*k, or T*k + E*(align-1) with align.
    With `positions=True` also the row of each slot, [T*k] i32, fourth: the
    `positions=` of permute, unpermute and their gradients and the
    `scatter_positions=` of grouped_matmul, which then do not rebuild it.
    (Within one kernel the compiler shares it by itself; return it to pass
    it to a kernel compiled apart.)"""
    op = "sort_by_expert"
    ids = check_value(ids, "ids", op)
    _rank(ids, 2, "ids", op)
    _dtype_in(ids, ("i32",), "ids", op)
    num_experts = _positive(num_experts, "num_experts", op)
    rows = ids.shape[0] * ids.shape[1]
    text = f"experts = {num_experts}"
    if align is not None:
        align = _positive(align, "align", op)
        if align & (align - 1):
            raise ValueError(f"{op}: 'align' must be a power of two, got "
                             f"{align}")
        rows = rows + num_experts * (align - 1)
        text += f" align = {align}"
    if not isinstance(positions, bool):
        raise ValueError(f"{op}: 'positions' must be a bool, got "
                         f"{positions!r}")
    b = current_builder()
    results = [b.fresh((rows,), "i32"), b.fresh((rows,), "i32"),
               b.fresh((num_experts,), "i32")]
    if positions:  # one per slot: T*k, no padding rows
        tokens, k = ids.shape
        results.append(b.fresh(
            (tokens * k if isinstance(tokens, int) and isinstance(k, int)
             else Sym(),), "i32"))
    b.emit(f"{', '.join(r.name for r in results)} = moe.sort_by_expert "
           f"{ids.name} {text} : {ids.type} -> "
           f"{', '.join(r.type for r in results)}")
    results[1].tokens = ids.shape[0]
    return tuple(results)


def _routing(slots, offsets, op: str):
    slots = check_value(slots, "slots", op)
    offsets = check_value(offsets, "offsets", op)
    _rank(slots, 1, "slots", op)
    _rank(offsets, 1, "offsets", op)
    _dtype_in(slots, ("i32",), "slots", op)
    _dtype_in(offsets, ("i32",), "offsets", op)
    return slots, offsets


def permute(tokens, slots, offsets, k: int, *, probs=None, scales=None,
            positions=None):
    """Gathers token rows into expert order: rows [M, H]; with `probs`
    ([T, k] f32) and/or `scales` ([T, G] f32) also their permuted copies
    ([M] and [M, G]), returned after the rows. `positions`: the sort's row
    of each slot (sort_by_expert(positions=True))."""
    op = "permute"
    tokens = check_value(tokens, "tokens", op)
    slots, offsets = _routing(slots, offsets, op)
    _rank(tokens, 2, "tokens", op)
    k = _positive(k, "k", op)
    b = current_builder()
    rows = b.fresh((slots.shape[0], tokens.shape[1]), tokens.dtype)
    extra, results = _positions_text(positions, op), [rows]
    if probs is not None:
        probs = check_value(probs, "probs", op)
        _rank(probs, 2, "probs", op)
        permuted = b.fresh((slots.shape[0],), "f32")
        extra += f" probs({probs.name} : {probs.type} -> {permuted.type})"
        results.append(permuted)
    if scales is not None:
        scales = check_value(scales, "scales", op)
        _rank(scales, 2, "scales", op)
        permuted = b.fresh((slots.shape[0], scales.shape[1]), "f32")
        extra += f" scales({scales.name} : {scales.type} -> {permuted.type})"
        results.append(permuted)
    b.emit(f"{', '.join(r.name for r in results)} = moe.permute "
           f"{tokens.name}, {slots.name}, {offsets.name} k = {k}{extra} : "
           f"{tokens.type}, {slots.type}, {offsets.type} -> {rows.type}")
    return results[0] if len(results) == 1 else tuple(results)


def permute_probs(probs, slots, offsets, k: int, *,
                  scale: float = 1.0) -> Value:
    """The routing weight of each grouped row, times `scale`: [M] f32 with
    row i = scale * probs[slots[i] / k, slots[i] % k] (0 for padding rows);
    `probs` is [T, k] f32. permute's `probs` without the rows (the row
    scale of a matmul that gathers by slot)."""
    op = "permute_probs"
    probs = check_value(probs, "probs", op)
    slots, offsets = _routing(slots, offsets, op)
    _rank(probs, 2, "probs", op)
    _dtype_in(probs, ("f32",), "probs", op)
    k = _positive(k, "k", op)
    if not math.isfinite(scale):
        raise ValueError(f"{op}: 'scale' must be finite, got {scale}")
    attrs = {} if scale == 1.0 else {"scale": f"{_float(scale)} : f32"}
    b = current_builder()
    out = b.fresh((slots.shape[0],), "f32")
    b.emit(f"{out.name} = moe.permute_probs {probs.name}, {slots.name}, "
           f"{offsets.name} k = {k}{_attr_dict(attrs)} : {probs.type}, "
           f"{slots.type}, {offsets.type} -> {out.type}")
    return out


def unpermute(rows, slots, offsets, k: int, *, weights=None, out_dtype=None,
              positions=None):
    """Back to token order, summing each token's k rows (times `weights`
    [T, k] when given): [T, N] of `out_dtype` (default: the rows' type).
    `positions`: the sort's row of each slot."""
    op = "unpermute"
    rows = check_value(rows, "rows", op)
    slots, offsets = _routing(slots, offsets, op)
    _rank(rows, 2, "rows", op)
    k = _positive(k, "k", op)
    out_dtype = _dtypes.canonical(out_dtype or rows.dtype, "out_dtype")
    extra = _positions_text(positions, op)
    if weights is not None:
        weights = check_value(weights, "weights", op)
        _rank(weights, 2, "weights", op)
        extra += f" weights({weights.name} : {weights.type})"
    b = current_builder()
    out = b.fresh((_token_rows(slots, k, weights), rows.shape[1]), out_dtype)
    b.emit(f"{out.name} = moe.unpermute {rows.name}, {slots.name}, "
           f"{offsets.name} k = {k}{extra} : {rows.type}, {slots.type}, "
           f"{offsets.type} -> {out.type}")
    return out


def permute_grad(grad_rows, slots, offsets, k: int, *, probs=None,
                 out_dtype=None, positions=None):
    """The gradient of `permute`: each token's k row gradients summed, [T, H]
    of `out_dtype` (default: the rows' type); with `probs` (the gradient of
    the permuted probabilities, [M] f32) also their gradient [T, k] f32,
    returned after the tokens. `positions`: the sort's row of each slot."""
    op = "permute_grad"
    grad_rows = check_value(grad_rows, "grad_rows", op)
    slots, offsets = _routing(slots, offsets, op)
    _rank(grad_rows, 2, "grad_rows", op)
    k = _positive(k, "k", op)
    out_dtype = _dtypes.canonical(out_dtype or grad_rows.dtype, "out_dtype")
    b = current_builder()
    tokens = _token_rows(slots, k, None)
    grad_tokens = b.fresh((tokens, grad_rows.shape[1]), out_dtype)
    extra, results = _positions_text(positions, op), [grad_tokens]
    if probs is not None:
        probs = check_value(probs, "probs", op)
        _rank(probs, 1, "probs", op)
        _dtype_in(probs, ("f32",), "probs", op)
        grad_probs = b.fresh((tokens, k), "f32")
        extra += f" probs({probs.name} : {probs.type} -> {grad_probs.type})"
        results.append(grad_probs)
    b.emit(f"{', '.join(r.name for r in results)} = moe.permute_grad "
           f"{grad_rows.name}, {slots.name}, {offsets.name} k = {k}{extra} : "
           f"{grad_rows.type}, {slots.type}, {offsets.type} -> "
           f"{grad_tokens.type}")
    return results[0] if len(results) == 1 else tuple(results)


def unpermute_grad(grad_out, slots, offsets, k: int, *, weights=None,
                   rows=None, out_dtype=None, positions=None,
                   row_gradients: bool = True):
    """The gradient of `unpermute`: each grouped row gets its token's
    gradient (times its weight), [M, H] of `out_dtype` (default: the
    gradient's type). With the forward's `weights` [T, k] and input `rows`
    [M, H] (given together) also the weights' gradient [T, k] f32, returned
    after the rows. `positions`: the sort's row of each slot.
    `row_gradients=False` (with `weights`): the weights' gradient only, for
    matmuls that gather `grad_out` themselves (grouped_matmul with
    `gather=slots` and `row_scale=permute_probs(weights, ...)`)."""
    op = "unpermute_grad"
    grad_out = check_value(grad_out, "grad_out", op)
    slots, offsets = _routing(slots, offsets, op)
    _rank(grad_out, 2, "grad_out", op)
    k = _positive(k, "k", op)
    if (weights is None) != (rows is None):
        raise ValueError(f"{op}: 'weights' and 'rows' must be given together "
                         f"(the forward's weights and input rows)")
    if not row_gradients and weights is None:
        raise ValueError(f"{op}: 'row_gradients=False' needs 'weights' and "
                         f"'rows' (it would compute nothing)")
    out_dtype = _dtypes.canonical(out_dtype or grad_out.dtype, "out_dtype")
    b = current_builder()
    grad_rows = (b.fresh((slots.shape[0], grad_out.shape[1]), out_dtype)
                 if row_gradients else None)
    extra = _positions_text(positions, op)
    results = [grad_rows] if row_gradients else []
    if weights is not None:
        weights = check_value(weights, "weights", op)
        rows = check_value(rows, "rows", op)
        _rank(weights, 2, "weights", op)
        _rank(rows, 2, "rows", op)
        _same_dim(rows.shape[1], grad_out.shape[1],
                  "'rows' and 'grad_out' hidden sizes", op)
        grad_weights = b.fresh((grad_out.shape[0], k), "f32")
        extra += (f" weights({weights.name}, {rows.name} : {weights.type}, "
                  f"{rows.type} -> {grad_weights.type})")
        results.append(grad_weights)
    rows_type = f" -> {grad_rows.type}" if row_gradients else ""
    b.emit(f"{', '.join(r.name for r in results)} = moe.unpermute_grad "
           f"{grad_out.name}, {slots.name}, {offsets.name} k = {k}{extra} : "
           f"{grad_out.type}, {slots.type}, {offsets.type}{rows_type}")
    return results[0] if len(results) == 1 else tuple(results)


def _gate_up(x: Value, arg: str, op: str) -> Dim:
    _rank(x, 2, arg, op)
    cols = x.shape[1]
    if isinstance(cols, int) and cols % 2:
        raise ValueError(f"{op}: '{arg}' must have an even number of columns "
                         f"(gate and up), got {cols}")
    return cols


def _layout_attr(layout: str, op: str) -> dict:
    _choice(layout, "layout", op, ("halves", "interleaved"))
    return {"layout": "#moe.layout<interleaved>"} if layout != "halves" else {}


def swiglu(x, *, layout: str = "halves", out_dtype=None) -> Value:
    """silu(gate) * up: [M, 2I] -> [M, I]."""
    op = "swiglu"
    x = check_value(x, "x", op)
    cols = _gate_up(x, "x", op)
    attrs = _layout_attr(layout, op)
    b = current_builder()
    out = b.fresh((x.shape[0], cols // 2),
                  _dtypes.canonical(out_dtype or x.dtype, "out_dtype"))
    b.emit(f"{out.name} = moe.swiglu {x.name}{_attr_dict(attrs)} : {x.type} "
           f"-> {out.type}")
    return out


def swiglu_grad(x, grad_output, *, layout: str = "halves",
                out_dtype=None) -> Value:
    """The gradient of swiglu with respect to its input: [M, 2I]."""
    op = "swiglu_grad"
    x = check_value(x, "x", op)
    dy = check_value(grad_output, "grad_output", op)
    _gate_up(x, "x", op)
    _rank(dy, 2, "grad_output", op)
    attrs = _layout_attr(layout, op)
    b = current_builder()
    out = b.fresh(x.shape, _dtypes.canonical(out_dtype or x.dtype,
                                             "out_dtype"))
    b.emit(f"{out.name} = moe.swiglu_grad {x.name}, {dy.name}"
           f"{_attr_dict(attrs)} : {x.type}, {dy.type} -> {out.type}")
    return out


def _blocks_of(size: Dim, group: int) -> Dim:
    """ceil(size / group): the groups along a dimension of `size`."""
    return Sym() if isinstance(size, Sym) else -(-size // group)


def _scale_rows_colwise(rows: Dim, experts: int, group: int) -> Dim:
    if isinstance(rows, Sym):
        return Sym()
    return (rows + min(experts, rows) * (group - 1)) // group


def quantize(x, *, group_size: int = 128, dtype="f8E4M3FN",
             axis: str = "rowwise", offsets=None, pow2_scale: bool = False,
             transpose: bool = False):
    """FP8 with per-group scales: returns (data, scales).

    Row-wise scales are [M, ceil(K/g)]; column-wise ones (`axis="colwise"`,
    groups of g rows inside each expert group given by `offsets`) are
    [(M + min(E, M)*(g-1)) / g, K], and with `transpose=True` the data is
    [K, g * those rows] (the FP8 weight gradient's operand layout).
    `axis="blocks"` quantizes [E, N, K] expert weights in g x g blocks:
    scales [E, ceil(N/g), ceil(K/g)]; with `transpose=True` data [E, K, N]
    and scales [E, ceil(K/g), ceil(N/g)] (the FP8 input gradient's weights).
    """
    op = "quantize"
    x = check_value(x, "x", op)
    _choice(axis, "axis", op, ("rowwise", "colwise", "blocks"))
    _rank(x, 3 if axis == "blocks" else 2, "x", op)
    _dtype_in(x, _dtypes.FLOATS, "x", op)
    group = _positive(group_size, "group_size", op)
    dtype = _dtypes.canonical(dtype, "dtype")
    if dtype not in _dtypes.FP8:
        raise ValueError(f"{op}: 'dtype' must be FP8 (f8E4M3FN or f8E5M2), "
                         f"got {dtype}")
    if transpose and axis == "rowwise":
        raise ValueError(f"{op}: 'transpose' is for axis='colwise' (the "
                         f"weight gradient's operands) or axis='blocks' "
                         f"(expert weights)")
    attrs: dict = {}
    extra = ""
    data_shape = x.shape
    if axis == "colwise":
        if offsets is None:
            raise ValueError(f"{op}: axis='colwise' needs 'offsets'")
        offsets = check_value(offsets, "offsets", op)
        extra = f" offsets({offsets.name} : {offsets.type})"
        attrs["axis"] = "#moe.axis<colwise>"
        blocks = _scale_rows_colwise(x.shape[0], offsets.shape[0], group)
        scale_shape = (blocks, x.shape[1])
        if transpose:
            data_shape = (x.shape[1],
                          Sym() if isinstance(blocks, Sym) else group * blocks)
    else:
        if offsets is not None:
            raise ValueError(f"{op}: 'offsets' is for axis='colwise' only")
        if axis == "blocks":
            attrs["axis"] = "#moe.axis<blocks>"
            e, n, k = x.shape
            if transpose:
                n, k = k, n
                data_shape = (e, n, k)
            scale_shape = (e, _blocks_of(n, group), _blocks_of(k, group))
        else:
            scale_shape = (x.shape[0], _blocks_of(x.shape[1], group))
    if transpose:
        attrs["transpose"] = True
    if pow2_scale:
        attrs["pow2_scale"] = True
    b = current_builder()
    data = b.fresh(data_shape, dtype)
    scales = b.fresh(scale_shape, "f32")
    b.emit(f"{data.name}, {scales.name} = moe.quantize {x.name}{extra} "
           f"group_size = {group}{_attr_dict(attrs)} : {x.type} -> "
           f"{data.type}, {scales.type}")
    return data, scales


def dequantize(data, scales, *, group_size: int, dtype="bf16",
               axis: str = "rowwise", offsets=None, codebook=None,
               experts=None) -> Value:
    """FP8 data times its group scales ([M, K]), or NF4 expert weights:
    `data` ui8 [E, K, N/2] with `codebook` [16] f32 and absmax `scales`,
    optionally only the `experts` [S] given, to [S or E, K, N]."""
    op = "dequantize"
    data = check_value(data, "data", op)
    scales = check_value(scales, "scales", op)
    group = _positive(group_size, "group_size", op)
    dtype = _dtypes.canonical(dtype, "dtype")
    _choice(axis, "axis", op, ("rowwise", "colwise"))
    attrs = {"axis": "#moe.axis<colwise>"} if axis == "colwise" else {}
    extra = ""
    if offsets is not None:
        offsets = check_value(offsets, "offsets", op)
        extra += f" offsets({offsets.name} : {offsets.type})"
    if data.dtype == "ui8":
        _rank(data, 3, "data", op)
        if codebook is None:
            raise ValueError(f"{op}: NF4 data (ui8) needs 'codebook'")
        codebook = check_value(codebook, "codebook", op)
        extra += f" codebook({codebook.name} : {codebook.type})"
        count = data.shape[0]
        if experts is not None:
            experts = check_value(experts, "experts", op)
            _rank(experts, 1, "experts", op)
            extra += f" experts({experts.name} : {experts.type})"
            count = experts.shape[0]
        shape = (count, data.shape[1], data.shape[2] * 2)
    elif data.dtype in _dtypes.FP8:
        _rank(data, 2, "data", op)
        if codebook is not None or experts is not None:
            raise ValueError(f"{op}: 'codebook' and 'experts' are for NF4 "
                             f"(ui8) data only")
        shape = data.shape
    else:
        raise ValueError(f"{op}: 'data' must be FP8 or ui8 (NF4), got "
                         f"{data.dtype}")
    b = current_builder()
    out = b.fresh(shape, dtype)
    b.emit(f"{out.name} = moe.dequantize {data.name}, {scales.name}{extra} "
           f"group_size = {group}{_attr_dict(attrs)} : {data.type}, "
           f"{scales.type} -> {out.type}")
    return out
