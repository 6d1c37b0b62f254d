"""`Kernel.grad()`: the backward of a kernel, derived by moe-autodiff."""

from __future__ import annotations

import re
import sys
from typing import Optional, Sequence, Union

from ..runtime import Bundle, _native
from ..runtime._args import describe
from ._compile import compile, ir, target_for
from ._log import logger

#: What the forward keeps for the backward (moe-autodiff's `save` option).
SAVE_POLICIES = ("all", "matmuls", "inputs")
#: FP8 recipes of moe-fp8-recipe (Kernel.grad's `fp8`).
FP8_RECIPES = ("blockwise",)
#: Where an FP8 entry's weight copies come from (moe-fp8-recipe's
#: `weights`): "inline", quantized by the entry on every call; "arguments",
#: passed in, made by the entry `<name>_fp8_weights`.
FP8_WEIGHTS = ("inline", "arguments")


def check_fp8(fp8: Optional[str]) -> None:
    """ValueError unless `fp8` is None or one of FP8_RECIPES."""
    if fp8 is not None and fp8 not in FP8_RECIPES:
        raise ValueError(f"'fp8': expected one of {', '.join(FP8_RECIPES)} "
                         f"(or None for the kernel's own precision), got "
                         f"{fp8!r}")


def check_fp8_weights(weights: str) -> None:
    """ValueError unless `weights` is one of FP8_WEIGHTS."""
    if weights not in FP8_WEIGHTS:
        raise ValueError(f"'fp8_weights': expected one of "
                         f"{', '.join(FP8_WEIGHTS)}, got {weights!r}")


def fp8_recipe(module: str, recipe: str, name: str,
               weights: str = "inline") -> str:
    """`module` (MLIR text) after the compiler pass moe-fp8-recipe with
    `recipe`: its expert matmuls in FP8; `weights` as FP8_WEIGHTS says. The
    matmuls it keeps in their precision are logged at INFO, under `name`."""
    check_fp8(recipe)
    check_fp8_weights(weights)
    module, remarks = _native.compiler().fp8_recipe(module, recipe, weights)
    for line in remarks.splitlines():
        if "remark:" in line:
            logger.info("%s: %s", name, line.split("remark:", 1)[1].strip())
    return module


def grad_attr(module: str, backward_name: str, attr: str) -> list:
    """An array attribute (moe.wrt, moe.saved_results) of the signature of
    the backward function `backward_name` in `module` (moe-autodiff's
    output)."""
    header = re.search(r"func\.func @" + re.escape(backward_name) + r"\(.*",
                       module)
    found = header and re.search(attr + r" = array<i64(?:: ([0-9, ]*))?>",
                                 header.group(0))
    if not found:
        raise ValueError(f"{backward_name} has no {attr} (not a function "
                         f"moe-autodiff made, or compiled by an older moec: "
                         f"compile its module again)")
    return [int(v) for v in found.group(1).split(",")] if found.group(1) \
        else []


def saved_results_of(grad_entry) -> list:
    """For each saved argument of the compiled backward `grad_entry` (a
    runtime Entry), the index of the forward result holding it (its
    moe.saved_results, from the bundle's source)."""
    return grad_attr(grad_entry.source, grad_entry.name, "moe.saved_results")


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def fp8_weights_entry(bundle: Bundle, name: str, target: str):
    """The entry `<name>_fp8_weights` that makes the FP8 weight copies the
    entry `name` takes (moe-fp8-recipe weights=arguments), or None where
    `name` quantizes its own weights (or runs none in FP8)."""
    wanted = name + "_fp8_weights"
    for entry in bundle.entries:
        if entry.name == wanted and entry.target == target:
            return entry
    return None


def step_fp8_weights_entry(bundle: Bundle, name: str, target: str):
    """The entry `<name>_fwd_grad_fp8_weights` (moe-fp8-recipe
    weights=arguments on a gradient pair whose forward and backward both
    take copies): the copies `<name>_fwd` takes, then those `<name>_grad`
    takes, in one call that reads each weight once for both its layouts.
    None where the bundle has no such entry."""
    return fp8_weights_entry(bundle, name + "_fwd_grad", target)


