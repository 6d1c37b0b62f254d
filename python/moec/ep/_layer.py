"""Expert parallelism: an MoE block whose experts are split across the ranks
of a torch.distributed group, moec kernels on each side of the all-to-alls.

    dist.init_process_group("nccl")            # or "gloo" on CPUs
    block = moec.ep.ExpertParallelMoE(2048, 768, num_experts=128, top_k=8,
                                      group=dist.group.WORLD).cuda()
    y = block(x)                               # x: this rank's tokens

Rank r of a group of W holds experts [r * E / W, (r + 1) * E / W) (the
global ids of the contiguous slice `block.experts`) and a replicated
router. One forward, on every rank (docs/expert_parallel.md):

1. `ep_dispatch` (one moec kernel): router matmul, top-k, sort by expert,
   and the permute that writes the send buffer. Experts are numbered rank
   by rank, so rows sorted by global expert are already grouped by
   destination rank, then by its local expert: the buffer goes out as it
   is, no second copy. The per-expert counts go through one `all_gather`
   (every rank learns how many rows it sends to and receives from each
   rank, and for which of its local experts), then the rows through
   `all_to_all_single` (uneven splits).
2. `ep_experts` (one moec kernel): the received rows, grouped by local
   expert inside the kernel (the sort's gather fused into the gate_up
   grouped matmul's prologue), gate_up + SwiGLU, down, and back to the
   received order.
3. The reverse `all_to_all_single`, then `ep_combine` (one moec kernel):
   the weighted combine of each token's k rows (the routing weights never
   leave their rank).

Backward runs the same path in reverse: each kernel's backward is derived
by moe-autodiff (Kernel.grad) and the all-to-alls exchange the gradients.
The router is replicated: each rank's `gate.weight.grad` covers its own
tokens, so sum it over the group (`dist.all_reduce`). The experts'
gradients are already complete on their rank: keep them out of a data-
parallel all-reduce (docs/expert_parallel.md).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from ..language._dtypes import canonical, to_torch
from ..layers import MoEConfig, MoEConfigFields
from ..runtime import Bundle
from ..runtime._args import is_positive_int
from ..torch import load_hf_experts, main_grads_of, zero_main_grads
from . import dedup as _ep_dedup
from . import peer as _peer
from .dedup import DEDUP_MODE
from .exchange import AllToAll, Exchange, wait
from .kernels import (DEDUP_KERNELS, _PROGRAMS, _Program, _call,
                      _program_index, expert_groups)

#: How ExpertParallelMoE moves rows between ranks (its `transport`).
TRANSPORTS = ("nccl", "copy_engine")

class ExpertParallelMoE(MoEConfigFields, nn.Module):
    """A sparse MoE block (as moec.torch.MoE) whose experts are split over
    the ranks of `group` (default: the world): this rank holds the router
    `gate` [E, H] (replicated) and its experts' `w_gate_up` [E/W, 2I, H]
    and `w_down` [E/W, H, I], global experts `self.experts`. Every rank of
    the group must call forward (and backward) together, each on its own
    tokens, any number of them (none too).

    Its configuration is a moec.MoEConfig (`block.config`), given as
    `config=` or as its fields (as moec.torch.MoE's, without LoRA):
    `routing`, `norm_topk_prob`, `dtype` (of the weights and x), `save`,
    `tile`, `main_grad`, and DeepSeek-V3's router:
    `scoring="sigmoid"`, `selection_bias=True` (a buffer
    `e_score_correction_bias` [E] f32 that only selects), `num_groups`,
    `topk_groups`, `scaling_factor`. `bundle`: a precompiled bundle of
    `ep_module(...)` with the same arguments (moec.compile of it), for a
    machine without the compiler (a launch checks shapes and dtypes, not
    router options: a bundle of another router runs that router);
    otherwise the kernels are compiled for x's device on first use
    (cached on disk).

    `chunks`: forward splits this rank's tokens into that many pieces and
    pipelines them, so that one piece's exchanges run while another's
    experts compute (the counts of all pieces still go out in one
    all_gather, with one host read). The output is the same as with
    `chunks=1`; every rank of the group must pass the same value. The
    backward runs the pieces one after another. `sm_count`: the SMs the
    persistent matmuls fill on a GPU (moec.compile's; not for a given
    bundle, which was compiled with its own): the exchanges' kernels only
    run beside them on SMs they leave free (NCCL's all-to-all takes 32 on
    four H200s, so chunks=2, sm_count=100 there; docs/expert_parallel.md
    has the measurements).

    `transport`: how the rows move. "nccl" (the default; gloo on CPUs):
    all_to_all_single. "copy_engine" (CUDA, every rank's GPU of one host
    linked by NVLink or PCIe peer access): each rank's copy engines write
    its rows straight into the receivers' torch symmetric-memory buffers
    (moec.ep.peer), so the exchanges take no SMs and run beside the grouped
    matmuls. Its barriers (one or two per exchange) take one small kernel
    each: where exchanges overlap the matmuls (`chunks`, `expert_chunks`),
    leave them an SM (`sm_count` one below the GPU's). Every rank of the
    group must pass the same value.

    `expert_chunks` (copy_engine only, not with `chunks`): the forward
    without autograd moves and computes the local experts in that many
    equal groups (it must divide E / W), or in groups of the given sizes
    (a sequence adding up to E / W: `(16, 48, 48, 16)` keeps the first
    group's exchange and the last one's return, which nothing hides,
    small), so that one group's rows travel while another's experts
    compute; unlike `chunks`, no expert's rows are split across matmuls.
    Same output as the plain layer; a forward under autograd runs the
    plain layer. A given bundle must come from
    `ep_module(..., expert_chunks=...)` with the same value.

    `main_grad=True`: as moec.torch.MoE's, this rank's experts' gradients
    are added to f32 `w_gate_up.main_grad` and `w_down.main_grad` inside
    the weight-gradient kernels (their `.grad` stays None); the router's
    gradient reaches `.grad` (all-reduce it as before). A given bundle must
    come from `ep_module(..., main_grad=True)`.

    `dedup=True`: the forward sends each token once to each rank that
    holds any of its experts (not once per expert), with its experts and
    routing weights; that rank weighs and sums the token's expert outputs
    and sends one row back (moec.ep.dedup); the backward runs the same
    exchanges reversed. For top-8 routing over two ranks that moves at
    most 2 rows per token each way instead of 8. The output and the
    gradients equal the plain layer's up to rounding (each rank's partial
    sum is rounded to the dtype before it travels). Not with `chunks` or
    `expert_chunks`. A given bundle must come from `ep_module(...,
    dedup=True)`.

    `fp8="blockwise"`: as moec.torch.MoE's, the experts' matmuls of the
    forward and the backward run in FP8 (the rows travel in `dtype`; FP8
    dispatch over the exchange is not built). A given bundle must come
    from `ep_module(..., fp8="blockwise")`.
    """

    def __init__(self, hidden_size: Optional[int] = None,
                 intermediate_size: Optional[int] = None,
                 num_experts: Optional[int] = None,
                 top_k: Optional[int] = None, *, group=None,
                 config: Optional[MoEConfig] = None, device=None,
                 bundle: Optional[Bundle] = None, chunks: int = 1,
                 sm_count: Optional[int] = None, transport: str = "nccl",
                 expert_chunks=1, dedup: bool = False, **options):
        super().__init__()
        config = MoEConfig.of(config, (hidden_size, intermediate_size,
                                       num_experts, top_k), **options)
        if config.lora_rank:
            raise ValueError("'lora_rank': ExpertParallelMoE has no LoRA "
                             "adapters (use moec.torch.MoE, or lora_rank=0)")
        _check_no_kept_fp8_weights(config)
        self.config = config
        self._join(group)
        self._check_pipelining(chunks, sm_count, transport, expert_chunks,
                               dedup, bundle)
        first = self.rank * self.local_experts
        self.experts = range(first, first + self.local_experts)
        # One program per weight dtype (a cast block runs the kernels of its
        # new type; the given bundle serves the dtype it was made for).
        self._programs = {to_torch(config.dtype): _program_index(
            config, self.world_size, self.expert_chunks, dedup, bundle,
            sm_count)}
        self._add_parameters(device)

    # The configuration's fields: MoEConfigFields, and these.
    router_options = property(lambda self: dict(self.config.router))

    def _join(self, group) -> None:
        """This rank's place in `group` and its share of the experts."""
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ExpertParallelMoE: torch.distributed is not "
                               "initialized (call init_process_group first)")
        self.group = group if group is not None else dist.group.WORLD
        self.world_size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        if self.rank < 0:
            raise ValueError("'group': this process is not a member")
        num_experts = self.config.num_experts
        if num_experts % self.world_size:
            raise ValueError(f"'num_experts' ({num_experts}) must be a "
                             f"multiple of the group's size "
                             f"({self.world_size})")
        self.local_experts = num_experts // self.world_size

    def _check_pipelining(self, chunks, sm_count, transport, expert_chunks,
                          dedup, bundle) -> None:
        """Checks and sets chunks, sm_count, transport, expert_chunks and
        dedup (a ValueError naming the argument)."""
        if not is_positive_int(chunks):
            raise ValueError(f"'chunks': expected a positive int, got "
                             f"{chunks!r}")
        self.chunks = chunks
        if transport not in TRANSPORTS:
            raise ValueError(f"'transport': expected one of "
                             f"{', '.join(TRANSPORTS)}, got {transport!r}")
        self.transport = transport
        if sm_count is not None and not is_positive_int(sm_count):
            raise ValueError(f"'sm_count': expected a positive int, got "
                             f"{sm_count!r}")
        self.sm_count = sm_count
        if isinstance(expert_chunks, list):
            expert_chunks = tuple(expert_chunks)
        self.expert_groups = expert_groups(self.local_experts, expert_chunks)
        if len(self.expert_groups) > 1:
            if transport != "copy_engine":
                raise ValueError("'expert_chunks' needs transport="
                                 "'copy_engine' (its exchanges move rows "
                                 "that all_to_all_single cannot)")
            if chunks != 1:
                raise ValueError("'expert_chunks' and 'chunks' pipeline two "
                                 "ways: pass one of them")
            missing = sorted({f"ep_experts_{n}" for n in self.expert_groups}
                             - {e.name for e in (bundle.entries if bundle
                                                 else ())})
            if bundle is not None and missing:
                raise ValueError(f"'bundle' has no {', '.join(missing)}: "
                                 f"compile ep_module(..., expert_chunks="
                                 f"{expert_chunks!r})")
        self.expert_chunks = expert_chunks
        if not isinstance(dedup, bool):
            raise ValueError(f"'dedup': expected a bool, got {dedup!r}")
        if dedup and (chunks != 1 or len(self.expert_groups) > 1):
            raise ValueError("'dedup' runs the layer whole: not with "
                             "'chunks' or 'expert_chunks'")
        if dedup and bundle is not None:
            missing = sorted(set(DEDUP_KERNELS) - {e.name for e in
                                                   bundle.entries})
            if missing:
                raise ValueError(f"'bundle' has no {', '.join(missing)}: "
                                 f"compile ep_module(..., dedup=True)")
        self.dedup = dedup

    def _add_parameters(self, device) -> None:
        """The replicated router, this rank's experts and (with a selection
        bias) DeepSeek-V3's e_score_correction_bias."""
        config = self.config
        H, I = config.hidden_size, config.intermediate_size
        factory = dict(dtype=to_torch(config.dtype), device=device)
        self.gate = nn.Linear(H, config.num_experts, bias=False, **factory)
        self.w_gate_up = nn.Parameter(torch.empty(
            self.local_experts, 2 * I, H, **factory))
        self.w_down = nn.Parameter(torch.empty(
            self.local_experts, H, I, **factory))
        nn.init.normal_(self.w_gate_up, std=H ** -0.5)
        nn.init.normal_(self.w_down, std=I ** -0.5)
        if config.selection_bias:
            # DeepSeek-V3's e_score_correction_bias: selects, not weighted,
            # not trained by gradients.
            self.register_buffer("e_score_correction_bias", torch.zeros(
                config.num_experts, dtype=torch.float32, device=device))

    @classmethod
    def from_moe(cls, block: nn.Module, group=None, **kwargs):
        """This rank's share of a whole moec.torch.MoE block (its router and
        its slice of the experts, copied)."""
        config = block.config.replace(dtype=canonical(block.w_down.dtype))
        ep = cls(group=group, config=config, device=block.w_down.device,
                 **kwargs)
        with torch.no_grad():
            ep.gate.weight.copy_(block.gate.weight)
            ep.w_gate_up.copy_(block.w_gate_up[ep.experts.start:
                                               ep.experts.stop])
            ep.w_down.copy_(block.w_down[ep.experts.start:ep.experts.stop])
        return ep

    def load_hf_state_dict(self, state_dict: dict, prefix: str = "") -> None:
        """Loads the router and this rank's experts from a Hugging Face
        block's weights (the names moec.torch.MoE.load_hf_state_dict
        takes), and DeepSeek-V3's `gate.e_score_correction_bias` with a
        selection bias."""
        load_hf_experts(self, state_dict, prefix, self.experts.start)
        if self.router_options["selection_bias"]:
            key = prefix + "gate.e_score_correction_bias"
            if key not in state_dict:
                raise KeyError(f"state_dict has no '{key}'")
            with torch.no_grad():
                self.e_score_correction_bias.copy_(state_dict[key])

    @property
    def _program(self) -> _Program:
        dtype = self.w_down.dtype
        if dtype not in self._programs:
            self._programs[dtype] = _program_index(
                self.config.replace(dtype=canonical(dtype)), self.world_size,
                self.expert_chunks, self.dedup, None, self.sm_count)
        return _PROGRAMS[self._programs[dtype]]

    def kernels(self) -> list:
        """[ep_dispatch, ep_experts, ep_combine] and, with expert_chunks,
        one ep_experts_<n> per group size, with dedup the DEDUP_KERNELS
        (moec.Kernel)."""
        return list(self._program.kernels.values())

    # -- the stages (forward runs them in turn; bench/ times each) --------

    def _training(self, tokens: torch.Tensor) -> bool:
        return torch.is_grad_enabled() and (tokens.requires_grad or any(
            p.requires_grad for p in self.parameters()))

    def route(self, tokens: torch.Tensor, training: bool) -> dict:
        """ep_dispatch on this rank's tokens [T, H]: the send buffer (rows
        in global expert order), the routing weights, slots, offsets and
        positions: the state the next steps continue."""
        args = (tokens, self.gate.weight)
        if self.router_options["selection_bias"]:
            # f32 whatever the module was cast to (the kernel's type).
            args += (self.e_score_correction_bias.float(),)
        send, weights, slots, offsets, positions = _call(
            self._program, "ep_dispatch", args, training)
        return dict(rows=send, weights=weights, slots=slots, offsets=offsets,
                    positions=positions, training=training)

    def plan(self, state: dict) -> dict:
        """Shares the per-expert row counts (one all_gather): the splits of
        both all-to-alls (read on the host, the one sync of a forward) and
        the local expert of each row this rank will receive."""
        return self.plan_pieces([state])[0]

    def plan_pieces(self, states: list) -> list:
        """plan of several routed pieces of this rank's tokens at once (one
        all_gather, one host read); every rank passes as many."""
        W, local, rank = self.world_size, self.local_experts, self.rank
        every, counts = self._gather_counts(states, mode=0)
        # [source][piece][dest]
        rows = [[[sum(d) for d in p] for p in s] for s in counts]
        experts = torch.arange(local, dtype=torch.int32,
                               device=every.device).repeat(W)
        peers, region = self._peers(every.device), 0
        for piece, state in enumerate(states):
            matrix = [row[piece] for row in rows]  # [source][dest]
            # Copy engines: one receive region per piece and direction, the
            # same offsets on every rank (all know every count).
            there, back = region, 0
            if peers is not None:
                row_bytes = math.prod(state["rows"].shape[1:]) * \
                    state["rows"].element_size()
                back = there + _peer.aligned(_peer.region_rows(matrix) *
                                             row_bytes)
                region = back + _peer.aligned(_peer.region_rows(
                    _peer.transposed(matrix)) * row_bytes)
            exchange = Exchange(matrix, rank, self.group, peers, there, back)
            state["exchange"] = exchange
            received = sum(exchange.recv_splits)
            mine = every[:, piece, rank]  # [source, local expert], on device
            # From each source, the rows of local expert 0, then 1, ... (its
            # sort order).
            state["ids"] = torch.repeat_interleave(
                experts, mine.reshape(-1).long(),
                output_size=received).view(received, 1)
            state["splits"] = (exchange.send_splits, exchange.recv_splits)
        if peers is not None:
            peers.reserve(region)
        return states

    def _gather_counts(self, states: list, mode: int) -> tuple:
        """Every rank's per-expert row counts of its routed pieces (one
        all_gather, the forward's one host read): [source, piece, dest
        rank, local expert], on device and as nested lists. `mode` (0, or
        the number of expert groups of _expert_pipelined) and the transport
        travel along: ranks that would issue different exchanges get the
        same ValueError instead of mismatched barriers."""
        counts = torch.stack([torch.diff(s["offsets"], prepend=s[
            "offsets"].new_zeros(1)) for s in states])  # [piece, expert]
        every, host = self._all_gather(counts.view(-1), mode)
        shape = (self.world_size, len(states), self.world_size,
                 self.local_experts)
        nested = [[[row[(p * self.world_size + d) * self.local_experts:
                        (p * self.world_size + d + 1) * self.local_experts]
                    for d in range(self.world_size)]
                   for p in range(len(states))] for row in host]
        return every.reshape(shape), nested

    def _all_gather(self, counts: torch.Tensor, mode: int) -> tuple:
        """Every rank's `counts` (1-D, on device; one all_gather and one
        host read): [source, count] on device and as lists. `mode` and the
        transport travel along (see _gather_counts)."""
        tag = TRANSPORTS.index(self.transport) * 1000 + mode
        sent = torch.cat([counts, counts.new_tensor([tag])])
        every = sent.new_empty(self.world_size * sent.numel())
        dist.all_gather_into_tensor(every, sent, group=self.group)
        every = every.view(self.world_size, -1)
        host = every.tolist()
        tags = [row.pop() for row in host]
        if len(set(tags)) > 1:
            raise ValueError(
                f"ExpertParallelMoE: the ranks of the group would run this "
                f"forward differently (transport, and expert groups or "
                f"dedup ({DEDUP_MODE}) where not training, per rank: "
                f"{[(TRANSPORTS[t // 1000], t % 1000) for t in tags]}); "
                f"every rank must pass the same transport, expert_chunks "
                f"and dedup and run the forward with or without autograd "
                f"alike")
        return every[:, :-1], host

    def _peers(self, device: torch.device):
        """The copy-engine transport's buffers of this group on `device`, or
        None with NCCL."""
        if self.transport == "nccl":
            return None
        if device.type != "cuda":
            raise ValueError(f"'transport': copy_engine needs CUDA tensors, "
                             f"got {device}")
        return _peer.buffers(self.group, device)

    def send(self, state: dict) -> dict:
        """The rows to the experts' ranks (all_to_all_single or the copy
        engines)."""
        return self._move_rows(state, state["exchange"])

    def dispatch(self, tokens: torch.Tensor, training: bool) -> dict:
        """route, plan and send."""
        return self.send(self.plan(self.route(tokens, training)))

    def compute(self, state: dict) -> dict:
        """The local experts on the received rows (in received order)."""
        main_grads = (self.main_grads() if self.main_grad and
                      state["training"] else ())
        state["rows"] = _call(
            self._program, "ep_experts",
            (state["rows"], state["ids"], self.w_gate_up, self.w_down),
            state["training"], main_grads)[0]
        return state

    def main_grads(self) -> list:
        """This rank's experts' f32 main gradients (main_grad=True), as
        moec.torch.MoE.main_grads."""
        return main_grads_of(self)

    def zero_main_grad(self) -> None:
        """Zeroes this rank's experts' main gradients."""
        zero_main_grads(self)

    def send_back(self, state: dict) -> dict:
        """The expert outputs back to their tokens' ranks."""
        return self._move_rows(state, state["exchange"].reversed())

    def _move_rows(self, state: dict, exchange: Exchange,
                   pending: Optional[list] = None) -> dict:
        """state["rows"] exchanged; with `pending`, asynchronously (its
        work handle appended there: wait before reading the rows)."""
        if state["training"]:
            rows = AllToAll.apply(state["rows"], exchange, pending)
        else:
            rows, work = exchange.start(state["rows"], pending is not None,
                                        keep=False)
            if pending is not None:
                pending.append(work)
        state["rows"] = rows
        return state

    def combine(self, state: dict) -> torch.Tensor:
        """send_back, then weigh."""
        return self.weigh(self.send_back(state))

    def weigh(self, state: dict) -> torch.Tensor:
        """ep_combine on the returned rows: each token's k rows weighted and
        summed, [T, H]."""
        return _call(self._program, "ep_combine",
                     (state["rows"], state["weights"], state["slots"],
                      state["offsets"], state["positions"]),
                     state["training"])[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"'x': expected last dimension {self.hidden_size}"
                             f", got shape {list(x.shape)}")
        if x.dtype != self.w_down.dtype:
            raise ValueError(f"'x': expected dtype {self.w_down.dtype} (the "
                             f"block's), got {x.dtype}")
        if x.device != self.w_down.device:
            raise ValueError(f"'x': expected device {self.w_down.device} (the "
                             f"block's), got {x.device}")
        self._peers(x.device)  # a transport the device cannot run: named
        tokens = x.reshape(-1, self.hidden_size).contiguous()
        training = self._training(tokens)
        if self.dedup:
            return _ep_dedup.forward(self, tokens, training).reshape(x.shape)
        if len(self.expert_groups) > 1 and not training:
            return self._expert_pipelined(tokens).reshape(x.shape)
        if self.chunks == 1:
            state = self.dispatch(tokens, training)
            return self.combine(self.compute(state)).reshape(x.shape)
        return self._pipelined(tokens, training).reshape(x.shape)

    def _pipelined(self, tokens: torch.Tensor, training: bool) -> torch.Tensor:
        """forward in self.chunks pieces of the tokens. The exchanges are
        issued asynchronously, in the same order on every rank (NCCL runs a
        group's collectives in issue order on its own stream): every
        piece's rows out, then each piece's results back as soon as its
        experts are done; so piece p + 1's rows travel while piece p's
        experts compute, and piece p's results return during p + 1's."""
        # A piece that starts off the 16-byte boundary CUDA kernels need
        # (an odd hidden size) is copied.
        states = [self.route(piece if piece.data_ptr() % 16 == 0 else
                             piece.clone(), training)
                  for piece in tokens.tensor_split(self.chunks)]
        self.plan_pieces(states)
        for state in states:
            state["pending"] = []
            self._move_rows(state, state["exchange"], state["pending"])
        for state in states:
            wait(state)
            self.compute(state)
            self._move_rows(state, state["exchange"].reversed(),
                            state["pending"])
        outputs = []
        for state in states:
            wait(state)
            outputs.append(self.weigh(state))
        return torch.cat(outputs)

    def _expert_pipelined(self, tokens: torch.Tensor) -> torch.Tensor:
        """forward (no autograd) with the local experts in
        self.expert_groups, over the copy engines: group p's experts run
        (ep_experts_<n>) as soon as its rows are in, while group p + 1's
        rows travel and group p - 1's results go back. No expert's rows are
        split (as `chunks` splits them), so the matmuls' tiles stay as full
        as in the plain layer."""
        state = self.route(tokens, False)
        groups = self.expert_groups
        every, counts = self._gather_counts([state], mode=len(groups))
        every = every[:, 0]  # [source, dest, expert]
        counts = [source[0] for source in counts]
        phases = _peer.expert_chunks(counts, self.rank, groups)
        rows = state["rows"]
        row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
        region = 0
        for phase in phases:
            phase["region"] = region
            region += _peer.aligned(phase["region_rows"] * row_bytes)
        back = region  # every group's results, shaped like the send buffer
        most = max(sum(map(sum, source)) for source in counts)
        peers = self._peers(rows.device)
        peers.reserve(back + _peer.aligned(most * row_bytes))
        routed = torch.cuda.current_stream(rows.device).record_event()

        def send(p):
            """Group p's rows out; only the first exchange of the forward
            needs the fence (the others' regions are unread since)."""
            phase = phases[p]
            phase["rows"], phase["done"] = peers.exchange(
                rows, phase["out"], phase["received"], phase["region"],
                keep=False, async_op=True, after=routed, fence=p == 0)

        send(0)
        # Every group's local expert ids (while group 0 travels): from each
        # source, the group's experts in order. One tensor per group (the
        # kernels want 16-byte aligned arguments).
        firsts = [sum(groups[:p]) for p in range(len(groups))]
        ids = [torch.repeat_interleave(
            torch.arange(size, dtype=torch.int32,
                         device=rows.device).repeat(self.world_size),
            every[:, self.rank, lo:lo + size].reshape(-1).long(),
            output_size=phase["received"]).view(-1, 1)
            for phase, lo, size in zip(phases, firsts, groups)]
        pending = []
        for p, (phase, lo, size) in enumerate(zip(phases, firsts, groups)):
            phase["done"].wait()
            out = _call(self._program, f"ep_experts_{size}",
                        (phase["rows"], ids[p], self.w_gate_up[lo:lo + size],
                         self.w_down[lo:lo + size]), False)[0]
            if p + 1 < len(phases):  # the next group's rows travel now
                send(p + 1)
            state["rows"], done = peers.exchange(
                out, phase["back"], rows.shape[0], back, keep=False,
                async_op=True, fence=False)
            pending.append(done)
        for done in pending:
            done.wait()
        return self.weigh(state)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, intermediate_size="
                f"{self.intermediate_size}, num_experts={self.num_experts}, "
                f"top_k={self.top_k}, experts={self.experts.start}.."
                f"{self.experts.stop - 1} of rank {self.rank}/"
                f"{self.world_size}, routing={self.routing}, transport="
                f"{self.transport}"
                + (", main_grad=True" if self.main_grad else "")
                + (f", fp8={self.fp8}" if self.fp8 else "")
                + (", dedup=True" if self.dedup else ""))


