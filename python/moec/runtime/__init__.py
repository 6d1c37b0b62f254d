"""moec.runtime: bundles and launching them, with no MLIR. `load` reads a
.moecb bundle; an `Entry` launches on torch tensors, any DLPack or
`__cuda_array_interface__` array, or numpy arrays (host entries)."""

from ._bundle import BufferInfo, Bundle, Entry, MoecError, load
from ._native import has_compiler, has_cuda

__all__ = ["BufferInfo", "Bundle", "Entry", "MoecError", "has_compiler",
           "has_cuda", "load"]
