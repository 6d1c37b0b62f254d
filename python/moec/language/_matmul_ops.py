"""moe.grouped_matmul, moe.grouped_weight_grad and moe.lora_grad for
`moec.ops` (which re-exports them): the ops with the most operand
combinations of the dialect, kept out of ops.py so that each file stays
readable. Semantics as in docs/dialects/moe.md.
"""

from __future__ import annotations

import warnings
from typing import Optional

from . import _dtypes
from ._checks import (_attr_dict, _choice, _dtype_in, _float, _positions_text,
                      _positive, _rank, _same_dim, _token_rows)
from ._ir import Dim, Value, check_value, current_builder


def grouped_matmul(lhs, rhs, offsets, *, transpose_rhs: bool = False,
                   gather=None, k: Optional[int] = None, bias=None,
                   lora=None, lora_scaling: float = 1.0,
                   activation: Optional[str] = None, row_scale=None,
                   scatter=None, scatter_weights=None,
                   scatter_positions=None, scales=None,
                   scale_group: int = 128, mode: str = "forward",
                   transpose_lora: bool = False, activation_input=None,
                   experts_in_columns: bool = False, accumulate=None,
                   out_dtype=None) -> Value:
    """Each expert group of rows times that expert's weights.

    lhs [M, K] grouped rows, or token rows [T, K] with `gather=slots` and `k`;
    rhs [E, K, N], or [E, N, K] with `transpose_rhs`, or [K, E, N] with
    `experts_in_columns` (the experts' [K, N] matrices side by side: a LoRA
    B adapter [N, E*r] reshaped to [N, E, r], read in place). Options:
    `bias` [E, N]; `lora=(A, B)` (A [E*r, K], B [N, E*r]; with
    `transpose_lora` the input gradient's term (x · B_e) · A_e, A [E*r, N]
    and B [K, E*r]); `activation="swiglu"` (output N/2 wide);
    `activation="swiglu_grad"` with `activation_input=h` [M, 2N], the saved
    SwiGLU input: the result is the output gradient of that SwiGLU, the
    gradient of h [M, 2N]; `row_scale` [M]; `scatter=slots` (+ `k`,
    optional `scatter_weights` [T, k] and `scatter_positions`, the sort's
    row of each slot) to combine into token order; `scales=(sx, sw)` for
    FP8 operands.

    The weight gradient is `grouped_weight_grad`; `mode="weight_grad"` (with
    `accumulate`) still calls it, with a DeprecationWarning, for one release.
    """
    op = "grouped_matmul"
    if mode == "weight_grad":
        return _deprecated_weight_grad(
            lhs, rhs, offsets, transpose_rhs=transpose_rhs, gather=gather,
            k=k, experts_in_columns=experts_in_columns,
            accumulate=accumulate, out_dtype=out_dtype,
            forward_only={"bias": bias, "lora": lora,
                          "transpose_lora": transpose_lora,
                          "activation": activation,
                          "activation_input": activation_input,
                          "row_scale": row_scale, "scatter": scatter,
                          "scatter_weights": scatter_weights,
                          "scatter_positions": scatter_positions,
                          "scales": scales,
                          "lora_scaling": (None if lora_scaling == 1.0
                                           else lora_scaling),
                          "scale_group": (None if scale_group == 128
                                          else scale_group)})
    _choice(mode, "mode", op, ("forward", "weight_grad"))
    if accumulate is not None:
        raise ValueError(f"{op}: 'accumulate' belongs to the weight "
                         f"gradient: use grouped_weight_grad(..., "
                         f"accumulate=g)")
    lhs, rhs, offsets = _grouped_operands(lhs, rhs, offsets, op)
    fp8 = lhs.dtype in _dtypes.FP8
    out_dtype = _dtypes.canonical(
        out_dtype or ("bf16" if fp8 else lhs.dtype), "out_dtype")
    attrs: dict = {}
    extra, rows = _gather_text(lhs, gather, scatter, k, attrs, op)
    n_dim = _weights_layout(lhs, rhs, offsets.shape[0], transpose_rhs,
                            experts_in_columns, scales, attrs, op)
    if bias is not None:
        bias = check_value(bias, "bias", op)
        extra += f" bias({bias.name} : {bias.type})"
    extra += _lora_text(lora, lora_scaling, transpose_lora, attrs, op)
    out_cols, activation_input = _activation(
        activation, activation_input, n_dim, scatter, attrs, op)
    if row_scale is not None:
        row_scale = check_value(row_scale, "row_scale", op)
        extra += f" row_scale({row_scale.name} : {row_scale.type})"
    scatter_text, rows = _scatter_text(scatter, scatter_weights,
                                       scatter_positions, gather, lhs, k,
                                       rows, op)
    extra += scatter_text
    extra += _scales_text(scales, fp8, scale_group, attrs, op)
    if activation_input is not None:
        extra += (f" activation_input({activation_input.name} : "
                  f"{activation_input.type})")
    out = current_builder().fresh((rows, out_cols), out_dtype)
    current_builder().emit(
        f"{out.name} = moe.grouped_matmul {lhs.name}, {rhs.name}, "
        f"{offsets.name}{extra}{_attr_dict(attrs)} : {lhs.type}, "
        f"{rhs.type}, {offsets.type} -> {out.type}")
    return out


