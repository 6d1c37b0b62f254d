"""Arrays handed to kernels: what they are, and whether they fit.

`describe` turns a torch tensor, any DLPack producer, an object with
`__cuda_array_interface__`, or a numpy array into an `ArrayInfo` (address,
device, element type, shape, strides). `validate` checks one against what
an entry expects and raises ValueError naming the argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..language import _dtypes
from . import _native

#: Device buffers must start on this boundary: the kernels may read them
#: with 16-byte vector loads and, on Hopper, TMA (which requires it).
CUDA_ALIGNMENT = 16


@dataclass
class ArrayInfo:
    obj: object
    address: int
    device: str          # "cpu" or "cuda"
    device_index: int
    dtype: str           # moec name, or a description of an unsupported one
    shape: tuple
    strides: Optional[tuple]  # in elements; None = row-major contiguous
    is_torch: bool = False


def _is_torch(obj) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _dtype_name(dtype) -> str:
    try:
        return _dtypes.canonical(dtype)
    except ValueError:
        return str(dtype)


def describe(obj, arg: str) -> ArrayInfo:
    """What `obj` is, for argument `arg` (TypeError if it is no array)."""
    if _is_torch(obj):
        device = obj.device
        return ArrayInfo(obj, obj.data_ptr(), device.type,
                         device.index or 0, _dtype_name(obj.dtype),
                         tuple(obj.shape), tuple(obj.stride()), True)
    if hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        typestr = cai["typestr"]
        dtype = _dtype_name(_numpy_dtype(typestr)) if typestr else "?"
        itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 1
        strides = cai.get("strides")
        if strides is not None:
            strides = tuple(s // itemsize for s in strides)
        return ArrayInfo(obj, int(cai["data"][0]), "cuda", _cai_device(obj),
                         dtype, tuple(cai["shape"]), strides)
    if hasattr(obj, "__dlpack__") and not hasattr(obj, "__array_interface__"):
        info = _native.runtime().describe_dlpack(obj.__dlpack__())
        kind = {1: "cpu", 2: "cuda", 3: "cpu", 13: "cuda"}.get(
            info["device_type"], f"dlpack device {info['device_type']}")
        return ArrayInfo(obj, info["data"], kind, info["device_id"],
                         info["dtype"], info["shape"], info["strides"])
    if hasattr(obj, "__array_interface__"):
        import numpy as np
        array = np.asarray(obj)
        itemsize = array.dtype.itemsize
        return ArrayInfo(obj, array.__array_interface__["data"][0], "cpu", 0,
                         _dtype_name(array.dtype), tuple(array.shape),
                         tuple(s // itemsize for s in array.strides))
    raise TypeError(
        f"'{arg}': expected a torch tensor, a numpy array, or an object with "
        f"__dlpack__ or __cuda_array_interface__; got {type(obj).__name__}")


def _numpy_dtype(typestr: str):
    import numpy as np
    return np.dtype(typestr)


def _cai_device(obj) -> int:
    device = getattr(obj, "device", None)
    return int(getattr(device, "id", 0) or 0)


def is_positive_int(value) -> bool:
    """An int (not a bool) above zero: the check of count arguments."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def contiguous_strides(shape: Sequence[int]) -> tuple:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def validate(info: ArrayInfo, arg: str, dtype: str, shape: Sequence[int],
             device: str) -> None:
    """Raises ValueError naming `arg` unless `info` is a dense row-major array
    of `dtype` and `shape` on `device` ("cpu" or "cuda")."""
    if info.device != device:
        where = "a CUDA device" if device == "cuda" else "the host (CPU)"
        raise ValueError(f"'{arg}': expected an array on {where} for this "
                         f"entry, got one on {info.device}")
    if info.dtype != dtype:
        raise ValueError(f"'{arg}': expected element type {dtype}, got "
                         f"{info.dtype}")
    if tuple(info.shape) != tuple(shape):
        raise ValueError(f"'{arg}': expected shape {list(shape)}, got "
                         f"{list(info.shape)}")
    elements = 1
    for extent in shape:
        elements *= extent
    # An empty array is contiguous whatever its strides (numpy gives a
    # (0, 64) array strides (0, 0)): there is no element to misplace.
    if elements and info.strides is not None and any(
            s != c for s, c, e in zip(info.strides, contiguous_strides(shape),
                                      shape) if e > 1):
        raise ValueError(f"'{arg}': must be contiguous (row-major); got "
                         f"strides {list(info.strides)} for shape "
                         f"{list(shape)} (call .contiguous() first)")
    check_address(info, arg, shape, device)


def check_address(info: ArrayInfo, arg: str, shape: Sequence[int],
                  device: str) -> None:
    """The part of `validate` a layout does not decide: a non-empty array
    needs a data pointer, on CUDA aligned to CUDA_ALIGNMENT bytes."""
    if not info.address and all(shape):
        raise ValueError(f"'{arg}': null data pointer")
    if device == "cuda" and info.address % CUDA_ALIGNMENT and all(shape):
        raise ValueError(f"'{arg}': device address 0x{info.address:x} is not "
                         f"{CUDA_ALIGNMENT}-byte aligned (moec kernels use "
                         f"16-byte vector and TMA loads; copy the tensor)")
