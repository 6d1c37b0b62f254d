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

    bundle = moec.compile(route)   # for this machine's GPU, else "host"
    weights, ids = bundle(logits_tensor)

The package, by role (as Triton's): moec.language (Tensor, ops), moec.compiler
(kernel, compile, grad, cache: `moec.cache` is moec.compiler.cache),
moec.runtime (bundles, launching), moec.torch (MoE blocks, transformers /
peft helpers), moec.ep (expert parallelism), and moec.layers (MoEConfig and the MoE block's kernel). See docs/python.md.
"""

import sys as _sys

from ._version import __version__
from .compiler import (TARGETS, Gradient, Kernel, cache, cache_dir, compile,
                       compiler_fingerprint, ir, kernel, target_for)
from .language import T, Tensor, TensorSpec, ops
from .layers import MoEConfig
from .runtime import (BufferInfo, Bundle, Entry, MoecError, has_compiler,
                      has_cuda, load)

# `import moec.ops` and `from moec import ops`: the module moec.language.ops.
_sys.modules[__name__ + ".ops"] = ops
# `import moec.cache`: the module moec.compiler.cache (list, size, clear).
_sys.modules[__name__ + ".cache"] = cache

__all__ = [
    "Bundle", "BufferInfo", "Entry", "Gradient", "Kernel", "MoEConfig",
    "MoecError", "T",
    "TARGETS", "Tensor", "TensorSpec", "cache", "cache_dir", "compile",
    "compiler_fingerprint", "has_compiler", "has_cuda", "ir", "kernel",
    "load", "ops", "target_for",
]


def __getattr__(name):
    # CompileError lives in the compiler module (a ValueError subclass);
    # resolve it lazily so that runtime-only machines can import moec.
    if name == "CompileError":
        from .runtime._native import compiler
        return compiler().CompileError
    raise AttributeError(f"module 'moec' has no attribute {name!r}")