def grouped_weight_grad(lhs, grad_out, offsets, *, gather=None,
                        k: Optional[int] = None, transpose_rhs: bool = False,
                        experts_in_columns: bool = False, accumulate=None,
                        out_dtype=None) -> Value:
    """The weight gradient of a grouped matmul: for each expert e, the sum
    over its rows i of lhs_iᵀ · grad_out_i.

    lhs [M, K] grouped rows, or token rows [T, K] with `gather=slots` and
    `k` (the forward's gathered input, read by slot); grad_out [M, N] the
    output gradient in the same grouped row order. The result is
    [E, K, N]; with `transpose_rhs` [E, N, K] (the gradient of
    `transpose_rhs` weights in their layout); with `experts_in_columns`
    [K, E, N] (a LoRA B adapter's gradient, [K, E*N] once reshaped).
    `accumulate=g` (the result's shape and type, which default to g's)
    returns g + the gradient, added in f32 in the kernel's epilogue
    (gradient accumulation into a main gradient). `out_dtype` defaults to
    f32.
    """
    op = "grouped_weight_grad"
    lhs, grad_out, offsets = _grouped_operands(lhs, grad_out, offsets, op,
                                               rhs_name="grad_out")
    _rank(grad_out, 2, "grad_out", op)
    attrs: dict = {}
    extra, _ = _gather_text(lhs, gather, None, k, attrs, op)
    experts, red, cols = offsets.shape[0], lhs.shape[1], grad_out.shape[1]
    out_shape: tuple = (experts, red, cols)
    if experts_in_columns and transpose_rhs:
        raise ValueError(f"{op}: 'experts_in_columns' is not taken with "
                         f"'transpose_rhs' (the result is [K, E, N] or "
                         f"[E, N, K])")
    if experts_in_columns:
        attrs["experts_in_columns"] = True
        out_shape = (red, experts, cols)
    if transpose_rhs:
        attrs["transpose_rhs"] = True
        out_shape = (experts, cols, red)
    default_out = "f32"
    if accumulate is not None:
        accumulate = check_value(accumulate, "accumulate", op)
        _rank(accumulate, 3, "accumulate", op)
        for d in range(3):
            _same_dim(accumulate.shape[d], out_shape[d],
                      f"'accumulate' dimension {d} and the result's", op)
        out_shape = tuple(accumulate.shape)
        default_out = accumulate.dtype
        extra += f" accumulate({accumulate.name} : {accumulate.type})"
    out_dtype = _dtypes.canonical(out_dtype or default_out, "out_dtype")
    if accumulate is not None and accumulate.dtype != out_dtype:
        raise ValueError(f"{op}: 'accumulate' is {accumulate.dtype}, the "
                         f"result {out_dtype}: they must match")
    out = current_builder().fresh(out_shape, out_dtype)
    current_builder().emit(
        f"{out.name} = moe.grouped_weight_grad {lhs.name}, {grad_out.name}, "
        f"{offsets.name}{extra}{_attr_dict(attrs)} : {lhs.type}, "
        f"{grad_out.type}, {offsets.type} -> {out.type}")
    return out


