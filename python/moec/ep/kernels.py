"""The kernels of moec.ep's expert-parallel layer (ep_kernels) and how the
layer runs them: one program (module, derived backwards, bundles) per
configuration, and each kernel under autograd (_KernelFunction)."""

from __future__ import annotations

from typing import Optional

import torch

from ..compiler import Kernel, compile as _compile, fp8_recipe, target_for
from ..compiler._grad import saved_results_of
from ..language import Tensor, ops
from ..language._dtypes import canonical
from ..layers import MoEConfig, check_main_grad, entry_runs_fp8
from ..runtime import Entry, _native
from ..runtime._args import is_positive_int

__all__ = [
    "DEDUP_KERNELS", "EXPERT_KERNELS", "KERNELS", "MAIN_GRAD_WEIGHTS",
    "ep_kernels", "expert_groups",
]

#: The three kernels of one layer and the arguments each differentiates.
KERNELS = ("ep_dispatch", "ep_experts", "ep_combine")
_WRT = {"ep_dispatch": ("x", "gate_w"),
        "ep_experts": ("rows", "w_gate_up", "w_down"),
        "ep_combine": ("rows", "weights"),
        # dedup=True's (ep_sort_received has no float results)
        "ep_route": ("x", "gate_w"), "ep_send_once": ("x", "pairs"),
        "ep_experts_received": ("rows", "weights", "w_gate_up", "w_down"),
        "ep_sum_ranks": ("rows",)}
#: The kernels whose weight gradients go to main gradients (main_grad).
EXPERT_KERNELS = ("ep_experts", "ep_experts_received")
#: With main gradients: the weights ep_experts_grad adds to them.
MAIN_GRAD_WEIGHTS = ("w_gate_up", "w_down")


def ep_kernels(hidden_size: int, intermediate_size: int, num_experts: int,
               top_k: int, world_size: int, *, norm_topk_prob: bool = True,
               routing: str = "softmax_then_topk", dtype="bf16",
               scoring: str = "softmax", selection_bias: bool = False,
               num_groups: Optional[int] = None,
               topk_groups: Optional[int] = None,
               scaling_factor: float = 1.0, expert_chunks=1,
               dedup: bool = False) -> list:
    """The three moec kernels of an expert-parallel MoE layer over
    `world_size` ranks: [ep_dispatch, ep_experts, ep_combine], and with
    `expert_chunks` (ExpertParallelMoE's) one ep_experts_<n> per group size
    n: ep_experts on n of the local experts; with `dedup`, DEDUP_KERNELS
    (each token sent once per destination rank, moec.ep.dedup). The
    router:
    `routing` and `norm_topk_prob` as moec.torch.MoE (Qwen3, Mixtral,
    OLMoE); DeepSeek-V3's with `scoring="sigmoid"`, `selection_bias=True`
    (ep_dispatch then takes `bias` [E] f32, which only selects),
    `num_groups`, `topk_groups` and `scaling_factor` (moec.ops.router_topk).
    """
    H, I, E, k, dt = (hidden_size, intermediate_size, num_experts, top_k,
                      canonical(dtype))
    if E % world_size:
        raise ValueError(f"'num_experts' ({E}) must be a multiple of the "
                         f"world size ({world_size})")
    local = E // world_size
    softmax = scoring == "softmax"
    router = dict(k=k, order=routing, scoring=scoring,
                  renormalize=norm_topk_prob and (
                      not softmax or routing == "softmax_then_topk"),
                  num_groups=num_groups, topk_groups=topk_groups,
                  scaling_factor=scaling_factor)

    def dispatch(x, gate_w, bias=None):
        logits = ops.matmul(x, gate_w, transpose_rhs=True)
        weights, ids = ops.router_topk(logits, bias=bias, **router)
        _, slots, offsets, positions = ops.sort_by_expert(ids, E,
                                                          positions=True)
        send = ops.permute(x, slots, offsets, k=k, positions=positions)
        return send, weights, slots, offsets, positions

    dispatch_signature = {"x": Tensor["T", H, dt], "gate_w": Tensor[E, H, dt]}
    if selection_bias:
        dispatch_signature["bias"] = Tensor[E, "f32"]

        def ep_dispatch(x, gate_w, bias):
            return dispatch(x, gate_w, bias)
    else:
        def ep_dispatch(x, gate_w):
            return dispatch(x, gate_w)

    def experts(rows, ids, w_gate_up, w_down, count):
        # One "slot" per received row (k = 1); the positions size the
        # unweighted combine's output (one row per received row).
        _, slots, offsets, positions = ops.sort_by_expert(ids, count,
                                                          positions=True)
        grouped = ops.permute(rows, slots, offsets, k=1, positions=positions)
        h = ops.grouped_matmul(grouped, w_gate_up, offsets, transpose_rhs=True)
        down = ops.grouped_matmul(ops.swiglu(h), w_down, offsets,
                                  transpose_rhs=True)
        return ops.unpermute(down, slots, offsets, k=1, positions=positions)

    def ep_experts(rows, ids, w_gate_up, w_down):
        return experts(rows, ids, w_gate_up, w_down, local)

    def experts_signature(count):
        return {"rows": Tensor["T", H, dt], "ids": Tensor["T", 1, "i32"],
                "w_gate_up": Tensor[count, 2 * I, H, dt],
                "w_down": Tensor[count, H, I, dt]}

    groups = expert_groups(local, expert_chunks)

    def ep_combine(rows, weights, slots, offsets, positions):
        return ops.unpermute(rows, slots, offsets, k=k, weights=weights,
                             positions=positions)

    i32, f32 = "i32", "f32"
    kernels = [
        Kernel(ep_dispatch, signature=dispatch_signature),
        Kernel(ep_experts, signature=experts_signature(local)),
        Kernel(ep_combine, signature={
            "rows": Tensor["M", H, dt], "weights": Tensor["T", k, f32],
            "slots": Tensor["M", i32], "offsets": Tensor[E, i32],
            "positions": Tensor["M", i32]}),
    ]
    def part(count):
        def ep_experts_part(rows, ids, w_gate_up, w_down):
            return experts(rows, ids, w_gate_up, w_down, count)
        return ep_experts_part

    for count in sorted(set(groups) - {local}):
        kernels.append(Kernel(part(count), name=f"ep_experts_{count}",
                              signature=experts_signature(count)))
    if dedup:
        kernels += _dedup_kernels(dispatch_signature, router, H, I, k, dt,
                                  world_size, local)
    return kernels