def _check_no_kept_fp8_weights(config: MoEConfig) -> None:
    if config.keep_fp8_weights:
        raise ValueError("'keep_fp8_weights': ExpertParallelMoE's entries "
                         "quantize their own weights on every call (use "
                         "moec.torch.MoE, or keep_fp8_weights=False)")


def ep_module(hidden_size: Optional[int] = None,
              intermediate_size: Optional[int] = None,
              num_experts: Optional[int] = None,
              top_k: Optional[int] = None, world_size: int = 1, *,
              config: Optional[MoEConfig] = None, expert_chunks=1,
              dedup: bool = False, **options) -> str:
    """The MLIR module ExpertParallelMoE runs (its three kernels, their
    derived backwards, and with `expert_chunks` the ep_experts_<n>), to
    compile ahead of time:
    `moec.compile(ep_module(...), "sm_90a").save(path)`, then
    `ExpertParallelMoE(..., bundle=moec.load(path))` with the same
    configuration (a moec.MoEConfig, or its fields as keywords; `main_grad`,
    `fp8` and `dedup` included) over `world_size` ranks."""
    config = MoEConfig.of(config, (hidden_size, intermediate_size,
                                   num_experts, top_k), **options)
    _check_no_kept_fp8_weights(config)
    if isinstance(expert_chunks, list):
        expert_chunks = tuple(expert_chunks)
    return _Program(config, world_size, expert_chunks, bool(dedup)).module
