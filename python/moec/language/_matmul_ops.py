"""moe.grouped_matmul and moe.lora_grad for `moec.ops` (which re-exports
both): the ops with the most operand combinations of the dialect, kept out
of ops.py so that each file stays readable. Semantics as in
docs/dialects/moe.md.
"""

from __future__ import annotations

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
    rhs [E, K, N], or [E, N, K] with `transpose_rhs`. Options: `bias`
    [E, N]; `lora=(A, B)` (A [E*r, K], B [N, E*r]; with `transpose_lora`
    the input gradient's term (x · B_e) · A_e, A [E*r, N] and B [K, E*r]);
    `activation="swiglu"` (output N/2 wide); `activation="swiglu_grad"`
    with `activation_input=h` [M, 2N], the saved SwiGLU input: the result
    is the output gradient of that SwiGLU, the gradient of h [M, 2N];
    `row_scale` [M]; `scatter=slots` (+ `k`, optional `scatter_weights`
    [T, k] and `scatter_positions`, the sort's row of each slot) to combine
    into token order; `scales=(sx, sw)` for FP8 operands.
    `mode="weight_grad"`: rhs is the output gradient [M, N], result [E, K, N],
    or with `transpose_rhs` [E, N, K] (the gradient of [E, N, K] weights;
    lhs may be gathered either way); `accumulate=g` (the result's shape and
    type, which default to g's) returns g + the gradient, added in f32 in
    the kernel's epilogue (gradient accumulation into a main gradient).
    `experts_in_columns`: the weights (forward) or the result (weight_grad)
    are [K, E, N], the experts' [K, N] matrices side by side: a LoRA B
    adapter [N, E*r] reshaped to [N, E, r], read or written in place.
    """
    op = "grouped_matmul"
    lhs = check_value(lhs, "lhs", op)
    rhs = check_value(rhs, "rhs", op)
    offsets = check_value(offsets, "offsets", op)
    _rank(lhs, 2, "lhs", op)
    _rank(offsets, 1, "offsets", op)
    _dtype_in(offsets, ("i32",), "offsets", op)
    _choice(mode, "mode", op, ("forward", "weight_grad"))
    if lhs.dtype != rhs.dtype:
        raise ValueError(f"{op}: 'lhs' and 'rhs' must share an element type, "
                         f"got {lhs.dtype} and {rhs.dtype}")
    fp8 = lhs.dtype in _dtypes.FP8
    default_out = "bf16" if fp8 else lhs.dtype
    if mode == "weight_grad":
        default_out = "f32"
    if accumulate is not None:
        if mode != "weight_grad":
            raise ValueError(f"{op}: 'accumulate' is taken only with "
                             f"mode='weight_grad'")
        accumulate = check_value(accumulate, "accumulate", op)
        default_out = accumulate.dtype
    out_dtype = _dtypes.canonical(out_dtype or default_out, "out_dtype")
    if accumulate is not None and accumulate.dtype != out_dtype:
        raise ValueError(f"{op}: 'accumulate' is {accumulate.dtype}, the "
                         f"result {out_dtype}: they must match")
    experts = offsets.shape[0]
    attrs: dict = {}
    extra = ""
    b = current_builder()

    def operand(value, arg):
        return check_value(value, arg, op)

    if gather is not None or scatter is not None:
        if k is None:
            raise ValueError(f"{op}: 'gather' and 'scatter' need 'k'")
        attrs["k"] = f"{_positive(k, 'k', op)} : i64"
    if gather is not None:
        gather = operand(gather, "gather")
        _rank(gather, 1, "gather", op)
        extra += f" gather({gather.name} : {gather.type})"
        rows: Dim = gather.shape[0]
    else:
        rows = lhs.shape[0]

    if mode == "weight_grad":
        for arg, value in (("lora", lora), ("transpose_lora", transpose_lora),
                           ("bias", bias), ("activation", activation),
                           ("activation_input", activation_input)):
            if value:
                raise ValueError(f"{op}: '{arg}' is not taken with "
                                 f"mode='weight_grad'")
        _rank(rhs, 2, "rhs", op)
        attrs["mode"] = "#moe.mode<weight_grad>"
        out_shape: tuple = (experts, lhs.shape[1], rhs.shape[1])
        if experts_in_columns and transpose_rhs:
            raise ValueError(f"{op}: 'experts_in_columns' is not taken with "
                             f"'transpose_rhs'")
        if experts_in_columns:
            attrs["experts_in_columns"] = True
            out_shape = (lhs.shape[1], experts, rhs.shape[1])
        if transpose_rhs:
            attrs["transpose_rhs"] = True
            out_shape = (experts, rhs.shape[1], lhs.shape[1])
        if accumulate is not None:
            _rank(accumulate, 3, "accumulate", op)
            for d in range(3):
                _same_dim(accumulate.shape[d], out_shape[d],
                          f"'accumulate' dimension {d} and the result's", op)
            out_shape = tuple(accumulate.shape)
    else:
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
        if bias is not None:
            bias = operand(bias, "bias")
            extra += f" bias({bias.name} : {bias.type})"
        if lora is not None:
            a, bb = _lora_pair(lora, op)
            extra += f" lora({a.name}, {bb.name} : {a.type}, {bb.type})"
            if lora_scaling != 1.0:
                attrs["lora_scaling"] = f"{_float(lora_scaling)} : f32"
            if transpose_lora:
                attrs["transpose_lora"] = True
        elif transpose_lora:
            raise ValueError(f"{op}: 'transpose_lora' needs 'lora'")
        out_cols = n_dim
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
            out_cols = n_dim // 2
        elif activation == "swiglu_grad":
            activation_input = operand(activation_input, "activation_input")
            _rank(activation_input, 2, "activation_input", op)
            if isinstance(n_dim, int):
                out_cols = 2 * n_dim
                _same_dim(activation_input.shape[1], out_cols,
                          "'activation_input' columns and 2 * N", op)
            else:
                out_cols = activation_input.shape[1]
            if scatter is not None:
                raise ValueError(f"{op}: activation='swiglu_grad' writes "
                                 f"grouped rows: 'scatter' is not taken")
        if row_scale is not None:
            row_scale = operand(row_scale, "row_scale")
            extra += f" row_scale({row_scale.name} : {row_scale.type})"
        if scatter is not None:
            scatter = operand(scatter, "scatter")
            extra += f" scatter({scatter.name} : {scatter.type})"
            weights = None
            if scatter_weights is not None:
                weights = operand(scatter_weights, "scatter_weights")
                extra += (f" scatter_weights({weights.name} : "
                          f"{weights.type})")
            if scatter_positions is not None:
                extra += _positions_text(scatter_positions, op,
                                         "scatter_positions")
            if gather is not None:
                rows = lhs.shape[0]
            else:
                rows = _token_rows(scatter, k, weights)
        elif scatter_weights is not None or scatter_positions is not None:
            arg = ("scatter_weights" if scatter_weights is not None
                   else "scatter_positions")
            raise ValueError(f"{op}: '{arg}' needs 'scatter'")
        out_shape = (rows, out_cols)
    if fp8 != (scales is not None):
        raise ValueError(f"{op}: 'scales' are required for FP8 operands and "
                         f"rejected otherwise")
    if scales is not None:
        if not isinstance(scales, (tuple, list)) or len(scales) != 2:
            raise ValueError(f"{op}: 'scales' must be a pair (sx, sw)")
        sx, sw = operand(scales[0], "scales[0]"), operand(scales[1],
                                                          "scales[1]")
        extra += f" scales({sx.name}, {sw.name} : {sx.type}, {sw.type})"
        if scale_group != 128:
            attrs["scale_group"] = (
                f"{_positive(scale_group, 'scale_group', op)} : i64")
    if activation_input is not None and mode != "weight_grad":
        extra += (f" activation_input({activation_input.name} : "
                  f"{activation_input.type})")
    if accumulate is not None:
        extra += f" accumulate({accumulate.name} : {accumulate.type})"
    out = b.fresh(out_shape, out_dtype)
    b.emit(f"{out.name} = moe.grouped_matmul {lhs.name}, {rhs.name}, "
           f"{offsets.name}{extra}{_attr_dict(attrs)} : {lhs.type}, "
           f"{rhs.type}, {offsets.type} -> {out.type}")
    return out


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