#: The kernels of the deduplicated forward (ExpertParallelMoE dedup=True).
DEDUP_KERNELS = ("ep_route", "ep_send_once", "ep_sort_received",
                 "ep_experts_received", "ep_sum_ranks")


def _dedup_kernels(dispatch_signature: dict, router: dict, H: int, I: int,
                   k: int, dt: str, world: int, local: int) -> list:
    """DEDUP_KERNELS. Each sort below has buckets its consumers are not
    given, sorted last: the rows nobody sends (ep_send_once's bucket W),
    the received pairs of other ranks' experts (ep_sort_received's buckets
    past the local ones). The caller passes the offsets without them, and
    rows at or past offsets[E-1] are padding to every grouped op (permute,
    grouped_matmul and unpermute build their row map from the slots of the
    rows before it). ep_experts_received gets only the slots before it:
    the grouped matmuls would write zeros into the rows past it."""
    if world > 64:  # dest's columns are sort_by_expert's k
        raise ValueError(f"'dedup': at most 64 ranks, got a world size of "
                         f"{world}")
    i32, f32 = "i32", "f32"

    def route(x, gate_w, bias=None):
        logits = ops.matmul(x, gate_w, transpose_rhs=True)
        return ops.router_topk(logits, bias=bias, **router)

    if "bias" in dispatch_signature:
        def ep_route(x, gate_w, bias):
            return route(x, gate_w, bias)
    else:
        def ep_route(x, gate_w):
            return route(x, gate_w)

    def ep_send_once(x, dest, pairs):
        # dest [T, W]: d where token t goes to rank d, else W (not sent).
        # Each row carries its token's `pairs` [T, 2k] along: the k experts
        # (as f32, exact below 2^24) and their weights.
        _, slots, offsets, positions = ops.sort_by_expert(dest, world + 1,
                                                          positions=True)
        rows = [ops.permute(v, slots, offsets, k=world, positions=positions)
                for v in (x, pairs)]
        return (*rows, slots, offsets)

    def ep_sort_received(ids):
        # ids [N, k]: the receiving rank's experts first (0 .. local - 1),
        # then the others'.
        _, slots, offsets = ops.sort_by_expert(ids, world * local)
        return slots, offsets

    def ep_experts_received(rows, slots, offsets, weights, w_gate_up,
                            w_down):
        # Each received row's local experts, weighted and summed: one row
        # back per row received.
        grouped = ops.permute(rows, slots, offsets, k=k)
        h = ops.grouped_matmul(grouped, w_gate_up, offsets, transpose_rhs=True)
        down = ops.grouped_matmul(ops.swiglu(h), w_down, offsets,
                                  transpose_rhs=True)
        return ops.unpermute(down, slots, offsets, k=k, weights=weights)

    def ep_sum_ranks(rows, slots, offsets, ones):
        # Each token's partial sums from its ranks (`ones` [T, W] f32 gives
        # the token count).
        return ops.unpermute(rows, slots, offsets, k=world, weights=ones)

    return [
        Kernel(ep_route, signature=dispatch_signature),
        Kernel(ep_send_once, signature={"x": Tensor["T", H, dt],
                                        "dest": Tensor["T", world, i32],
                                        "pairs": Tensor["T", 2 * k, f32]}),
        Kernel(ep_sort_received, signature={"ids": Tensor["N", k, i32]}),
        Kernel(ep_experts_received, signature={
            # The received rows are the token count T (the backward's
            # gather gradient is sized by it).
            "rows": Tensor["T", H, dt], "slots": Tensor["M", i32],
            "offsets": Tensor[local, i32], "weights": Tensor["T", k, f32],
            "w_gate_up": Tensor[local, 2 * I, H, dt],
            "w_down": Tensor[local, H, I, dt]}),
        Kernel(ep_sum_ranks, signature={
            "rows": Tensor["R", H, dt], "slots": Tensor["S", i32],
            "offsets": Tensor[world, i32], "ones": Tensor["T", world, f32]}),
    ]


