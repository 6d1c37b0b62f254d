"""`@moec.kernel`: a Python function of moec.ops as a compilable kernel."""

from __future__ import annotations

import functools
import sys
from typing import Callable, Optional, Sequence, Union

from ..language._ir import kernel_name, signature_specs, trace
from ..runtime import Bundle
from ..runtime._args import describe
from ._compile import compile, ir, target_for
from ._grad import Gradient, check_fp8, check_fp8_weights, fp8_recipe


class Kernel:
    """A Python function of moec.ops, traced into one moe-dialect function.

    Every parameter needs a `moec.Tensor[...]` annotation (or pass
    `signature={"x": moec.Tensor[...], ...}` to `@moec.kernel`); the function
    returns one tensor or a tuple of them. Calling the kernel on arrays
    compiles it for their device (cached) and runs it.
    """

    def __init__(self, fn: Callable, name: Optional[str] = None,
                 signature: Optional[dict] = None):
        self.fn = fn
        self.name = kernel_name(fn, name)
        self.specs: dict = signature_specs(fn, self.name, signature)
        self._module: Optional[str] = None
        self._bundles: dict = {}
        functools.update_wrapper(self, fn)

    @property
    def arg_names(self) -> list:
        return list(self.specs)

    @property
    def entry_arg_names(self) -> dict:
        """{function: argument names} of the entries it compiles to."""
        return {self.name: self.arg_names}

    @property
    def module(self) -> str:
        """The traced function as moe-dialect MLIR text."""
        if self._module is None:
            self._module = trace(self.fn, self.name, self.specs)
        return self._module

    def ir(self, stage: str = "moe", tile: Optional[dict] = None) -> str:
        """The module at one pipeline stage: "moe" (as traced, verified),
        "optimized", "kernels", "nvvm", "rocdl" or "host"."""
        return ir(self.module, stage, tile)

    def print_ir(self, stages: Sequence[str] = ("moe", "optimized", "kernels"),
                 tile: Optional[dict] = None, file=None) -> None:
        """Prints the module at each of `stages`, with a header per stage."""
        for stage in stages:
            print(f"// ----- {self.name} at stage '{stage}' -----",
                  file=file or sys.stdout)
            print(self.ir(stage, tile), file=file or sys.stdout)

    def compile(self, target: Union[str, Sequence[str], None] = None,
                tile: Optional[dict] = None, **kwargs) -> Bundle:
        return compile(self, target, tile, **kwargs)

    def grad(self, wrt: Optional[Sequence[str]] = None, save: str = "all",
             accumulate: Sequence[str] = (),
             fp8: Optional[str] = None,
             fp8_weights: str = "inline") -> Gradient:
        """The backward of this kernel (moec.Gradient): see its docstring."""
        return Gradient(self, wrt, save, accumulate, fp8, fp8_weights)

    def fp8(self, recipe: str = "blockwise",
            weights: str = "inline") -> "Fp8Kernel":
        """This kernel with its expert matmuls in FP8 (the compiler pass
        moe-fp8-recipe, as Kernel.grad(fp8=recipe) runs it on the forward
        and the backward): compile it as the kernel. `weights="arguments"`:
        the entry takes its weights' FP8 copies after its own arguments,
        made by the entry `<name>_fp8_weights` (once per weight update)."""
        return Fp8Kernel(self, recipe, weights)

    def __call__(self, *args, **kwargs):
        device = "cpu"
        for value, name in zip(args, self.specs):
            device = describe(value, name).device
            break
        target = target_for(device)
        bundle = self._bundles.get(target)
        if bundle is None:
            bundle = self._bundles[target] = self.compile(target)
        return bundle.entry(self.name, target)(*args, **kwargs)

    def __repr__(self) -> str:
        params = ", ".join(f"{n}: {s}" for n, s in self.specs.items())
        return f"<moec kernel {self.name}({params})>"


class Fp8Kernel:
    """A Kernel after the FP8 recipe `recipe` (Kernel.fp8): the same
    function and arguments, its expert matmuls on e4m3 operands with block
    scales. Compiles (moec.compile, .compile) and prints (.ir) as a
    Kernel; its backward is Kernel.grad(fp8=recipe)."""

    def __init__(self, kernel: Kernel, recipe: str, weights: str = "inline"):
        check_fp8(recipe)
        check_fp8_weights(weights)
        self.kernel = kernel
        self.recipe = recipe
        self.weights = weights
        self._module: Optional[str] = None

    name = property(lambda self: self.kernel.name)
    arg_names = property(lambda self: self.kernel.arg_names)
    entry_arg_names = property(lambda self: self.kernel.entry_arg_names)

    @property
    def module(self) -> str:
        if self._module is None:
            self._module = fp8_recipe(self.kernel.module, self.recipe,
                                      self.name, self.weights)
        return self._module

    def ir(self, stage: str = "moe", tile: Optional[dict] = None) -> str:
        return ir(self.module, stage, tile)

    def compile(self, target: Union[str, Sequence[str], None] = None,
                tile: Optional[dict] = None, **kwargs) -> Bundle:
        return compile(self, target, tile, **kwargs)

    def __repr__(self) -> str:
        return f"<moec kernel {self.name} in FP8 ({self.recipe})>"


def kernel(fn: Optional[Callable] = None, *, name: Optional[str] = None,
           signature: Optional[dict] = None):
    """Decorator: `@moec.kernel` or `@moec.kernel(name=..., signature=...)`."""
    if fn is None:
        return lambda f: Kernel(f, name, signature)
    return Kernel(fn, name, signature)
