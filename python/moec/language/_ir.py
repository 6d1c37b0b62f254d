"""Tracing Python functions into moe-dialect modules.

A traced function's tensors are `Value`s: a name in the module being built,
a shape and an element type. Shapes are static except the number of tokens,
the symbol `T`, which appears as a linear expression `a*T + b` (`Sym`) in
derived sizes (T*k rows after routing, T*k + E*(align-1) with padding) and
as `?` in the IR. The ops in `moec.ops` check their arguments here, naming
the one that is wrong, and append one op each; the compiler's verifier
re-checks everything when the module is compiled.
"""

from __future__ import annotations

import inspect
import re
import threading
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from . import _dtypes


@dataclass(frozen=True)
class Sym:
    """A size `coef*T + const` that depends on the token count T (or on
    another row count an argument declares, `name`)."""

    coef: int = 1
    const: int = 0
    name: str = "T"

    def __mul__(self, other: int) -> "Sym":
        return Sym(self.coef * other, self.const * other, self.name)

    __rmul__ = __mul__

    def __add__(self, other: int) -> "Sym":
        return Sym(self.coef, self.const + other, self.name)

    def __str__(self) -> str:
        text = self.name if self.coef == 1 else f"{self.coef}*{self.name}"
        if self.const:
            text += f"+{self.const}" if self.const > 0 else f"{self.const}"
        return text

    __repr__ = __str__


T = Sym()
Dim = Union[int, Sym]


def _dim_text(dim: Dim) -> str:
    return "?" if isinstance(dim, Sym) else str(dim)


def tensor_type(shape: Sequence[Dim], dtype: str) -> str:
    """`tensor<?x2048xbf16>`."""
    return "tensor<" + "".join(_dim_text(d) + "x" for d in shape) + dtype + ">"


def shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


class TensorSpec:
    """The declared type of a kernel argument: `moec.Tensor["T", 2048, "bf16"]`.

    Dimensions are positive ints, or a row count as the first dimension:
    "T" (the token count), or another name (e.g. "M" for rows that are not
    one per token; arguments naming the same symbol have the same size,
    given to the compiler as `moe.sym`). The last item is the element type
    (a moec name such as "bf16", or a torch / numpy dtype).
    """

    def __init__(self, shape: Sequence[Union[int, str]], dtype):
        self.dtype = _dtypes.canonical(dtype, "dtype")
        dims: list[Dim] = []
        for i, d in enumerate(shape):
            if isinstance(d, str):
                if not d.isidentifier():
                    raise ValueError(
                        f"dimension {i}: a symbolic size must be a name such "
                        f"as 'T' (the token count), got {d!r}")
                if i != 0:
                    raise ValueError(
                        f"dimension {i}: a symbolic size ({d!r}) may only be "
                        f"the first dimension")
                dims.append(Sym(name=d))
            elif isinstance(d, int) and not isinstance(d, bool) and d > 0:
                dims.append(d)
            else:
                raise ValueError(
                    f"dimension {i}: expected a positive int or 'T', got {d!r}")
        if not dims:
            raise ValueError("tensors need at least one dimension")
        self.shape = tuple(dims)

    def __repr__(self) -> str:
        return f"Tensor[{', '.join(map(str, self.shape))}, {self.dtype}]"


class Tensor:
    """Annotation for kernel arguments: `x: moec.Tensor["T", 2048, "bf16"]`."""

    def __class_getitem__(cls, items) -> TensorSpec:
        if not isinstance(items, tuple) or len(items) < 2:
            raise TypeError(
                'write moec.Tensor[dim, ..., dtype], e.g. '
                'moec.Tensor["T", 2048, "bf16"]')
        return TensorSpec(items[:-1], items[-1])


class Value:
    """A tensor inside a traced function."""

    def __init__(self, builder: "Builder", name: str, shape: Sequence[Dim],
                 dtype: str):
        self.builder = builder
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        # For the slots of moe.sort_by_expert: the token count T of the
        # sorted ids (with align the slot count is not T * k).
        self.tokens: Optional[Dim] = None

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<moec value {self.name}: {shape_text(self.shape)} {self.dtype}>"


