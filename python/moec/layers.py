"""MoE layers without torch: `MoEConfig`, the one description of a block
that moec.torch.MoE, moec.ep.ExpertParallelMoE and the transformers helpers
share (checked once, here), and the kernels of a block built from moec.ops
(`moe_kernel`; `MoEConfig.kernel`, `.gradient`, `.compile`)."""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

from .compiler import Gradient, Kernel, SAVE_POLICIES, check_fp8, compile
from .compiler._compile import _tile_dict
from .compiler._grad import fp8_weights_entry
from .language import Tensor, ops
from .language._dtypes import FLOATS, canonical
from .runtime import Bundle

__all__ = ["LORA_ARGS", "MAIN_GRAD_ARGS", "MoEConfig", "MoEConfigFields",
           "ROUTINGS", "check_main_grad", "entry_runs_fp8", "moe_kernel"]

ROUTINGS = ("softmax_then_topk", "topk_then_softmax")
#: The adapters' kernel arguments (moe_kernel's, with lora_rank), in order.
LORA_ARGS = ("gate_up_lora_a", "gate_up_lora_b", "down_lora_a", "down_lora_b")
#: The weights whose gradients add to `.main_grad` with main_grad=True.
MAIN_GRAD_ARGS = ("w_gate_up", "w_down")
#: How a block's FP8 entries get their weights' FP8 copies: as arguments
#: (moe-fp8-recipe weights=arguments), made by `<entry>_fp8_weights`; for
#: frozen weights once per version (moec.torch's cache), not every call.
BLOCK_FP8_WEIGHTS = "arguments"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_main_grad(entry, name: str, first_weight: str, main_grad: bool,
                    fix: str) -> None:
    """ValueError unless the gradient entry `name` of a given bundle was
    compiled with main gradients exactly when the layer has `main_grad`
    (its inputs then hold `<first_weight>_main_grad`)."""
    accumulates = any(b.name == first_weight + "_main_grad"
                      for b in entry.inputs)
    if accumulates != main_grad:
        raise ValueError(
            f"'bundle': its {name} was compiled "
            f"{'with' if accumulates else 'without'} main gradients, the "
            f"block has main_grad={main_grad}: {fix}")


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """One sparse MoE block (Mixtral / Qwen3 / OLMoE / DeepSeek-V3 style),
    checked when made: a ValueError names the argument and what to pass.

    Sizes: `hidden_size` H, `intermediate_size` I (per expert),
    `num_experts` E, `top_k`. Routing: `routing="softmax_then_topk"` with
    `norm_topk_prob` is Qwen3 (OLMoE without renormalization),
    `"topk_then_softmax"` Mixtral; DeepSeek-V3's router (moec.ep only):
    `scoring="sigmoid"`, `selection_bias`, `num_groups`, `topk_groups`,
    `scaling_factor`. `dtype` of the weights and tokens: "bf16", "f16" or
    "f32" (torch dtypes and numpy names are accepted and stored by moec
    name). LoRA: `lora_rank` r > 0 adds an adapter per expert to both
    projections, scaled by `lora_alpha / r` (default alpha: r). Training:
    `save` (what the forward keeps for the backward: "all", "matmuls" or
    "inputs") and `main_grad` (the expert weights' gradients add to f32
    `.main_grad`). `fp8="blockwise"`: the expert matmuls of the forward and
    the backward run in FP8 (Kernel.grad's `fp8`, compiler pass
    moe-fp8-recipe: e4m3 with 1x128 activation and 128x128 weight block
    scales); the router, the combine and the results keep `dtype`. With
    LoRA the frozen base matmuls run in FP8 and the adapters' products in
    `dtype`. `keep_fp8_weights=True` (with `fp8`, moec.torch.MoE): weights
    that train keep their FP8 copies too, until they change or the next
    torch.optim step, so gradient accumulation's later micro-batches
    quantize nothing; frozen weights always keep theirs.
    `tile`: matmul tile fields replacing the cost model's ({"m", "n", "k",
    "threads"}; stored as sorted pairs, so the config is hashable).

        config = moec.MoEConfig(2048, 768, 128, 8, lora_rank=16)
        block = moec.torch.MoE(config=config)
    """

    hidden_size: int
    intermediate_size: int
    num_experts: int
    top_k: int
    norm_topk_prob: bool = True
    routing: str = "softmax_then_topk"
    scoring: str = "softmax"
    selection_bias: bool = False
    num_groups: Optional[int] = None
    topk_groups: Optional[int] = None
    scaling_factor: float = 1.0
    dtype: str = "bf16"
    lora_rank: int = 0
    lora_alpha: Optional[float] = None
    save: str = "all"
    main_grad: bool = False
    fp8: Optional[str] = None
    keep_fp8_weights: bool = False
    tile: Optional[tuple] = None

    def __post_init__(self):
        set_ = object.__setattr__
        for name in ("hidden_size", "intermediate_size", "num_experts",
                     "top_k"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ValueError(f"'{name}': expected a positive int, got "
                                 f"{value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"'top_k' ({self.top_k}) exceeds 'num_experts' "
                             f"({self.num_experts}): pick at most "
                             f"num_experts experts per token")
        self._check_router()
        try:
            dtype = canonical(self.dtype)
        except ValueError:
            dtype = None
        if dtype not in FLOATS:
            raise ValueError(f"'dtype': expected torch.bfloat16, "
                             f"torch.float16 or torch.float32 (or 'bf16', "
                             f"'f16', 'f32'), got {self.dtype}")
        set_(self, "dtype", dtype)
        self._check_lora()
        if self.save not in SAVE_POLICIES:
            raise ValueError(f"'save': expected one of "
                             f"{', '.join(SAVE_POLICIES)}, got {self.save!r}")
        if not isinstance(self.main_grad, bool):
            raise ValueError(f"'main_grad': expected a bool, got "
                             f"{self.main_grad!r}")
        if self.main_grad and self.lora_rank:
            raise ValueError("'main_grad': a LoRA block trains its adapters "
                             "only, whose gradients do not accumulate into "
                             "main gradients (use main_grad=False)")
        check_fp8(self.fp8)
        if not isinstance(self.keep_fp8_weights, bool):
            raise ValueError(f"'keep_fp8_weights': expected a bool, got "
                             f"{self.keep_fp8_weights!r}")
        if self.keep_fp8_weights and not self.fp8:
            raise ValueError("'keep_fp8_weights': the block keeps FP8 "
                             "weight copies only with fp8='blockwise' "
                             "(pass it, or keep_fp8_weights=False)")
        tile = self.tile
        if tile is not None and not isinstance(tile, dict):
            tile = dict(tile) if isinstance(tile, (tuple, list)) else tile
        set_(self, "tile", tuple(_tile_dict(tile).items()) or None)

    def _check_router(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"'routing': expected one of "
                             f"{', '.join(ROUTINGS)}, got {self.routing!r}")
        if not isinstance(self.norm_topk_prob, bool):
            raise ValueError(f"'norm_topk_prob': expected a bool, got "
                             f"{self.norm_topk_prob!r}")
        if self.scoring not in ("softmax", "sigmoid"):
            raise ValueError(f"'scoring': expected softmax or sigmoid, got "
                             f"{self.scoring!r}")
        if self.scoring == "sigmoid" and self.routing != "softmax_then_topk":
            raise ValueError("'routing': sigmoid scores take the top-k of "
                             "the scores (routing='softmax_then_topk')")
        groups, top = self.num_groups, self.topk_groups
        if (groups is None) != (top is None):
            raise ValueError("'num_groups' and 'topk_groups' go together: "
                             "pass both or neither")
        if groups is not None and (
                not _is_int(groups) or groups <= 0 or not _is_int(top) or
                self.num_experts % groups or not 0 < top <= groups):
            raise ValueError(f"'num_groups' ({groups}) must divide "
                             f"'num_experts' ({self.num_experts}) and "
                             f"'topk_groups' ({top}) be in [1, num_groups]")
        if (not isinstance(self.scaling_factor, (int, float))
                or isinstance(self.scaling_factor, bool)
                or not self.scaling_factor > 0):
            raise ValueError(f"'scaling_factor' must be positive, got "
                             f"{self.scaling_factor!r}")
        object.__setattr__(self, "selection_bias", bool(self.selection_bias))
        object.__setattr__(self, "scaling_factor", float(self.scaling_factor))

    def _check_lora(self) -> None:
        rank, alpha = self.lora_rank, self.lora_alpha
        if not _is_int(rank) or rank < 0:
            raise ValueError(f"'lora_rank': expected an int >= 0 (0: no "
                             f"LoRA), got {rank!r}")
        if alpha is not None and not rank:
            raise ValueError("'lora_alpha' needs 'lora_rank' > 0 (set "
                             "lora_rank, or leave lora_alpha out)")
        if alpha is not None and not (
                isinstance(alpha, (int, float)) and
                not isinstance(alpha, bool) and alpha > 0):
            raise ValueError(f"'lora_alpha': expected a positive number, got "
                             f"{alpha!r}")

    @classmethod
    def of(cls, config: Optional["MoEConfig"] = None,
           sizes: Sequence = (), **options) -> "MoEConfig":
        """The config a keyword constructor describes: `config` with the
        given sizes (hidden_size, intermediate_size, num_experts, top_k;
        None: not given) and options replaced, or a new one from them."""
        names = ("hidden_size", "intermediate_size", "num_experts", "top_k")
        given = {n: v for n, v in zip(names, sizes) if v is not None}
        if config is None:
            missing = [n for n in names if n not in given and
                       n not in options]
            if missing:
                raise TypeError(f"give 'config' (a moec.MoEConfig) or the "
                                f"sizes: missing {', '.join(missing)}")
            return cls(**given, **options)
        if not isinstance(config, cls):
            raise TypeError(f"'config': expected a moec.MoEConfig, got "
                            f"{type(config).__name__}")
        return dataclasses.replace(config, **given, **options) \
            if given or options else config

    def replace(self, **changes) -> "MoEConfig":
        """A copy with `changes` (checked again)."""
        return dataclasses.replace(self, **changes)

    @property
    def lora_scaling(self) -> float:
        """The adapters' scale, lora_alpha / lora_rank (1.0 without LoRA)."""
        if not self.lora_rank:
            return 1.0
        alpha = self.lora_alpha if self.lora_alpha is not None \
            else self.lora_rank
        return float(alpha) / self.lora_rank

    @property
    def tile_dict(self) -> Optional[dict]:
        """`tile` as moec.compile takes it (None: the cost model's)."""
        return dict(self.tile) if self.tile else None

    @property
    def router(self) -> tuple:
        """The router options beyond routing and norm_topk_prob, as
        hashable (name, value) pairs (moec.ep's kernels take them)."""
        return (("scoring", self.scoring),
                ("selection_bias", self.selection_bias),
                ("num_groups", self.num_groups),
                ("topk_groups", self.topk_groups),
                ("scaling_factor", self.scaling_factor))

    def kernel(self) -> Kernel:
        """The forward kernel of a block of this config (moe_kernel's), as
        traced: in `dtype` (forward_source applies `fp8`)."""
        return _kernel(self, self.lora_scaling)

    def forward_source(self, kernel: Optional[Kernel] = None):
        """What compiles to the inference entry moe_block: `kernel` (default:
        self.kernel()), or with `fp8` kernel.fp8(fp8)."""
        kernel = kernel or self.kernel()
        return (kernel.fp8(self.fp8, BLOCK_FP8_WEIGHTS) if self.fp8
                else kernel)

    def gradient(self, kernel: Optional[Kernel] = None) -> Gradient:
        """The derived forward-with-saves and backward of a block of this
        config (of `kernel`, its forward, when given): with respect to x
        and the weights, or with LoRA to x and the adapters (the router and
        base weights frozen); with main_grad, the expert weights' gradients
        add to main gradients."""
        kernel = kernel or self.kernel()
        wrt = ["x", *LORA_ARGS] if self.lora_rank else None
        return kernel.grad(wrt=wrt, save=self.save,
                           accumulate=MAIN_GRAD_ARGS if self.main_grad
                           else (), fp8=self.fp8,
                           fp8_weights=BLOCK_FP8_WEIGHTS)

    def compile(self, target: Union[str, Sequence[str], None] = None,
                training: bool = True, **kwargs) -> Bundle:
        """The bundle a block of this config runs from: `moe_block` and,
        with `training`, `moe_block_fwd` and `moe_block_grad`: the entries
        moec.torch.MoE(config=..., bundle=...) looks for. `target`: as
        moec.compile's (default: this process's device, moec.target_for()).
        `kwargs`: as moec.compile's (the config's tile is used)."""
        kernel = self.kernel()
        source = (self.gradient(kernel) if training
                  else self.forward_source(kernel))
        return compile(source, target, self.tile_dict, **kwargs)

    def check_bundle(self, bundle: Bundle, target: Optional[str] = None,
                     training: bool = False,
                     fix: str = "write it with block.save_bundle(path)"
                     ) -> None:
        """A ValueError naming what differs unless `bundle` holds the
        entries a block of this config runs: `moe_block` (with `training`,
        also `moe_block_fwd` and `moe_block_grad`) for `target`, taking the
        config's sizes, dtype and LoRA adapters; with `training`, the
        backward with the config's main gradients and returning the
        gradients it needs. `target` None: the MoE block entries the bundle
        has, for each of its targets, their inputs only (as a bundle is
        given, before the device is known). `fix`: what the message tells
        the user to do. FP8 or not is checked from the entries' ops. Not
        seen in a bundle's signatures, so not checked: routing,
        norm_topk_prob, lora_alpha, tile."""
        targets = [target] if target is not None else bundle.targets
        have = ", ".join(f"{e.name} [{e.target}]" for e in bundle.entries)
        names = ["moe_block"] + (["moe_block_fwd", "moe_block_grad"]
                                 if training else [])
        if target is None:  # as given: check the entries it has
            names = [n for n in ("moe_block", "moe_block_fwd",
                                 "moe_block_grad")
                     if any(e.name == n for e in bundle.entries)]
            if not names:
                raise ValueError(
                    f"'bundle': it holds none of the MoE block's entries "
                    f"(moe_block, moe_block_fwd, moe_block_grad; it has: "
                    f"{have}): {fix}")
        specs = list(self.kernel().specs.items())
        for t in targets:
            for name in names:
                found = [e for e in bundle.entries
                         if e.name == name and e.target == t]
                if not found:
                    why = (" (a bundle compiled with training=False)"
                           if name != "moe_block" and training else "")
                    raise ValueError(
                        f"'bundle': it has no {name} for target {t!r}{why} "
                        f"(it has: {have}): {fix.replace('(path)', _for(t))}")
                entry = found[0]
                quantizer = fp8_weights_entry(bundle, name, t)
                self._check_inputs(entry, specs, fix, len(quantizer.outputs)
                                   if quantizer else 0)
                self._check_fp8(entry, fix)
                if name == "moe_block_grad" and training:
                    self._check_backward(entry, fix)

    def _check_inputs(self, entry, specs: list, fix: str,
                      fp8_copies: int = 0) -> None:
        """The entry's first inputs are the block's (x, the weights, the
        adapters), of its sizes and dtype; `fp8_copies` more follow where
        the bundle makes the FP8 weight copies the entry takes."""
        adapters = [b.name for b in entry.inputs if b.name in LORA_ARGS]
        if bool(adapters) != bool(self.lora_rank):
            raise ValueError(
                f"'bundle': its {entry.name} [{entry.target}] takes "
                + (f"LoRA adapters ({', '.join(adapters)}), the block has "
                   f"none (lora_rank=0)" if adapters else
                   f"no LoRA adapters, the block has "
                   f"lora_rank={self.lora_rank}")
                + f": {fix}")
        count = len(entry.inputs) - fp8_copies
        if count < len(specs) or (entry.name != "moe_block_grad"
                                  and count != len(specs)):
            raise ValueError(
                f"'bundle': its {entry.name} [{entry.target}] takes {count} "
                f"inputs, the block passes {len(specs)} "
                f"({', '.join(n for n, _ in specs)}): {fix}")
        for (arg, spec), got in zip(specs, entry.inputs):
            want = (tuple(str(d) for d in spec.shape), spec.dtype)
            if (tuple(got.dims), got.dtype) != want:
                raise ValueError(
                    f"'bundle': its {entry.name} [{entry.target}] takes "
                    f"{arg} as [{', '.join(got.dims)}] {got.dtype}, the "
                    f"block's {arg} is [{', '.join(want[0])}] {want[1]} "
                    f"(hidden_size={self.hidden_size}, intermediate_size="
                    f"{self.intermediate_size}, num_experts="
                    f"{self.num_experts}, lora_rank={self.lora_rank}, "
                    f"dtype={self.dtype}): {fix}")

    def _check_fp8(self, entry, fix: str) -> None:
        """The entry's expert matmuls are FP8 exactly when the config has
        `fp8` (the recipe's quantizes are in its ops)."""
        quantizes = entry_runs_fp8(entry)
        if quantizes != bool(self.fp8):
            runs = "FP8" if quantizes else self.dtype
            raise ValueError(
                f"'bundle': its {entry.name} [{entry.target}] runs its "
                f"expert matmuls in {runs}, the block has fp8={self.fp8!r}: "
                f"{fix}")

    def _check_backward(self, backward, fix: str) -> None:
        """moe_block_grad has the config's main gradients and returns the
        gradients it needs (of x and the weights; with LoRA, of x and the
        adapters)."""
        check_main_grad(backward, "moe_block_grad", MAIN_GRAD_ARGS[0],
                        self.main_grad, fix)
        lora = self.lora_rank
        wanted = 1 + len(LORA_ARGS) if lora else 4
        if len(backward.outputs) != wanted:
            what = ("x and the 4 adapters" if lora
                    else "x, the router and both expert weights")
            raise ValueError(
                f"'bundle': its moe_block_grad returns "
                f"{len(backward.outputs)} gradients, a block with "
                f"lora_rank={lora} needs {wanted} ({what}): {fix}")

    @property
    def default_router(self) -> bool:
        """Whether the router is softmax scoring without groups or bias
        (the one moec.torch.MoE's kernel has)."""
        return self.router == MoEConfig(1, 1, 1, 1).router


def entry_runs_fp8(entry) -> bool:
    """Whether a compiled entry quantizes to FP8 (moe-fp8-recipe's output,
    as Kernel.fp8 and Kernel.grad(fp8=...) compile)."""
    return any(op["name"] == "moe.quantize" for op in entry.ref_ops)


def moe_kernel(hidden_size: int, intermediate_size: int, num_experts: int,
               top_k: int, *, norm_topk_prob: bool = True,
               routing: str = "softmax_then_topk",
               dtype="bf16", lora_rank: int = 0,
               lora_scaling: float = 1.0) -> Kernel:
    """The moec kernel of one MoE block forward (Mixtral / Qwen3 style) for
    these sizes: router, top-k, sort, gathered gate_up + SwiGLU, down, combine.

    `lora_rank` r > 0 adds a LoRA adapter per expert to both projections,
    scaled by `lora_scaling`, as four more arguments: `gate_up_lora_a`
    [E*r, H], `gate_up_lora_b` [2I, E*r], `down_lora_a` [E*r, I] and
    `down_lora_b` [H, E*r] (expert e's A is rows e*r..e*r+r of A, its B
    columns e*r..e*r+r of B). The arguments are checked as MoEConfig's.
    """
    config = MoEConfig(hidden_size, intermediate_size, num_experts, top_k,
                       norm_topk_prob=norm_topk_prob, routing=routing,
                       dtype=dtype, lora_rank=lora_rank)
    return _kernel(config, lora_scaling)


def _kernel(config: MoEConfig, lora_scaling: float) -> Kernel:
    H, I, E = config.hidden_size, config.intermediate_size, config.num_experts
    top_k, routing, dt = config.top_k, config.routing, config.dtype
    renormalize = config.norm_topk_prob and routing == "softmax_then_topk"
    r = config.lora_rank

    def experts(x, gate_w, w_gate_up, w_down, gate_up_lora=None,
                down_lora=None):
        logits = ops.matmul(x, gate_w, transpose_rhs=True)
        weights, ids = ops.router_topk(logits, k=top_k, order=routing,
                                       renormalize=renormalize)
        _, slots, offsets = ops.sort_by_expert(ids, E)
        rows = ops.permute(x, slots, offsets, k=top_k)
        h = ops.grouped_matmul(rows, w_gate_up, offsets, transpose_rhs=True,
                               lora=gate_up_lora, lora_scaling=lora_scaling)
        down = ops.grouped_matmul(ops.swiglu(h), w_down, offsets,
                                  transpose_rhs=True, lora=down_lora,
                                  lora_scaling=lora_scaling)
        return ops.unpermute(down, slots, offsets, k=top_k, weights=weights)

    def moe_block(x, gate_w, w_gate_up, w_down):
        return experts(x, gate_w, w_gate_up, w_down)

    def moe_block_lora(x, gate_w, w_gate_up, w_down, gate_up_lora_a,
                       gate_up_lora_b, down_lora_a, down_lora_b):
        return experts(x, gate_w, w_gate_up, w_down,
                       (gate_up_lora_a, gate_up_lora_b),
                       (down_lora_a, down_lora_b))

    signature = {"x": Tensor["T", H, dt], "gate_w": Tensor[E, H, dt],
                 "w_gate_up": Tensor[E, 2 * I, H, dt],
                 "w_down": Tensor[E, H, I, dt]}
    if not r:
        return Kernel(moe_block, name="moe_block", signature=signature)
    signature.update({"gate_up_lora_a": Tensor[E * r, H, dt],
                      "gate_up_lora_b": Tensor[2 * I, E * r, dt],
                      "down_lora_a": Tensor[E * r, I, dt],
                      "down_lora_b": Tensor[H, E * r, dt]})
    return Kernel(moe_block_lora, name="moe_block", signature=signature)


def _for(target: str) -> str:
    """The arguments of block.save_bundle that write `target`'s entries."""
    return f"(path, target={target!r})"


class MoEConfigFields:
    """A layer's MoEConfig fields as read-only attributes (the layer holds
    it as `self.config`): moec.torch.MoE and moec.ep.ExpertParallelMoE
    share them, and moec.torch.hf and users read them."""
    hidden_size = property(lambda self: self.config.hidden_size)
    intermediate_size = property(lambda self: self.config.intermediate_size)
    num_experts = property(lambda self: self.config.num_experts)
    top_k = property(lambda self: self.config.top_k)
    norm_topk_prob = property(lambda self: self.config.norm_topk_prob)
    routing = property(lambda self: self.config.routing)
    save = property(lambda self: self.config.save)
    main_grad = property(lambda self: self.config.main_grad)
    fp8 = property(lambda self: self.config.fp8)
    keep_fp8_weights = property(lambda self: self.config.keep_fp8_weights)
    tile = property(lambda self: self.config.tile_dict)
