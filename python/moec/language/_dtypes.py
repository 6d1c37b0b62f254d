"""Element types: moec's names (MLIR spelling) and their torch / numpy twins."""

from __future__ import annotations

# moec name -> (aliases accepted from users, torch attribute, numpy name)
_TYPES = {
    "f32": (("float32", "float", "f32"), "float32", "float32"),
    "f16": (("float16", "half", "f16"), "float16", "float16"),
    "bf16": (("bfloat16", "bf16"), "bfloat16", "bfloat16"),
    "f8E4M3FN": (("float8_e4m3fn", "f8e4m3fn", "f8E4M3FN"), "float8_e4m3fn",
                 "float8_e4m3fn"),
    "f8E5M2": (("float8_e5m2", "f8e5m2", "f8E5M2"), "float8_e5m2",
               "float8_e5m2"),
    "i32": (("int32", "i32"), "int32", "int32"),
    "i64": (("int64", "long", "i64"), "int64", "int64"),
    "ui8": (("uint8", "ui8", "u8"), "uint8", "uint8"),
}
_ALIASES = {alias: name for name, (aliases, _, _) in _TYPES.items()
            for alias in aliases}

NAMES = tuple(_TYPES)
FLOATS = ("f32", "f16", "bf16")
FP8 = ("f8E4M3FN", "f8E5M2")


def canonical(dtype, arg: str = "dtype") -> str:
    """The moec name of `dtype`: a moec name, an alias, a torch or numpy dtype."""
    if isinstance(dtype, str):
        key = dtype
    else:
        # torch.bfloat16 prints "torch.bfloat16"; numpy dtypes have .name.
        key = getattr(dtype, "name", None) or str(dtype)
        if not isinstance(key, str):
            key = str(dtype)
        key = key.replace("torch.", "")
    name = _ALIASES.get(key)
    if name is None:
        raise ValueError(
            f"'{arg}': unsupported element type {dtype!r} (expected one of "
            f"{', '.join(NAMES)})")
    return name


def itemsize(name: str) -> int:
    return {"f32": 4, "f16": 2, "bf16": 2, "f8E4M3FN": 1, "f8E5M2": 1,
            "i32": 4, "i64": 8, "ui8": 1}[name]


def to_torch(name: str):
    import torch
    return getattr(torch, _TYPES[name][1])


def to_numpy(name: str):
    """A numpy dtype; bf16 and FP8 come from ml_dtypes."""
    import numpy as np
    numpy_name = _TYPES[name][2]
    if name in ("bf16",) + FP8:
        try:
            import ml_dtypes
        except ImportError as error:
            raise ImportError(
                f"numpy arrays of {name} need the ml_dtypes package "
                f"(pip install ml_dtypes)") from error
        return np.dtype(getattr(ml_dtypes, numpy_name))
    return np.dtype(numpy_name)