class Builder:
    """Collects the ops of one function as MLIR text."""

    def __init__(self, name: str):
        self.name = name
        self.args: list[Value] = []
        self.lines: list[str] = []
        self._count = 0

    def fresh(self, shape: Sequence[Dim], dtype: str) -> Value:
        value = Value(self, f"%v{self._count}", shape, dtype)
        self._count += 1
        return value

    def add_arg(self, name: str, spec: TensorSpec) -> Value:
        value = Value(self, f"%{name}", spec.shape, spec.dtype)
        self.args.append(value)
        return value

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def finish(self, results: Sequence[Value]) -> str:
        # moe.name carries the parameter name into the bundle (error messages
        # of launches from a loaded bundle quote it).
        # moe.sym names a row count other than T (the bundle's symbol).
        def attrs(a: Value) -> str:
            text = f'moe.name = "{a.name[1:]}"'
            if isinstance(a.shape[0], Sym) and a.shape[0].name != "T":
                text += f', moe.sym = "{a.shape[0].name}"'
            return text

        params = ", ".join(f"{a.name}: {a.type} {{{attrs(a)}}}"
                           for a in self.args)
        types = ", ".join(r.type for r in results)
        ret = f"({types})" if len(results) != 1 else types
        body = "\n".join(self.lines)
        names = ", ".join(r.name for r in results)
        return (f"func.func @{self.name}({params}) -> {ret} {{\n{body}\n"
                f"  return {names} : {types}\n}}\n")


_state = threading.local()


def current_builder() -> Builder:
    builder = getattr(_state, "builder", None)
    if builder is None:
        raise RuntimeError(
            "moec.ops functions build IR: call them inside a function "
            "decorated with @moec.kernel (while it is traced)")
    return builder


class tracing:
    """Context manager making `builder` the target of moec.ops calls."""

    def __init__(self, builder: Builder):
        self.builder = builder

    def __enter__(self):
        if getattr(_state, "builder", None) is not None:
            raise RuntimeError("a moec kernel is already being traced")
        _state.builder = self.builder
        return self.builder

    def __exit__(self, *exc):
        _state.builder = None
        return False


def check_value(value, arg: str, op: str) -> Value:
    """`value` as a Value of the function being traced (else TypeError)."""
    builder = current_builder()
    if not isinstance(value, Value):
        raise TypeError(
            f"{op}: argument '{arg}' must be a tensor of the traced kernel, "
            f"got {type(value).__name__}")
    if value.builder is not builder:
        raise ValueError(
            f"{op}: argument '{arg}' belongs to another kernel's trace")
    return value


def kernel_name(fn: Callable, name: Optional[str] = None) -> str:
    """The function name a traced `fn` gets: `name`, else fn's ("kernel"
    for a lambda)."""
    name = name or (fn.__name__ if fn.__name__.isidentifier() else "kernel")
    if not name.isidentifier():
        raise ValueError(f"kernel name {name!r} is not an identifier")
    return name


def signature_specs(fn: Callable, name: str,
                    signature: Optional[dict] = None) -> dict:
    """{parameter: TensorSpec} of `fn`: from `signature`, else from its
    `moec.Tensor[...]` annotations (a TypeError names a parameter without)."""
    params = inspect.signature(fn).parameters
    annotations = dict(signature or {})
    if not annotations:
        annotations = inspect.get_annotations(fn, eval_str=True)
    specs: dict = {}
    for pname, param in params.items():
        if param.kind not in (param.POSITIONAL_ONLY,
                              param.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"kernel {name}: parameter '{pname}' "
                            f"must be positional")
        if re.fullmatch(r"(arg|result|tmp)[0-9]+", pname):
            raise ValueError(f"kernel {name}: parameter name "
                             f"'{pname}' is reserved for bundle buffers")
        spec = annotations.get(pname)
        if not isinstance(spec, TensorSpec):
            raise TypeError(
                f"kernel {name}: parameter '{pname}' needs a type, "
                f'e.g. {pname}: moec.Tensor["T", 2048, "bf16"]')
        specs[pname] = spec
    return specs


def trace(fn: Callable, name: str, specs: dict) -> str:
    """`fn` called on one Value per spec, as the moe-dialect function
    `name` (MLIR text)."""
    builder = Builder(name)
    args = [builder.add_arg(n, s) for n, s in specs.items()]
    with tracing(builder):
        results = fn(*args)
    if isinstance(results, Value):
        results = (results,)
    if (not isinstance(results, (tuple, list)) or not results or
            not all(isinstance(r, Value) for r in results)):
        raise TypeError(f"kernel {name} must return a moec "
                        f"tensor or a tuple of them, got {results!r}")
    return builder.finish(results)