def expert_groups(local: int, expert_chunks) -> tuple:
    """The sizes of the groups ExpertParallelMoE's `expert_chunks` splits a
    rank's `local` experts into: C equal ones for an int C, else the given
    sizes (checked: a ValueError naming the argument)."""
    if is_positive_int(expert_chunks):
        if local % expert_chunks:
            raise ValueError(f"'expert_chunks' ({expert_chunks}) must divide "
                             f"the {local} experts of a rank")
        return (local // expert_chunks,) * expert_chunks
    if (not isinstance(expert_chunks, (list, tuple)) or not expert_chunks or
            not all(is_positive_int(n) for n in expert_chunks)):
        raise ValueError(f"'expert_chunks': expected a positive int or a "
                         f"sequence of group sizes, got {expert_chunks!r}")
    if sum(expert_chunks) != local:
        raise ValueError(f"'expert_chunks' {list(expert_chunks)}: the group "
                         f"sizes must add up to the {local} experts of a "
                         f"rank")
    return tuple(expert_chunks)


class _Program:
    """The kernels of one configuration and their derived backwards, in one
    module (and so one bundle per target), shared by the blocks of that
    configuration."""

    def __init__(self, config: MoEConfig, world_size: int, expert_chunks=1,
                 dedup: bool = False, bundle=None,
                 sm_count: Optional[int] = None):
        self.kernels = {k.name: k for k in ep_kernels(
            config.hidden_size, config.intermediate_size, config.num_experts,
            config.top_k, world_size, norm_topk_prob=config.norm_topk_prob,
            routing=config.routing, dtype=config.dtype,
            expert_chunks=expert_chunks, dedup=dedup, **dict(config.router))}
        self.save, self.tile = config.save, config.tile_dict
        self.sm_count, self.main_grad = sm_count, config.main_grad
        self.fp8 = config.fp8
        self._given = bundle
        self._module: Optional[str] = None
        self._bundles: dict = {}
        self._saved: dict = {}
        self._checked: set = set()  # (entry, target) of the given bundle

    @property
    def module(self) -> str:
        """The kernels (KERNELS) and each one's _fwd / _grad
        (moe-autodiff), MLIR text."""
        if self._module is None:
            compiler = _native.compiler()
            text = "".join(k.module for k in self.kernels.values())
            for name, kernel in self.kernels.items():
                if name not in _WRT:  # ep_experts_<n>, ep_sort_received
                    continue
                wrt = [kernel.arg_names.index(a) for a in _WRT[name]]
                accumulate = ([kernel.arg_names.index(a)
                               for a in MAIN_GRAD_WEIGHTS]
                              if self.main_grad and name in EXPERT_KERNELS
                              else [])
                text = compiler.autodiff(text, name, wrt, self.save,
                                         accumulate)
            if self.fp8:  # the experts' matmuls, forward and backward
                text = fp8_recipe(text, self.fp8, "moec.ep")
            self._module = text
        return self._module

    def entry(self, name: str, device: torch.device) -> Entry:
        """Entry `name` for the device: from the given bundle when it holds
        it, else compiled (the whole module, once per target)."""
        target = target_for(device)
        given = self._given
        if given is not None and any(e.name == name and e.target == target
                                     for e in given.entries):
            entry = given.entry(name, target)
            if (name, target) not in self._checked:
                self._check_given(entry, name, target)
                self._checked.add((name, target))
            return entry
        if target not in self._bundles:
            self._bundles[target] = _compile(self.module, target, self.tile,
                                             sm_count=self.sm_count)
        return self._bundles[target].entry(name, target)

    def _check_given(self, entry: Entry, name: str, target: str) -> None:
        """A given bundle's entry has the layer's FP8 and main gradients
        (checked once per entry: forward calls look entries up again)."""
        # Every ep_experts* kernel has the expert matmuls.
        if (name.startswith("ep_experts")
                and entry_runs_fp8(entry) != bool(self.fp8)):
            raise ValueError(
                f"'bundle': its {name} [{target}] runs the expert "
                f"matmuls {'in FP8' if not self.fp8 else 'unquantized'}"
                f", the layer has fp8={self.fp8!r}: compile "
                f"ep_module(..., fp8={self.fp8!r})")
        if name in [n + "_grad" for n in EXPERT_KERNELS]:
            check_main_grad(entry, name, MAIN_GRAD_WEIGHTS[0],
                            self.main_grad,
                            f"compile ep_module(..., "
                            f"main_grad={self.main_grad})")

    def saved_results(self, name: str, device: torch.device) -> list:
        """Which `name_fwd` results `name_grad` takes (from the compiled
        entry, so a bundle-only machine knows it too)."""
        key = (name, device.type)
        if key not in self._saved:
            self._saved[key] = saved_results_of(
                self.entry(name + "_grad", device))
        return self._saved[key]


# Blocks reach their program through an index (a module then holds no
# compiled bundle itself: state_dict, deepcopy and pickling stay plain).
_PROGRAMS: list = []
_PROGRAM_INDEX: dict = {}


def _program_index(config: MoEConfig, world_size: int, expert_chunks,
                   dedup: bool, bundle, sm_count: Optional[int]) -> int:
    key = (config, world_size, expert_chunks, dedup,
           None if bundle is None else id(bundle), sm_count)
    if key not in _PROGRAM_INDEX:
        _PROGRAM_INDEX[key] = len(_PROGRAMS)
        _PROGRAMS.append(_Program(config, world_size, expert_chunks, dedup,
                                  bundle, sm_count))
    return _PROGRAM_INDEX[key]


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


class _KernelFunction(torch.autograd.Function):
    """One kernel of the layer under autograd: the forward runs `name_fwd`
    and keeps what `name_grad` reads; the backward runs `name_grad` on the
    gradients of the float results and returns those of `_WRT[name]`.
    `main_grads` (ep_experts of a main_grad program): the f32 main
    gradients of MAIN_GRAD_WEIGHTS, which the backward adds their
    gradients to in place (those weights get no .grad)."""

    @staticmethod
    def forward(ctx, program, name, main_grads, *args):
        device = args[0].device
        count = len(program.entry(name, device).outputs)
        out = _outputs(program.entry(name + "_fwd", device)(
            *args, check_values=False))
        saved = [out[i] for i in program.saved_results(name, device)]
        out = out[:count]
        ctx.program, ctx.name, ctx.arg_count = program, name, len(args)
        # Not saved tensors: another micro-batch's backward may update them
        # in between (a saved tensor's version check would fail).
        ctx.main_grads = main_grads
        ctx.float_results = [i for i, o in enumerate(out)
                             if o.is_floating_point()]
        ctx.mark_non_differentiable(
            *[o for o in out if not o.is_floating_point()])
        ctx.save_for_backward(*args, *saved)
        return out

    @staticmethod
    def backward(ctx, *grads):
        values = ctx.saved_tensors
        args, saved = values[:ctx.arg_count], values[ctx.arg_count:]
        kernel = ctx.program.kernels[ctx.name]
        grads = [_aligned(grads[i].contiguous()) for i in ctx.float_results]
        entry = ctx.program.entry(ctx.name + "_grad", args[0].device)
        out, accumulated = None, ()
        if ctx.main_grads:
            # Each main gradient is its sum's output: the kernel reads an
            # element before it writes it.
            mains = dict(zip(MAIN_GRAD_WEIGHTS, ctx.main_grads))
            out = [mains.get(arg) for arg in _WRT[ctx.name]]
            accumulated = MAIN_GRAD_WEIGHTS
        out = _outputs(entry(*args, *saved, *grads, *ctx.main_grads, out=out,
                             check_values=False))
        result = [None] * len(args)
        for arg, grad in zip(_WRT[ctx.name], out):
            if arg not in accumulated:
                result[kernel.arg_names.index(arg)] = grad
        return (None, None, None, *result)


def _aligned(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, or a copy where it starts off the 16-byte boundary the
    kernels need (a gradient can be a view into a wider one: that of one
    row of a concatenation's columns)."""
    return tensor if tensor.data_ptr() % 16 == 0 else tensor.clone()


def _call(program: _Program, name: str, args, training: bool,
          main_grads: tuple = ()) -> tuple:
    """The results of kernel `name` on `args`, under autograd if training
    (with `main_grads`: see _KernelFunction)."""
    if training:
        return _KernelFunction.apply(program, name, tuple(main_grads), *args)
    return _outputs(program.entry(name, args[0].device)(*args,
                                                        check_values=False))
