"""moec.compiler: kernels to bundles. `@kernel` traces a function of
moec.ops; `compile` (JIT, with an on-disk cache in `cache_dir()`) or `ir`
runs the pipeline on it; `Kernel.grad()` derives its backward (`Gradient`);
`target_for` names the target of a device; `cache` lists, measures and
clears the on-disk cache; `tune` is the autotuner's GPU half (`python3 -m
moec.compiler.tune`)."""

from . import cache
from ._compile import (TARGETS, cache_dir, compile, compiler_fingerprint, ir,
                       target_for)
from ._grad import SAVE_POLICIES, Gradient, grad_attr
from ._kernel import Kernel, kernel

__all__ = ["SAVE_POLICIES", "TARGETS", "Gradient", "Kernel", "cache",
           "cache_dir", "compile", "compiler_fingerprint", "grad_attr", "ir",
           "kernel", "target_for"]