def _deprecated_weight_grad(lhs, rhs, offsets, *, forward_only: dict,
                            **options) -> Value:
    """grouped_matmul(mode="weight_grad"): grouped_weight_grad with rhs as
    the output gradient, after a DeprecationWarning; the forward's options
    are errors, as they were in that mode."""
    warnings.warn("grouped_matmul(mode='weight_grad') is deprecated and "
                  "will be removed in the next release: use "
                  "moec.ops.grouped_weight_grad(lhs, grad_out, offsets, ...)",
                  DeprecationWarning, stacklevel=3)
    for arg, value in forward_only.items():
        if value is not None and value is not False:
            raise ValueError(f"grouped_matmul: '{arg}' is not taken with "
                             f"mode='weight_grad'")
    return grouped_weight_grad(lhs, rhs, offsets, **options)


def _grouped_operands(lhs, rhs, offsets, op: str, rhs_name: str = "rhs"):
    """lhs (2-D), rhs and offsets (1-D i32) checked, lhs and rhs of one
    element type."""
    lhs = check_value(lhs, "lhs", op)
    rhs = check_value(rhs, rhs_name, op)
    offsets = check_value(offsets, "offsets", op)
    _rank(lhs, 2, "lhs", op)
    _rank(offsets, 1, "offsets", op)
    _dtype_in(offsets, ("i32",), "offsets", op)
    if lhs.dtype != rhs.dtype:
        raise ValueError(f"{op}: 'lhs' and '{rhs_name}' must share an "
                         f"element type, got {lhs.dtype} and {rhs.dtype}")
    return lhs, rhs, offsets


def _gather_text(lhs, gather, scatter, k, attrs: dict, op: str):
    """The `gather(...)` text (and attribute k, which gather and scatter
    need) and the number of rows the op reads."""
    if gather is not None or scatter is not None:
        if k is None:
            raise ValueError(f"{op}: 'gather' and 'scatter' need 'k'")
        attrs["k"] = f"{_positive(k, 'k', op)} : i64"
    elif k is not None:
        raise ValueError(f"{op}: 'k' is only taken with 'gather' or "
                         f"'scatter'")
    if gather is None:
        return "", lhs.shape[0]
    gather = check_value(gather, "gather", op)
    _rank(gather, 1, "gather", op)
    return f" gather({gather.name} : {gather.type})", gather.shape[0]


def _weights_layout(lhs, rhs, experts, transpose_rhs: bool,
                    experts_in_columns: bool, scales, attrs: dict,
                    op: str) -> Dim:
    """Checks the weights' layout against lhs and the experts; returns N."""
    _rank(rhs, 3, "rhs", op)
    if experts_in_columns and (transpose_rhs or scales is not None):
        raise ValueError(f"{op}: 'experts_in_columns' is not taken with "
                         f"'transpose_rhs' or 'scales'")
    _same_dim(rhs.shape[1 if experts_in_columns else 0], experts,
              "'rhs' experts and 'offsets' size", op)
    k_dim, n_dim = ((rhs.shape[2], rhs.shape[1]) if transpose_rhs
                    else (rhs.shape[0], rhs.shape[2])
                    if experts_in_columns
                    else (rhs.shape[1], rhs.shape[2]))
    if experts_in_columns:
        attrs["experts_in_columns"] = True
    _same_dim(lhs.shape[1], k_dim,
              "'lhs' columns and the reduction size of 'rhs'", op)
    if transpose_rhs:
        attrs["transpose_rhs"] = True
    return n_dim


