"""`moec.torch.MoE`: a sparse MoE block (Mixtral / Qwen3 style) on moec kernels.

    block = moec.torch.MoE(hidden_size=2048, intermediate_size=768,
                           num_experts=128, top_k=8).cuda()
    block.load_hf_state_dict(hf_block.state_dict())   # Qwen3 or Mixtral names
    y = block(x)                                      # x: [..., hidden]

The forward pass is one moec kernel: router matmul, top-k, sort, gathered
gate_up grouped matmul with fused SwiGLU, down projection with fused
weighted combine. Weights keep the checkpoint layout: `gate.weight` [E, H],
`w_gate_up` [E, 2I, H] (gate_proj rows, then up_proj rows) and `w_down`
[E, H, I]. The forward is the custom op `torch.ops.moec.moe_block` (with a
fake implementation), so `torch.compile(..., fullgraph=True)` traces a model
holding MoE blocks without a graph break.

Training: when gradients are needed, the forward runs the kernel pair that
the compiler pass moe-autodiff derives from the block (Kernel.grad,
docs/training.md): `moe_block_fwd` returns the output and what the backward
reads (router logits, routing, the permuted rows, the gate_up, SwiGLU and
down outputs), `moe_block_grad` returns the gradients of x, the router and
both expert weights (custom ops `moec::moe_block_train` and
`moec::moe_block_backward`, or `moec::moe_block_backward_main_grad`).
`.grad` accumulates as usual; under `torch.autocast` to bf16 or f16, f32
blocks run the kernels of that type
(gradients flow back to the f32 parameters). With `main_grad=True` the
expert weights' gradients are instead added to f32 `.main_grad` tensors by
the weight-gradient kernels themselves (Megatron-style gradient
accumulation, no separate add).

`replace_moe_blocks(model)` swaps the sparse MoE blocks of a transformers
Qwen3-MoE, Mixtral or OLMoE model for MoE blocks (moec.torch.hf).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from ..compiler import Gradient, Kernel, compile as _compile, target_for
from ..compiler._grad import (fp8_weights_entry, quantize_step_weights,
                               quantize_weights, saved_results_of,
                               step_fp8_weights_entry)
from ..language._dtypes import canonical, to_torch
from ..layers import MAIN_GRAD_ARGS, MoEConfig, MoEConfigFields
from ..runtime import Bundle, Entry
from ._fp8_cache import Fp8WeightCache, keepable


class _Fp8Inputs(NamedTuple):
    """How an entry that takes FP8 weight copies gets them."""
    quantizer: Entry  # `<entry>_fp8_weights`
    # A training forward's `<f>_fwd_grad_fp8_weights` (the bundle's step
    # quantizer), which also makes `partner`'s copies (the backward's,
    # `<f>_grad_fp8_weights`) from the same read; None otherwise.
    step: Optional[Entry]
    partner: Optional[Entry]
    names: tuple  # the entry's input names (the quantizers take theirs)
    # Where the quantizer's and the partner's weights are among the entry's
    # inputs.
    positions: tuple
    partner_positions: tuple


class _Launcher:
    """The kernel and compiled bundle of one block configuration. Shared by
    every MoE block of that configuration, so a model's layers trace,
    compile and (on the host) JIT their kernel once. With a given bundle
    (MoE(..., bundle=...)) it runs that bundle's entries, checked against
    the configuration, and never compiles its own."""

    def __init__(self, config: MoEConfig, bundle: Optional[Bundle]):
        self.config = config
        # The given bundle (its id is part of the launcher's key).
        self.given = bundle
        self.bundle: Optional[Bundle] = None  # compiled here, without one
        self._kernel: Optional[Kernel] = None
        self._gradient: Optional[Gradient] = None
        self._train_bundle: Optional[Bundle] = None
        self._checked: set = set()  # (target, training) of the given bundle
        # (name, target) -> the entry's _Fp8Inputs, or None for an entry
        # that takes no FP8 copies.
        self._quantizers: dict = {}
        self._train_results: dict = {}  # target -> train_results
        self.fp8_cache = Fp8WeightCache()

    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = self.config.kernel()
        return self._kernel

    def _given_for(self, target: str, training: bool) -> Bundle:
        """The given bundle, checked (once) to hold this configuration's
        entries for `target`."""
        if (target, training) not in self._checked:
            self.config.check_bundle(self.given, target, training,
                                     fix=_bundle_fix(self.config))
            self._checked.add((target, training))
        return self.given

    def entry(self, device: torch.device) -> Entry:
        target = target_for(device)
        if self.given is not None:
            return self._given_for(target, False).entry("moe_block", target)
        if self.bundle is None or target not in self.bundle.targets:
            self.bundle = _compile(self.config.forward_source(self.kernel()),
                                   target, self.config.tile_dict)
        return self.bundle.entry("moe_block", target)

    def _fp8_inputs(self, entry: Entry) -> Optional[_Fp8Inputs]:
        """How `entry` gets its FP8 weight copies, or None if it takes
        none (looked up once per entry)."""
        key = (entry.name, entry.target)
        if key not in self._quantizers:
            quantizer = fp8_weights_entry(entry.bundle, entry.name,
                                          entry.target)
            step = partner = None
            if quantizer is not None and entry.name.endswith("_fwd"):
                # A training forward: its backward's copies come from the
                # same read of the weights (moe-fp8-recipe's step quantizer).
                base = entry.name[:-len("_fwd")]
                step = step_fp8_weights_entry(entry.bundle, base,
                                              entry.target)
                partner = step and fp8_weights_entry(
                    entry.bundle, base + "_grad", entry.target)
            partner = partner if step else None
            names = tuple(b.name for b in entry.inputs)

            def positions(q) -> tuple:
                return tuple(names.index(b.name) for b in q.inputs) if q \
                    else ()
            self._quantizers[key] = quantizer and _Fp8Inputs(
                quantizer, step, partner, names, positions(quantizer),
                positions(partner))
        return self._quantizers[key]

    def run(self, entry: Entry, *args, weight_keys=None, out=None):
        """`entry` on `args`, then the FP8 weight copies it takes, if it
        takes them. `weight_keys`: what args[1:4] (the router and expert
        weights) are keyed by in Fp8WeightCache (the parameters they were
        cast from under autocast); None or empty: args themselves."""
        found = self._fp8_inputs(entry)
        if found is None:
            return entry(*args, out=out)
        keys = weight_keys or ()

        def pairs(positions) -> list:
            """(weight, key) of each weight at `positions` among args."""
            return [(args[i], keys[i - 1] if 0 < i <= len(keys) else args[i])
                    for i in positions]

        weights = pairs(found.positions)
        keep = self.config.keep_fp8_weights
        if not keepable(weights, keep):
            copies = quantize_weights(found.quantizer, found.names, args)
        else:
            copies = self.fp8_cache.find(found.quantizer, weights)
            if copies is None:
                copies = self._make_kept_copies(
                    found, args, weights, pairs(found.partner_positions),
                    keep)
        return entry(*args, *copies, out=out)

    def _make_kept_copies(self, found: _Fp8Inputs, args, weights: list,
                          partner: list, keep: bool) -> tuple:
        """The copies found.quantizer makes of `weights`, kept; for a
        training forward with the backward's (of `partner`), made in the
        same read and kept too."""
        cache = self.fp8_cache
        if partner and keepable(partner, keep):
            cache.find(found.partner, partner)  # frees stale copies first
            copies, later = quantize_step_weights(
                found.step, found.quantizer, found.names, args)
            cache.store(found.partner, partner, later)
        else:
            copies = quantize_weights(found.quantizer, found.names, args)
        cache.store(found.quantizer, weights, copies)
        return copies

    def gradient(self) -> Gradient:
        """The derived forward-with-saves and backward (MoEConfig.gradient)."""
        if self._gradient is None:
            self._gradient = self.config.gradient(self.kernel())
        return self._gradient

    def compile(self, target, training: bool) -> Bundle:
        """The entries a block of this configuration looks for (moe_block;
        with `training`, moe_block_fwd and moe_block_grad)."""
        source = (self.gradient() if training
                  else self.config.forward_source(self.kernel()))
        return _compile(source, target, self.config.tile_dict)

    def train_entries(self, device: torch.device) -> tuple:
        """(moe_block_fwd, moe_block_grad) for the device: from the given
        bundle (block.save_bundle writes them), else compiled."""
        target = target_for(device)
        bundle = (self._given_for(target, True) if self.given is not None
                  else self._train_bundle)
        if bundle is None or target not in bundle.targets:
            bundle = self._train_bundle = _compile(
                self.gradient().module, target, self.config.tile_dict)
        return (bundle.entry("moe_block_fwd", target),
                bundle.entry("moe_block_grad", target))

    def train_results(self, device: torch.device) -> list:
        """Which moe_block_fwd results moe_block_train returns: y, then
        those moe_block_grad takes, in its order (moe.saved_results; an FP8
        block saves some values quantized, after the others)."""
        fwd, grad = self.train_entries(device)
        if fwd.target not in self._train_results:
            try:
                saved = saved_results_of(grad)
            except ValueError:
                # A bundle without its source: saved in result order, as
                # every bf16 block saves them.
                saved = list(range(1, len(fwd.outputs)))
            self._train_results[fwd.target] = [0] + saved
        return self._train_results[fwd.target]

    def saved_specs(self, x: torch.Tensor) -> list:
        """(shape, dtype) of moe_block_train's results for tokens x: y,
        then what the save policy keeps (docs/training.md), as the compiled
        entry sizes them (the fake implementation's)."""
        fwd, _ = self.train_entries(x.device)
        if fwd.symbols != ["T"]:
            raise RuntimeError(
                f"moec.torch: moe_block_fwd sizes its results by "
                f"{fwd.symbols}, expected the token count T alone (a bundle "
                f"compiled from another module?)")
        shapes = fwd.shapes([x.shape[0]])[len(fwd.inputs):]
        return [(tuple(shapes[i]), to_torch(fwd.outputs[i].dtype))
                for i in self.train_results(x.device)]


def _bundle_dtype(bundle: Bundle) -> Optional[str]:
    """The element type of x in a bundle's MoE block entries."""
    for entry in bundle.entries:
        if entry.name.startswith("moe_block") and entry.inputs:
            return entry.inputs[0].dtype
    return None


def _bundle_fix(config: MoEConfig) -> str:
    """What a bundle that does not fit the block should be instead."""
    return (f"write it with block.save_bundle(path) from a block of this "
            f"configuration (kernels of dtype={to_torch(config.dtype)}), or "
            f"drop bundle= to compile the kernels here")


# The custom op reaches its launcher through an int argument (an op takes no
# Python objects): an index into _LAUNCHERS, one per configuration (and per
# precompiled bundle given).
_LAUNCHERS: list = []
_LAUNCHER_INDEX: dict = {}


def _launcher_index(config: MoEConfig, bundle: Optional[Bundle]) -> int:
    key = (config, None if bundle is None else id(bundle))
    if key not in _LAUNCHER_INDEX:
        _LAUNCHER_INDEX[key] = len(_LAUNCHERS)
        _LAUNCHERS.append(_Launcher(config, bundle))
    return _LAUNCHER_INDEX[key]


@torch.library.custom_op("moec::moe_block", mutates_args=())
def _moe_block(x: torch.Tensor, gate_w: torch.Tensor, w_gate_up: torch.Tensor,
               w_down: torch.Tensor, adapters: list[torch.Tensor],
               launcher: int, weight_keys: list[torch.Tensor]) -> torch.Tensor:
    """The block's forward on tokens x [T, H] (contiguous); `adapters`: the
    four LoRA tensors (LORA_ARGS) of a LoRA block, else empty;
    `weight_keys` (FP8 blocks, else empty): the parameters gate_w,
    w_gate_up and w_down were cast from, whose versions the kept FP8
    copies follow (not read)."""
    launcher_ = _LAUNCHERS[launcher]
    return launcher_.run(launcher_.entry(x.device), x, gate_w, w_gate_up,
                         w_down, *adapters, weight_keys=weight_keys)


@_moe_block.register_fake
def _(x, gate_w, w_gate_up, w_down, adapters, launcher, weight_keys):
    return torch.empty_like(x)


@torch.library.custom_op("moec::moe_block_train", mutates_args=())
def _moe_block_train(x: torch.Tensor, gate_w: torch.Tensor,
                     w_gate_up: torch.Tensor, w_down: torch.Tensor,
                     adapters: list[torch.Tensor],
                     main_grads: list[torch.Tensor],
                     launcher: int, weight_keys: list[torch.Tensor]
                     ) -> list[torch.Tensor]:
    """The block's forward for training: [y, *what the backward reads].
    `main_grads` (main_grad=True: the expert weights' f32 main gradients,
    else empty) is not read here; the backward updates it. `weight_keys`:
    as moe_block's."""
    launcher_ = _LAUNCHERS[launcher]
    fwd, _ = launcher_.train_entries(x.device)
    outs = launcher_.run(fwd, x, gate_w, w_gate_up, w_down, *adapters,
                         weight_keys=weight_keys)
    # An entry with one result (save="inputs": y alone) returns it bare.
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [outs[i] for i in launcher_.train_results(x.device)]


@_moe_block_train.register_fake
def _(x, gate_w, w_gate_up, w_down, adapters, main_grads, launcher,
      weight_keys):
    return [x.new_empty(shape, dtype=dtype)
            for shape, dtype in _LAUNCHERS[launcher].saved_specs(x)]


@torch.library.custom_op("moec::moe_block_backward", mutates_args=())
def _moe_block_backward(
        grad: torch.Tensor, x: torch.Tensor, gate_w: torch.Tensor,
        w_gate_up: torch.Tensor, w_down: torch.Tensor,
        adapters: list[torch.Tensor], saved: list[torch.Tensor],
        launcher: int, weight_keys: list[torch.Tensor]
) -> list[torch.Tensor]:
    """moe_block_grad on the inputs, the saved values and the output's
    gradient: the gradients of x and the three weights, or with LoRA of x
    and the four adapters. `weight_keys`: as moe_block's."""
    launcher_ = _LAUNCHERS[launcher]
    _, backward = launcher_.train_entries(x.device)
    grads = launcher_.run(backward, x, gate_w, w_gate_up, w_down, *adapters,
                          *saved, grad.contiguous(), weight_keys=weight_keys)
    return list(grads)


@_moe_block_backward.register_fake
def _(grad, x, gate_w, w_gate_up, w_down, adapters, saved, launcher,
      weight_keys):
    inputs = [x] + (list(adapters) if adapters else [gate_w, w_gate_up,
                                                     w_down])
    return [torch.empty_like(t) for t in inputs]


# Its own op: torch.compile functionalizes an op that mutates tensors only
# when it returns tensors, not a list of them.
@torch.library.custom_op("moec::moe_block_backward_main_grad",
                         mutates_args=("main_grad_gate_up", "main_grad_down"))
def _moe_block_backward_main_grad(
        grad: torch.Tensor, x: torch.Tensor, gate_w: torch.Tensor,
        w_gate_up: torch.Tensor, w_down: torch.Tensor,
        saved: list[torch.Tensor], main_grad_gate_up: torch.Tensor,
        main_grad_down: torch.Tensor, launcher: int,
        weight_keys: list[torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """main_grad=True's backward: adds the expert weights' gradients to
    their f32 main gradients in place; returns x's and the router's.
    `weight_keys`: as moe_block's."""
    launcher_ = _LAUNCHERS[launcher]
    _, backward = launcher_.train_entries(x.device)
    # The kernel reads each main gradient's element before it writes the
    # sum there: the main gradients are their own outputs.
    mains = (main_grad_gate_up, main_grad_down)
    grads = launcher_.run(backward, x, gate_w, w_gate_up, w_down, *saved,
                          grad.contiguous(), *mains, out=[None, None, *mains],
                          weight_keys=weight_keys)
    return grads[0], grads[1]


@_moe_block_backward_main_grad.register_fake
def _(grad, x, gate_w, w_gate_up, w_down, saved, main_grad_gate_up,
      main_grad_down, launcher, weight_keys):
    return torch.empty_like(x), torch.empty_like(gate_w)


def _setup_context(ctx, inputs, output):
    (x, gate_w, w_gate_up, w_down, adapters, main_grads, launcher,
     weight_keys) = inputs
    ctx.mark_non_differentiable(*output[1:])
    ctx.save_for_backward(x, gate_w, w_gate_up, w_down, *adapters,
                          *output[1:])
    ctx.num_adapters = len(adapters)
    # Not saved tensors: the backward of another micro-batch may update
    # them in between (a saved tensor's version check would fail).
    ctx.main_grads = list(main_grads)
    # Not read by the kernels: what the FP8 copies' cache keys on.
    ctx.weight_keys = list(weight_keys)
    ctx.launcher = launcher


def _backward(ctx, grads):
    x, gate_w, w_gate_up, w_down, *rest = ctx.saved_tensors
    adapters, saved = rest[:ctx.num_adapters], rest[ctx.num_adapters:]
    if ctx.main_grads:
        # The expert weights' gradients go into their main gradients.
        dx, d_gate = torch.ops.moec.moe_block_backward_main_grad(
            grads[0], x, gate_w, w_gate_up, w_down, saved, *ctx.main_grads,
            ctx.launcher, ctx.weight_keys)
        return (dx, d_gate, None, None, [], [None] * len(ctx.main_grads),
                None, [None] * len(ctx.weight_keys))
    out = torch.ops.moec.moe_block_backward(
        grads[0], x, gate_w, w_gate_up, w_down, adapters, saved, ctx.launcher,
        ctx.weight_keys)
    if adapters:
        # LoRA: the router and base weights are frozen (MoE.forward checks).
        return (out[0], None, None, None, list(out[1:]), [], None,
                [None] * len(ctx.weight_keys))
    return (*out, [], [], None, [None] * len(ctx.weight_keys))


_moe_block_train.register_autograd(_backward, setup_context=_setup_context)


def _no_backward(ctx, grad):
    raise RuntimeError(
        "moec.torch: moec::moe_block is the inference op; MoE.forward runs "
        "moec::moe_block_train when gradients are needed")


_moe_block.register_autograd(_no_backward,
                             setup_context=lambda ctx, inputs, output: None)


def clear_fp8_weights() -> None:
    """Drops the FP8 weight copies every FP8 block keeps (made again on the
    next call): after writing weights through `.data`, which their version
    counter does not see, or to free their memory."""
    for launcher in _LAUNCHERS:
        launcher.fp8_cache.clear()


class MoE(MoEConfigFields, nn.Module):
    """A sparse MoE block whose forward runs moec kernels.

    Its configuration is a moec.MoEConfig (`block.config`): pass
    `config=`, or its fields as arguments (`MoE(2048, 768, 128, 8,
    routing=..., dtype=..., lora_rank=...)`: hidden_size,
    intermediate_size, num_experts, top_k, norm_topk_prob, routing, dtype,
    tile, save, lora_rank, lora_alpha, main_grad, fp8, keep_fp8_weights), or
    both (the arguments replace the config's fields). `device`: where the
    parameters go.

    `routing="softmax_then_topk"` with `norm_topk_prob` is Qwen3 (and
    Qwen3.5, OLMoE without renormalization); `routing="topk_then_softmax"`
    is Mixtral. `dtype` (of the weights and of x): torch.bfloat16,
    torch.float16 or torch.float32. `save`: what a training forward keeps
    for the backward: "all" (fastest), "matmuls" (the backward recomputes
    the permuted rows and SwiGLU: less memory) or "inputs" (it recomputes
    the whole forward). `bundle`: a precompiled bundle, as
    `block.compile(target)` or `block.save_bundle(path)` write it (e.g.
    `moec.load(path)` on a machine without the compiler); otherwise the
    kernels are compiled for the input's device on first use (cached on
    disk, and shared by the blocks of one configuration).

    LoRA fine-tuning: `lora_rank` r > 0 adds an adapter per expert to both
    projections, `gate_up_lora_A` [E*r, H], `gate_up_lora_B` [2I, E*r],
    `down_lora_A` [E*r, I], `down_lora_B` [H, E*r] (expert e's A is rows
    e*r..e*r+r, its B columns e*r..e*r+r; the layout of one nn.Linear LoRA
    per expert stacked along r), scaled by `lora_alpha / r` (default
    alpha: r). A is initialized as nn.Linear's weight, B to zeros, so the
    block starts as the base block. The router and the base weights are
    frozen (requires_grad False); the backward computes the gradients of
    x and the adapters only.

    `main_grad=True` (full fine-tuning, not with LoRA): gradient
    accumulation into f32 main gradients, as Megatron-LM does. Each
    backward adds the expert weights' gradients to `w_gate_up.main_grad`
    and `w_down.main_grad` (float32, the weights' shapes; made as zeros on
    the first training forward unless set, e.g. to views of a flat
    gradient buffer) inside the weight-gradient kernels, and leaves their
    `.grad` None; x's and the router's gradients go to `.grad` as usual.
    The optimizer step reads `.main_grad`; `zero_main_grad()` clears them.

    FP8 training: `fp8="blockwise"` runs the expert matmuls of the forward
    and the backward in FP8 (e4m3; DeepSeek-V3's recipe, compiler pass
    moe-fp8-recipe, docs/training.md): the activations in 1x128 groups and
    the expert weights in 128x128 blocks, each quantized by a kernel of
    the step, the weight gradients over 128-row blocks of each expert. The
    router, SwiGLU, the combine and every result and gradient keep the
    block's dtype; the parameters stay as they are (f32 master weights
    under autocast to bf16, or bf16). With `lora_rank` the frozen base
    matmuls run in FP8 and the adapters' products in the block's dtype
    (the recipe splits them off the base). Frozen expert weights
    (requires_grad False: the LoRA base, or a block frozen for inference)
    keep their FP8 copies (the forward's, and the transposed ones of the
    input gradients) while they stay the same storage with the same
    version counter (under autocast: the f32 parameter's), and get new
    ones after an in-place change: they are quantized once, not on every
    call. The copies take half the bf16 weights' bytes per layout;
    moec.torch.clear_fp8_weights() drops them (needed after writes through
    `.data`, which the version counter does not see). Weights that train
    are quantized on every call, unless `keep_fp8_weights=True`: then
    they keep their copies as frozen ones do, until they change or the
    next torch.optim step (the copies are dropped before it), so gradient
    accumulation's later micro-batches quantize no weight (the same
    gradients, bitwise).
    """

    def __init__(self, hidden_size: Optional[int] = None,
                 intermediate_size: Optional[int] = None,
                 num_experts: Optional[int] = None,
                 top_k: Optional[int] = None, *,
                 config: Optional[MoEConfig] = None, device=None,
                 bundle: Optional[Bundle] = None, **options):
        super().__init__()
        self._configure(MoEConfig.of(config, (hidden_size, intermediate_size,
                                              num_experts, top_k), **options),
                        bundle)
        config = self.config
        factory = dict(dtype=to_torch(config.dtype), device=device)
        H, I, E = config.hidden_size, config.intermediate_size, \
            config.num_experts
        self.gate = nn.Linear(H, E, bias=False, **factory)
        self.w_gate_up = nn.Parameter(torch.empty(E, 2 * I, H, **factory))
        self.w_down = nn.Parameter(torch.empty(E, H, I, **factory))
        nn.init.normal_(self.w_gate_up, std=H ** -0.5)
        nn.init.normal_(self.w_down, std=I ** -0.5)
        if config.lora_rank:
            self._add_adapters(factory)

    def _add_adapters(self, factory: dict) -> None:
        """The LoRA parameters (see the class docs); freezes the rest."""
        H, I = self.hidden_size, self.intermediate_size
        ER = self.num_experts * self.lora_rank
        for name, rows, cols in (("gate_up", 2 * I, H), ("down", H, I)):
            a = nn.Parameter(torch.empty(ER, cols, **factory))
            # As nn.Linear(cols, rows) initializes its weight (peft's A).
            nn.init.kaiming_uniform_(a, a=5 ** 0.5)
            setattr(self, name + "_lora_A", a)
            setattr(self, name + "_lora_B",
                    nn.Parameter(torch.zeros(rows, ER, **factory)))
        for p in (self.gate.weight, self.w_gate_up, self.w_down):
            p.requires_grad_(False)

    def _configure(self, config: MoEConfig,
                   bundle: Optional[Bundle]) -> None:
        """Sets the (checked) configuration; no parameters (moec.torch.hf's
        block adopts a transformers block's own)."""
        if not config.default_router:
            raise ValueError(
                "'scoring', 'selection_bias', 'num_groups', 'topk_groups', "
                "'scaling_factor': moec.torch.MoE's router is softmax "
                "top-k (Qwen3, Mixtral, OLMoE); DeepSeek-V3's router is "
                "moec.ep.ExpertParallelMoE's (on one rank too)")
        self.config = config
        if bundle is not None:
            if not isinstance(bundle, Bundle):
                raise TypeError(f"'bundle': expected a moec.Bundle (from "
                                f"block.compile() or moec.load(path)), got "
                                f"{type(bundle).__name__}")
            # Its entries for every target it has; the target of the
            # device, and the training entries, are checked on first use.
            # An f32 block may be given the kernels of its autocast type.
            kernels = _bundle_dtype(bundle)
            checked = (config.replace(dtype=kernels)
                       if config.dtype == "f32" and kernels in ("bf16", "f16")
                       else config)
            checked.check_bundle(bundle, fix=_bundle_fix(config))
        # A given bundle is the only source of kernels: every launcher of
        # this block (one per autocast type) runs it, checked.
        self._bundle = bundle
        # Fixed here: torch.compile sees a constant. Under autocast the
        # blocks run the kernels of the autocast type (_launcher_for).
        self._launchers: dict = {}
        self._launcher = self._launcher_for(to_torch(config.dtype))

    # The configuration's fields: MoEConfigFields, and these.
    lora_rank = property(lambda self: self.config.lora_rank)
    lora_scaling = property(lambda self: self.config.lora_scaling)

    def _launcher_for(self, dtype: torch.dtype) -> int:
        if dtype not in self._launchers:
            self._launchers[dtype] = _launcher_index(
                self.config.replace(dtype=canonical(dtype)), self._bundle)
        return self._launchers[dtype]

    def compile(self, target=None, training: bool = True,
                dtype: Optional[torch.dtype] = None) -> Bundle:
        """The bundle this block runs from, compiled for `target` ("sm_90a",
        "host", or a list; default: the target of the device the block's
        parameters are on, moec.target_for(device)): `moe_block` and, with
        `training`, `moe_block_fwd` and `moe_block_grad` (with LoRA, the backward to x
        and the adapters; with main_grad, into main gradients): exactly
        the entries the block looks for. `dtype`: the kernels' type
        (default: the block's; an f32 block under autocast runs the
        autocast type's). Give it back as `MoE(..., bundle=...)`, e.g. on a
        GPU machine without the compiler."""
        launcher = _LAUNCHERS[self._launcher_for(dtype or
                                                 to_torch(self.config.dtype))]
        if target is None:
            target = target_for(self.gate.weight.device)
        return launcher.compile(target, training)

    def save_bundle(self, path, target=None, training: bool = True,
                    dtype: Optional[torch.dtype] = None) -> Bundle:
        """`compile(target, training, dtype)` written to `path` (a .moecb
        file for `moec.load`); returns the bundle."""
        bundle = self.compile(target, training, dtype)
        bundle.save(path)
        return bundle

    def adapters(self) -> tuple:
        """The four LoRA parameters in kernel order (empty without LoRA)."""
        if not self.config.lora_rank:
            return ()
        return (self.gate_up_lora_A, self.gate_up_lora_B, self.down_lora_A,
                self.down_lora_B)

    def main_grads(self) -> list:
        """The expert weights' f32 main gradients (main_grad=True), made as
        zeros where a weight has none; a ValueError names one of the wrong
        dtype, shape or device."""
        return main_grads_of(self)

    def zero_main_grad(self) -> None:
        """Zeroes the expert weights' main gradients (main_grad=True)."""
        zero_main_grads(self)

    def kernel(self) -> Kernel:
        """The traced forward kernel (for moec.compile / AOT bundles)."""
        return _LAUNCHERS[self._launcher].kernel()

    def load_hf_state_dict(self, state_dict: dict, prefix: str = "") -> None:
        """Loads a Hugging Face block's weights, `gate.weight` and the experts:
        fused (transformers >= 5: `experts.gate_up_proj` [E, 2I, H],
        `experts.down_proj` [E, H, I]), or per expert with Qwen3-MoE / OLMoE
        names (`experts.{e}.gate_proj/up_proj/down_proj.weight`) or Mixtral
        names (`experts.{e}.w1/w3/w2.weight`)."""
        load_hf_experts(self, state_dict, prefix)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"'x': expected last dimension {self.hidden_size}"
                             f", got shape {list(x.shape)}")
        weights = (self.gate.weight, self.w_gate_up, self.w_down)
        # The FP8 copies follow the parameters (a cast below is new on
        # every call).
        keys = list(weights) if self.fp8 else []
        adapters = self.adapters()
        for name, w in zip(("gate.weight", "w_gate_up", "w_down"), weights):
            if adapters and w.requires_grad and torch.is_grad_enabled():
                raise ValueError(
                    f"'{name}' requires grad, but a LoRA block trains its "
                    f"adapters only: freeze it (requires_grad_(False))")
        dtype = self.w_down.dtype
        device_type = x.device.type
        if torch.is_autocast_enabled(device_type) and dtype == torch.float32:
            # Autocast: the kernels of the autocast type on casts of x and
            # the weights (their gradients flow back through the casts).
            dtype = torch.get_autocast_dtype(device_type)
            if dtype not in (torch.bfloat16, torch.float16):
                dtype = torch.float32
            x = x.to(dtype)
            weights = tuple(w.to(dtype) for w in weights)
            adapters = tuple(a.to(dtype) for a in adapters)
        elif x.dtype != dtype:
            raise ValueError(f"'x': expected dtype {dtype} (the block's), got "
                             f"{x.dtype}")
        launcher = self._launcher_for(dtype)
        tokens = x.reshape(-1, self.hidden_size).contiguous()
        weights = tuple(w.contiguous() for w in weights)
        adapters = [a.contiguous() for a in adapters]
        if torch.is_grad_enabled() and (tokens.requires_grad or any(
                w.requires_grad for w in weights + tuple(adapters))):
            main_grads = self.main_grads() if self.main_grad else []
            y = torch.ops.moec.moe_block_train(tokens, *weights, adapters,
                                               main_grads, launcher, keys)[0]
        else:
            y = torch.ops.moec.moe_block(tokens, *weights, adapters, launcher,
                                         keys)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, intermediate_size="
                f"{self.intermediate_size}, num_experts={self.num_experts}, "
                f"top_k={self.top_k}, routing={self.routing}, norm_topk_prob="
                f"{self.norm_topk_prob}"
                + (f", lora_rank={self.lora_rank}, lora_scaling="
                   f"{self.lora_scaling}" if self.lora_rank else "")
                + (", main_grad=True" if self.main_grad else "")
                + (f", fp8={self.fp8}" if self.fp8 else "")
                + (", keep_fp8_weights=True" if self.keep_fp8_weights
                   else ""))


def main_grads_of(block: nn.Module) -> list:
    """The f32 `.main_grad` of `block.w_gate_up` and `block.w_down` (MoE,
    ExpertParallelMoE), made as zeros where missing, checked otherwise."""
    grads = []
    for name in MAIN_GRAD_ARGS:
        weight = getattr(block, name)
        grad = getattr(weight, "main_grad", None)
        if grad is None:
            grad = torch.zeros(weight.shape, dtype=torch.float32,
                               device=weight.device)
            weight.main_grad = grad
        elif (not isinstance(grad, torch.Tensor)
              or grad.dtype != torch.float32 or grad.shape != weight.shape
              or grad.device != weight.device or not grad.is_contiguous()):
            got = (f"{grad.dtype} {list(grad.shape)} on {grad.device}"
                   f"{'' if grad.is_contiguous() else ', not contiguous'}"
                   if isinstance(grad, torch.Tensor)
                   else type(grad).__name__)
            raise ValueError(
                f"'{name}.main_grad': expected a contiguous float32 tensor "
                f"of shape {list(weight.shape)} on {weight.device}, got "
                f"{got}")
        grads.append(grad)
    return grads


@torch.no_grad()
def zero_main_grads(block: nn.Module) -> None:
    """Zeroes the main gradients main_grads_of(block) made or took."""
    for name in MAIN_GRAD_ARGS:
        grad = getattr(getattr(block, name), "main_grad", None)
        if grad is not None:
            grad.zero_()


@torch.no_grad()
def load_hf_experts(block: nn.Module, state_dict: dict, prefix: str = "",
                    first_expert: int = 0) -> None:
    """Copies a Hugging Face MoE block's router and experts [first_expert,
    first_expert + len(block.w_down)) into `block` (its `gate`, `w_gate_up`
    and `w_down`): MoE.load_hf_state_dict, and the local experts of an
    expert-parallel block."""
    def get(key):
        if prefix + key not in state_dict:
            raise KeyError(f"state_dict has no '{prefix + key}'")
        return state_dict[prefix + key]

    experts = range(first_expert, first_expert + block.w_down.shape[0])
    block.gate.weight.copy_(get("gate.weight"))
    if prefix + "experts.gate_up_proj" in state_dict:
        block.w_gate_up.copy_(get("experts.gate_up_proj")[experts.start:
                                                           experts.stop])
        block.w_down.copy_(get("experts.down_proj")[experts.start:
                                                    experts.stop])
        return
    qwen = f"{prefix}experts.{experts.start}.gate_proj.weight" in state_dict
    names = (("gate_proj", "up_proj", "down_proj") if qwen
             else ("w1", "w3", "w2"))
    inter = block.intermediate_size
    for local, e in enumerate(experts):
        base = f"experts.{e}."
        block.w_gate_up[local, :inter].copy_(get(base + names[0] + ".weight"))
        block.w_gate_up[local, inter:].copy_(get(base + names[1] + ".weight"))
        block.w_down[local].copy_(get(base + names[2] + ".weight"))
