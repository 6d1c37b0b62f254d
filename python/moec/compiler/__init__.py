"""moec.compiler: kernels to bundles. `@kernel` traces a function of
moec.ops; `compile` (JIT, with an on-disk cache in `cache_dir()`) or `ir`
runs the pipeline on it; `Kernel.grad()` derives its backward (`Gradient`);
`target_for` names the target of a device; `cache` lists, measures and
clears the on-disk cache; `tune` is the autotuner's GPU half (`python3 -m
moec.compiler.tune`)."""

from . import cache
from ._compile import (TARGETS, cache_dir, compile, compiler_fingerprint, ir,
                       target_for)
from ._grad import (FP8_RECIPES, SAVE_POLICIES, Gradient, check_fp8,
                    fp8_recipe, grad_attr)
from ._kernel import Fp8Kernel, Kernel, kernel

__all__ = ["FP8_RECIPES", "SAVE_POLICIES", "TARGETS", "Fp8Kernel", "Gradient",
           "Kernel", "cache", "cache_dir", "check_fp8", "compile",
           "compiler_fingerprint", "fp8_recipe", "grad_attr", "ir", "kernel",
           "target_for"]