def _lora_text(lora, lora_scaling: float, transpose_lora: bool, attrs: dict,
               op: str) -> str:
    """The `lora(...)` text and its attributes."""
    if lora is None:
        if transpose_lora:
            raise ValueError(f"{op}: 'transpose_lora' needs 'lora'")
        return ""
    a, bb = _lora_pair(lora, op)
    if lora_scaling != 1.0:
        attrs["lora_scaling"] = f"{_float(lora_scaling)} : f32"
    if transpose_lora:
        attrs["transpose_lora"] = True
    return f" lora({a.name}, {bb.name} : {a.type}, {bb.type})"


def _activation(activation, activation_input, n_dim, scatter, attrs: dict,
                op: str):
    """The epilogue's activation: the output's columns (N, N/2 for swiglu,
    2N for swiglu_grad) and the checked saved input."""
    if activation is not None:
        _choice(activation, "activation", op, ("swiglu", "swiglu_grad"))
        attrs["activation"] = f"#moe.activation<{activation}>"
    if (activation == "swiglu_grad") != (activation_input is not None):
        raise ValueError(f"{op}: 'activation_input' is given exactly "
                         f"with activation='swiglu_grad'")
    if activation == "swiglu":
        if isinstance(n_dim, int) and n_dim % 2:
            raise ValueError(f"{op}: activation='swiglu' needs an even "
                             f"output width, got {n_dim}")
        return n_dim // 2, None
    if activation != "swiglu_grad":
        return n_dim, None
    activation_input = check_value(activation_input, "activation_input", op)
    _rank(activation_input, 2, "activation_input", op)
    if scatter is not None:
        raise ValueError(f"{op}: activation='swiglu_grad' writes "
                         f"grouped rows: 'scatter' is not taken")
    if not isinstance(n_dim, int):
        return activation_input.shape[1], activation_input
    _same_dim(activation_input.shape[1], 2 * n_dim,
              "'activation_input' columns and 2 * N", op)
    return 2 * n_dim, activation_input


def _scatter_text(scatter, scatter_weights, scatter_positions, gather, lhs,
                  k, rows, op: str):
    """The `scatter(...)` text and the output's rows: tokens when
    scattered, else the grouped rows."""
    if scatter is None:
        if scatter_weights is not None or scatter_positions is not None:
            arg = ("scatter_weights" if scatter_weights is not None
                   else "scatter_positions")
            raise ValueError(f"{op}: '{arg}' needs 'scatter'")
        return "", rows
    scatter = check_value(scatter, "scatter", op)
    text = f" scatter({scatter.name} : {scatter.type})"
    weights = None
    if scatter_weights is not None:
        weights = check_value(scatter_weights, "scatter_weights", op)
        text += f" scatter_weights({weights.name} : {weights.type})"
    if scatter_positions is not None:
        text += _positions_text(scatter_positions, op, "scatter_positions")
    rows = lhs.shape[0] if gather is not None else _token_rows(scatter, k,
                                                               weights)
    return text, rows


def _scales_text(scales, fp8: bool, scale_group: int, attrs: dict,
                 op: str) -> str:
    """The `scales(...)` text FP8 operands need (rejected otherwise)."""
    if fp8 != (scales is not None):
        raise ValueError(f"{op}: 'scales' are required for FP8 operands and "
                         f"rejected otherwise")
    if scales is None:
        return ""
    if not isinstance(scales, (tuple, list)) or len(scales) != 2:
        raise ValueError(f"{op}: 'scales' must be a pair (sx, sw)")
    sx = check_value(scales[0], "scales[0]", op)
    sw = check_value(scales[1], "scales[1]", op)
    if scale_group != 128:
        attrs["scale_group"] = (
            f"{_positive(scale_group, 'scale_group', op)} : i64")
    return f" scales({sx.name}, {sw.name} : {sx.type}, {sw.type})"


