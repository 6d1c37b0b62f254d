"""Argument checks and attribute printing shared by the op builders of
moec.ops (ops.py, _matmul_ops.py): each error names the op and the
argument."""

from __future__ import annotations

from typing import Optional, Sequence

from ._ir import Dim, Sym, Value, check_value


def _positive(value, arg: str, op: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{op}: '{arg}' must be a positive int, got {value!r}")
    return value


def _choice(value: str, arg: str, op: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{op}: '{arg}' must be one of {', '.join(choices)}; "
                         f"got {value!r}")
    return value


def _rank(value: Value, rank: int, arg: str, op: str) -> None:
    if value.rank != rank:
        raise ValueError(f"{op}: '{arg}' must have rank {rank}, got "
                         f"{value.rank} (shape {list(value.shape)})")


def _dtype_in(value: Value, allowed: Sequence[str], arg: str, op: str) -> None:
    if value.dtype not in allowed:
        raise ValueError(f"{op}: '{arg}' must be {' or '.join(allowed)}, got "
                         f"{value.dtype}")


def _same_dim(a: Dim, b: Dim, what: str, op: str) -> None:
    if a != b:
        raise ValueError(f"{op}: {what} differ ({a} vs {b})")


def _float(value: float) -> str:
    return repr(float(value))


def _attr_dict(attrs: dict) -> str:
    parts = []
    for key, value in attrs.items():
        parts.append(key if value is True else f"{key} = {value}")
    return " {" + ", ".join(parts) + "}" if parts else ""


def _positions_text(positions, op: str, arg: str = "positions") -> str:
    """The ` positions(...)` of a token-order op, or the `arg` clause of that
    name ('' without)."""
    if positions is None:
        return ""
    positions = check_value(positions, arg, op)
    _rank(positions, 1, arg, op)
    _dtype_in(positions, ("i32",), arg, op)
    return f" {arg}({positions.name} : {positions.type})"


def _token_rows(slots: Value, k: int, weights: Optional[Value]) -> Dim:
    """The token count T of a routing with `slots` rows and top-k `k`: that
    of the ids sort_by_expert sorted, else of `weights` [T, k], else of the
    slots (M = T * k, no alignment padding)."""
    if slots.tokens is not None:
        return slots.tokens
    if weights is not None:
        return weights.shape[0]
    if isinstance(slots.shape[0], Sym):
        return Sym()
    return slots.shape[0] // k