def quantize_step_weights(step, forward_quantizer, arg_names: Sequence[str],
                          args: Sequence) -> tuple:
    """Runs `step` (a `<name>_fwd_grad_fp8_weights` entry) on the weights
    among `args`: (the copies `<name>_fwd` takes, those `<name>_grad`
    takes), split after `forward_quantizer`'s results."""
    copies = quantize_weights(step, arg_names, args)
    count = len(forward_quantizer.outputs)
    return copies[:count], copies[count:]


def quantize_weights(quantizer, arg_names: Sequence[str],
                     args: Sequence) -> tuple:
    """Runs `quantizer` (a `<name>_fp8_weights` entry) on the weights
    among `args` (named `arg_names`) it takes: their FP8 copies and scales,
    in the order the entry `<name>` takes them after its own arguments."""
    index = {name: i for i, name in enumerate(arg_names)}
    missing = [b.name for b in quantizer.inputs if b.name not in index]
    if missing:
        raise ValueError(f"{quantizer.name} takes {', '.join(missing)}, "
                         f"which are not among the arguments "
                         f"({', '.join(arg_names)})")
    return _as_tuple(quantizer(*(args[index[b.name]]
                                 for b in quantizer.inputs)))


def fp8_weight_inputs(bundle: Bundle, name: str, target: str,
                      arg_names: Sequence[str], args: Sequence,
                      given: Optional[Sequence]) -> tuple:
    """What the entry `name` takes after its own inputs: with
    weights=arguments the FP8 weight copies `given` (checked), or made now
    from `args` when None; nothing for an entry that quantizes its own."""
    quantizer = fp8_weights_entry(bundle, name, target)
    if quantizer is None:
        if given is not None:
            raise ValueError(f"'fp8_weights': {name} quantizes its own "
                             f"weights (compiled with fp8_weights='inline' "
                             f"or without fp8): pass none")
        return ()
    if given is None:
        return quantize_weights(quantizer, arg_names, args)
    given = tuple(given)
    if len(given) != len(quantizer.outputs):
        raise ValueError(f"'fp8_weights': {name} takes "
                         f"{len(quantizer.outputs)} (the results of "
                         f"{quantizer.name}: "
                         f"{', '.join(b.name for b in quantizer.outputs)}), "
                         f"got {len(given)}")
    return given