def lora_grad(lhs, grad_out, offsets, lora, *, gather=None,
              k: Optional[int] = None, lora_scaling: float = 1.0,
              out_dtype=None) -> tuple:
    """The gradients (dA, dB) of a grouped matmul's adapter term
    lora_scaling · (x · A_eᵀ) · B_eᵀ: `lhs` as the forward read it ([M, K]
    grouped rows, or tokens with `gather=slots` and `k`), `grad_out` [M, N]
    the output gradient in grouped row order, `lora=(A, B)` the forward's
    adapters. Results have the adapters' shapes, in `out_dtype` (default:
    the adapters' type).
    """
    op = "lora_grad"
    lhs = check_value(lhs, "lhs", op)
    grad_out = check_value(grad_out, "grad_out", op)
    offsets = check_value(offsets, "offsets", op)
    _rank(lhs, 2, "lhs", op)
    _rank(grad_out, 2, "grad_out", op)
    _rank(offsets, 1, "offsets", op)
    _dtype_in(offsets, ("i32",), "offsets", op)
    a, bb = _lora_pair(lora, op)
    if lhs.dtype != grad_out.dtype:
        raise ValueError(f"{op}: 'lhs' and 'grad_out' must share an element "
                         f"type, got {lhs.dtype} and {grad_out.dtype}")
    experts = offsets.shape[0]
    if isinstance(a.shape[0], int) and isinstance(experts, int) and (
            a.shape[0] == 0 or a.shape[0] % experts):
        raise ValueError(f"{op}: dimension 0 of 'lora[0]' must be a positive "
                         f"multiple of the experts ({experts}), got "
                         f"{a.shape[0]}")
    _same_dim(a.shape[1], lhs.shape[1], "'lora[0]' columns and 'lhs' "
              "columns (K)", op)
    _same_dim(bb.shape[0], grad_out.shape[1], "'lora[1]' rows and "
              "'grad_out' columns (N)", op)
    _same_dim(bb.shape[1], a.shape[0], "'lora[1]' columns and 'lora[0]' "
              "rows (E * r)", op)
    attrs: dict = {}
    extra = f" lora({a.name}, {bb.name} : {a.type}, {bb.type})"
    if (gather is None) != (k is None):
        raise ValueError(f"{op}: 'gather' and 'k' go together")
    if gather is not None:
        gather = check_value(gather, "gather", op)
        _rank(gather, 1, "gather", op)
        _dtype_in(gather, ("i32",), "gather", op)
        extra += f" gather({gather.name} : {gather.type})"
        attrs["k"] = f"{_positive(k, 'k', op)} : i64"
    if lora_scaling != 1.0:
        attrs["lora_scaling"] = f"{_float(lora_scaling)} : f32"
    b = current_builder()
    da = b.fresh(a.shape, _dtypes.canonical(out_dtype or a.dtype,
                                            "out_dtype"))
    db = b.fresh(bb.shape, _dtypes.canonical(out_dtype or bb.dtype,
                                             "out_dtype"))
    b.emit(f"{da.name}, {db.name} = moe.lora_grad {lhs.name}, "
           f"{grad_out.name}, {offsets.name}{extra}{_attr_dict(attrs)} : "
           f"{lhs.type}, {grad_out.type}, {offsets.type} -> {da.type}, "
           f"{db.type}")
    return da, db


def _lora_pair(lora, op: str) -> tuple:
    """The adapters (A, B) of `lora`, each checked as a 2-D value."""
    if not isinstance(lora, (tuple, list)) or len(lora) != 2:
        raise ValueError(f"{op}: 'lora' must be a pair (A, B)")
    a = check_value(lora[0], "lora[0]", op)
    b = check_value(lora[1], "lora[1]", op)
    _rank(a, 2, "lora[0]", op)
    _rank(b, 2, "lora[1]", op)
    return a, b
