"""moec: Mixture-of-Experts kernels from Python.

Write a kernel with moec.ops inside @moec.kernel, compile it (JIT with an
on-disk cache, or ahead of time to a .moecb bundle), and run it on torch
tensors (CUDA), any DLPack / __cuda_array_interface__ array, or numpy arrays
(host backend):

    import moec
    from moec import ops

    @moec.kernel
    def route(logits: moec.Tensor["T", 128, "f32"]):
        weights, ids = ops.router_topk(logits, k=8, renormalize=True)
        return weights, ids

    bundle = moec.compile(route, target="sm_90a")   # or "host"
    weights, ids = bundle(logits_tensor)

See docs/python.md.
"""

from . import ops
from ._bundle import Bundle, BufferInfo, Entry, MoecError
from ._compile import (TARGETS, Kernel, cache_dir, compile, compiler_fingerprint,
                       ir, kernel, load)
from ._grad import Gradient
from ._ir import T, Tensor, TensorSpec
from ._native import has_compiler, has_cuda

from ._version import __version__

__all__ = [
    "Bundle", "BufferInfo", "Entry", "Gradient", "Kernel", "MoecError", "T",
    "TARGETS",
    "Tensor", "TensorSpec", "cache_dir", "compile", "compiler_fingerprint",
    "has_compiler", "has_cuda", "ir", "kernel", "load", "ops",
]


def __getattr__(name):
    # CompileError lives in the compiler module (a ValueError subclass);
    # resolve it lazily so that runtime-only machines can import moec.
    if name == "CompileError":
        from ._native import compiler
        return compiler().CompileError
    raise AttributeError(f"module 'moec' has no attribute {name!r}")