class Gradient:
    """The vector-Jacobian product of a kernel `f`.

    `kernel.grad(wrt=None, save="all")` runs the compiler pass
    `moe-autodiff`, which adds two functions to the kernel's module:
    `f_fwd` (f's results, then the values the backward reads) and `f_grad`
    (f's inputs, those saved values and one gradient per floating-point
    result, to the gradients of the `wrt` arguments). `wrt`: argument names
    (default: every floating-point argument but a router's selection bias).
    `save`: "all" keeps every value the backward reads, "matmuls" only
    matmul and routing results (the backward recomputes permutes and
    SwiGLU), "inputs" nothing (the backward recomputes the forward).

        grad = kernel.grad(wrt=["w_gate_up", "w_down"])
        outputs, saved = grad.forward(*args)
        d_w_gate_up, d_w_down = grad.backward(args, saved, (dy,))

    `accumulate`: argument names (expert weights, whose gradient is one
    weight-gradient matmul) whose gradients the backward adds to f32 main
    gradients, given as `backward(..., main_grads=...)` in argument order
    and updated in place (gradient accumulation over micro-batches,
    Megatron-style `main_grad`): the add is the matmul's epilogue, no
    separate pass over the gradient.

    `fp8="blockwise"`: the forward and the backward run their expert
    matmuls in FP8 (compiler pass moe-fp8-recipe, DeepSeek-V3's recipe:
    e4m3, 1x128 activation groups, 128x128 weight blocks, the weight
    gradient over 128-row blocks of each expert); the router, the combine
    and every result keep their precision. A fused LoRA adapter's term is
    split off its matmul and stays in its precision (the base runs in
    FP8); matmuls the recipe does not take (a bias) stay as they are,
    logged at INFO.
    `fp8_weights="arguments"`: the expert weights' FP8 copies are not made
    inside f_fwd and f_grad but passed in, so that they are made once per
    weight update (gradient accumulation's later micro-batches, frozen
    weights): `quantize_weights(args, "forward")` (or "backward": the
    transposed copies the input gradients read; "both": the two sets from
    one read of each weight, for a step that runs both) makes them, and
    `forward(*args, fp8_weights=...)` / `backward(..., fp8_weights=...)`
    take them (made on the spot when not given).
    """

    def __init__(self, kernel, wrt: Optional[Sequence[str]] = None,
                 save: str = "all", accumulate: Sequence[str] = (),
                 fp8: Optional[str] = None, fp8_weights: str = "inline"):
        names = kernel.arg_names

        def indices_of(what, given):
            if isinstance(given, str):
                given = [given]
            indices = []
            for name in given or ():
                if name not in names:
                    raise ValueError(f"'{what}': {kernel.name} has no "
                                     f"argument {name!r} (arguments: "
                                     f"{', '.join(names)})")
                indices.append(names.index(name))
            return indices

        indices = indices_of("wrt", wrt)
        if save not in SAVE_POLICIES:
            raise ValueError(f"'save': expected one of "
                             f"{', '.join(SAVE_POLICIES)}, got {save!r}")
        check_fp8(fp8)
        check_fp8_weights(fp8_weights)
        self.kernel = kernel
        self.save = save
        self.fp8 = fp8
        self.fp8_weights = fp8_weights
        self._wrt_indices = indices
        self._accumulate_indices = sorted(set(indices_of("accumulate",
                                                         accumulate)))
        self._module: Optional[str] = None
        self._bundles: dict = {}

    @property
    def forward_name(self) -> str:
        return self.kernel.name + "_fwd"

    @property
    def backward_name(self) -> str:
        return self.kernel.name + "_grad"

    @property
    def entry_arg_names(self) -> dict:
        """{function: argument names} of the entries it compiles to (f and
        f_fwd take f's arguments)."""
        names = self.kernel.arg_names
        return {self.kernel.name: names, self.forward_name: names}

    @property
    def module(self) -> str:
        """The kernel's module with `f_fwd` and `f_grad` added (MLIR text)."""
        if self._module is None:
            module = _native.compiler().autodiff(
                self.kernel.module, self.kernel.name, self._wrt_indices,
                self.save, self._accumulate_indices)
            if self.fp8:
                module = fp8_recipe(module, self.fp8, self.kernel.name,
                                    self.fp8_weights)
            self._module = module
        return self._module

    def _grad_attr(self, attr: str) -> list:
        return grad_attr(self.module, self.backward_name, attr)

    @property
    def wrt(self) -> list:
        """Names of the arguments whose gradients `backward` returns."""
        return [self.kernel.arg_names[i] for i in self._grad_attr("moe.wrt")]

    @property
    def accumulate(self) -> list:
        """Names of the arguments whose gradients `backward` adds to the
        main gradients it is given (in argument order)."""
        return [self.kernel.arg_names[i] for i in self._accumulate_indices]

    @property
    def saved_results(self) -> list:
        """For each saved value, the index of the `f_fwd` result holding it."""
        return self._grad_attr("moe.saved_results")

    def ir(self, stage: str = "moe", tile: Optional[dict] = None) -> str:
        """The three functions at one pipeline stage (as Kernel.ir)."""
        return ir(self.module, stage, tile)

    def print_ir(self, stages: Sequence[str] = ("moe", "optimized", "kernels"),
                 tile: Optional[dict] = None, file=None) -> None:
        for stage in stages:
            print(f"// ----- {self.backward_name} at stage '{stage}' -----",
                  file=file or sys.stdout)
            print(self.ir(stage, tile), file=file or sys.stdout)

    def compile(self, target: Union[str, Sequence[str], None] = None,
                tile: Optional[dict] = None, **kwargs) -> Bundle:
        return compile(self, target, tile, **kwargs)

    def _check_args(self, args, what: str = "args") -> None:
        names = self.kernel.arg_names
        if len(args) != len(names):
            raise TypeError(f"'{what}': {self.kernel.name} takes "
                            f"{len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)}")

    def _bundle_for(self, value) -> tuple:
        device = describe(value, self.kernel.arg_names[0]).device
        target = target_for(device)
        if target not in self._bundles:
            self._bundles[target] = self.compile(target)
        return self._bundles[target], target

    def quantize_weights(self, args: Sequence, which: str = "forward"
                         ) -> tuple:
        """With fp8_weights="arguments": the FP8 copies of the weights among
        `args` (f's arguments) that `forward` (`which`="forward") or
        `backward` ("backward") takes; () for a gradient without them.
        `which`="both": (forward's copies, backward's copies), made by one
        entry that reads each weight once for both its layouts (the plain
        copy the forward reads and the transposed one of the input
        gradients): 4 bytes moved per bf16 weight element instead of 6.
        Reuse them while the weights do not change."""
        if which not in ("forward", "backward", "both"):
            raise ValueError(f"'which': expected forward, backward or both, "
                             f"got {which!r}")
        self._check_args(args)
        bundle, target = self._bundle_for(args[0])
        if which == "both":
            step = step_fp8_weights_entry(bundle, self.kernel.name, target)
            if step is None:
                return (self.quantize_weights(args, "forward"),
                        self.quantize_weights(args, "backward"))
            return quantize_step_weights(
                step, fp8_weights_entry(bundle, self.forward_name, target),
                self.kernel.arg_names, args)
        name = self.forward_name if which == "forward" else self.backward_name
        quantizer = fp8_weights_entry(bundle, name, target)
        if quantizer is None:
            return ()
        return quantize_weights(quantizer, self.kernel.arg_names, args)

    def forward(self, *args, fp8_weights: Optional[Sequence] = None
                ) -> tuple:
        """Runs `f_fwd`: (f's results, the saved values), both tuples.
        `fp8_weights`: quantize_weights(args, "forward")'s copies (with
        fp8_weights="arguments"; made here when None)."""
        self._check_args(args)
        bundle, target = self._bundle_for(args[0])
        extra = fp8_weight_inputs(bundle, self.forward_name, target,
                                  self.kernel.arg_names, args, fp8_weights)
        out = _as_tuple(bundle.entry(self.forward_name, target)(*args,
                                                                *extra))
        count = len(bundle.entry(self.kernel.name, target).outputs)
        return out[:count], tuple(out[i] for i in self.saved_results)

    def backward(self, args: Sequence, saved: Sequence,
                 grad_outputs: Sequence, main_grads: Sequence = (),
                 fp8_weights: Optional[Sequence] = None) -> tuple:
        """Runs `f_grad`: the gradients of the `wrt` arguments, in order.
        `grad_outputs`: one gradient per floating-point result of f.
        `main_grads`: with `accumulate`, one f32 array per accumulated
        argument (its shape), which receives main + gradient in place and is
        returned in that argument's place. `fp8_weights`:
        quantize_weights(args, "backward")'s copies (with
        fp8_weights="arguments"; made here when None)."""
        self._check_args(args)
        if len(saved) != len(self.saved_results):
            raise ValueError(f"'saved': expected the {len(self.saved_results)}"
                             f" saved values forward() returned, got "
                             f"{len(saved)}")
        accumulated = self.accumulate
        if len(main_grads) != len(accumulated):
            raise ValueError(f"'main_grads': expected {len(accumulated)} (one "
                             f"per accumulated argument: "
                             f"{', '.join(accumulated) or 'none'}), got "
                             f"{len(main_grads)}")
        bundle, target = self._bundle_for(args[0])
        entry = bundle.entry(self.backward_name, target)
        extra = fp8_weight_inputs(bundle, self.backward_name, target,
                                  self.kernel.arg_names, args, fp8_weights)
        expected = (len(entry.inputs) - len(args) - len(saved) -
                    len(main_grads) - len(extra))
        if len(grad_outputs) != expected:
            raise ValueError(f"'grad_outputs': {self.kernel.name} has "
                             f"{expected} floating-point results, got "
                             f"{len(grad_outputs)} gradients")
        out = None
        if main_grads:
            # Each main gradient is also its sum's output: the epilogue
            # reads every element before it writes it.
            mains = dict(zip(accumulated, main_grads))
            out = [mains.get(name) for name in self.wrt]
        return _as_tuple(entry(*args, *saved, *grad_outputs, *main_grads,
                               *extra, out=out))

    def __repr__(self) -> str:
        extra = (f", accumulate={', '.join(self.accumulate)}"
                 if self._accumulate_indices else "")
        return (f"<moec gradient of {self.kernel.name} wrt "
                f"{', '.join(self.wrt)} (save={self.save}{extra})>")
