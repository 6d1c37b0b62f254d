"""The deduplicated forward of moec.ep.ExpertParallelMoE (`dedup=True`):
each token travels once to each rank that holds any of its experts, not
once per expert, and comes back once per rank, already summed there.

    sender                               receiver
    ep_route: router, top-k (ids, w)
    dest[t, d] = d if a k-expert of t
      lives on rank d, else W
    ep_send_once: sort by rank, one
      row per (token, rank), with
      the token's k experts and
      weights                  ---- rows, experts, weights -------------->
                                         ep_sort_received: by expert, this
                                           rank's first (the others' pairs
                                           are left out)
                                         ep_experts_received: gate_up,
                                           SwiGLU, down on the gathered rows,
                                           each row's experts weighted and
                                           summed (the combine, on this side)
    ep_sum_ranks: a token's rows  <---- one row per row received ----
      (one per rank) summed

For DeepSeek-V3 (k = 8) over two ranks a token then moves at most 2 rows
each way where the plain layer moves 8. The result equals the plain
layer's up to rounding: each rank's partial sum is rounded to the dtype
before it travels, and the sum runs in another order. Under autograd the
kernels run their derived backwards and the exchanges run reversed (the
weights' gradients come back through the pairs' exchange).
"""

from __future__ import annotations

import math

import torch

from . import peer as _peer
from .kernels import _call
from .exchange import AllToAll, Exchange

__all__ = [
    "DEDUP_MODE", "compute", "forward", "plan", "route", "send", "send_back",
    "weigh",
]

#: The tag of a deduplicated forward in the count exchange, one less under
#: autograd (ranks that would run differently raise the same error).
DEDUP_MODE = 999


def forward(layer, tokens: torch.Tensor, training: bool) -> torch.Tensor:
    """The deduplicated forward of `layer` (ExpertParallelMoE) on this
    rank's tokens [T, H]: [T, H]; under autograd where `training` (each
    kernel's derived backward, the exchanges reversed)."""
    state = route(layer, tokens, training)
    for step in (plan, send, compute, send_back):
        state = step(layer, state)
    return weigh(layer, state)


# -- its steps, in order (bench/expert_parallel.py times each) -------------

def route(layer, tokens: torch.Tensor, training: bool = False) -> dict:
    """ep_route, then ep_send_once: the send buffer, one row per (token,
    destination rank) grouped by rank (rows past the sent ones unused),
    and each row's token's experts and weights (its `pairs`)."""
    program, W, local = layer._program, layer.world_size, layer.local_experts
    args = (tokens, layer.gate.weight)
    if layer.router_options["selection_bias"]:
        args += (layer.e_score_correction_bias.float(),)
    weights, ids = _call(program, "ep_route", args, training)
    # Few torch ops: each costs a launch on the host, and the count
    # exchange's host read waits for them all.
    ranks = torch.div(ids, local, rounding_mode="floor")
    dest = torch.full((tokens.shape[0], W), W, dtype=torch.int32,
                      device=tokens.device)
    dest.scatter_(1, ranks.long(), ranks)
    pairs = torch.cat([ids.to(torch.float32), weights], 1)
    send, pairs, slots, offsets = _call(
        program, "ep_send_once", (tokens, dest, pairs), training)
    ends = offsets[:W]
    # Rows per destination rank (cumulative), and (row, expert) pairs.
    counts = torch.cat([ends, torch.bincount(ranks.view(-1), minlength=W)
                        .to(torch.int32)])
    return dict(rows=send, pairs=pairs, slots=slots, ends=ends,
                counts=counts, tokens=tokens.shape[0], training=training)


def plan(layer, state: dict) -> dict:
    """The row counts of every rank to every rank (one all_gather, the
    forward's one host read) and the receive regions of the copy
    engines."""
    rank, W, k = layer.rank, layer.world_size, layer.top_k
    mode = DEDUP_MODE - state["training"]
    every = layer._all_gather(state["counts"], mode)[1]
    matrix = [[end - start for start, end in zip([0] + row[:W - 1], row[:W])]
              for row in every]  # rows, [source][dest]
    sent = sum(matrix[rank])
    # The pairs this rank receives: the sorted ones before the unused.
    state["received_pairs"] = sum(row[W + rank] for row in every)
    for key in ("rows", "pairs", "slots"):
        state[key] = state[key][:sent]
    peers = layer._peers(state["rows"].device)
    # Copy-engine regions: rows, pairs; back: rows, pairs' gradients.
    regions = [0] * 5
    if peers is not None:
        rows = state["rows"]
        row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
        there = _peer.region_rows(matrix)
        back = _peer.region_rows(_peer.transposed(matrix))
        for i, size in enumerate([there * row_bytes, there * 2 * k * 4,
                                  back * row_bytes, back * 2 * k * 4]):
            regions[i + 1] = regions[i] + _peer.aligned(size)
        peers.reserve(regions[-1])
    state["exchange"] = Exchange(matrix, rank, layer.group, peers,
                                  regions[0], regions[2])
    state["pairs_exchange"] = Exchange(matrix, rank, layer.group, peers,
                                        regions[1], regions[3])
    return state


def _move(state: dict, key: str, exchange: Exchange,
          fence: bool = True) -> None:
    """state[key] through `exchange`, under autograd where training
    (`fence`: as Exchange.start's, without autograd)."""
    if state["training"]:
        state[key] = AllToAll.apply(state[key], exchange)
    else:
        state[key] = exchange.start(state[key], async_op=False, keep=False,
                                    fence=fence)[0]


def send(layer, state: dict) -> dict:
    """The rows and their pairs to the experts' ranks."""
    _move(state, "rows", state["exchange"])
    # The pairs' region was last read before the rows' fenced exchange.
    _move(state, "pairs", state["pairs_exchange"], fence=False)
    k, local = layer.top_k, layer.local_experts
    pairs = state["pairs"]
    # This rank's experts first (0 .. E/W - 1), the others' after.
    ids = pairs[:, :k].to(torch.int32)
    state["ids"] = torch.remainder(ids - layer.rank * local,
                                   layer.num_experts)
    # The other ranks' pairs are never read, nor is their weights'
    # gradient written: zero it. (A new tensor: a view of one row would be
    # off the 16-byte alignment the kernels need.)
    state["weights"] = (torch.where(state["ids"] < local, pairs[:, k:], 0.0)
                        if state["training"] else pairs[:, k:].clone())
    return state


def compute(layer, state: dict) -> dict:
    """The local experts on the received rows: one row per row received,
    its experts' outputs weighted and summed."""
    program = layer._program
    slots, offsets = _call(program, "ep_sort_received", (state["ids"],),
                           False)
    main_grads = (layer.main_grads() if layer.main_grad and
                  state["training"] else ())
    # Only this rank's pairs: the matmuls then have no rows past the last
    # expert's (they would write zeros there).
    state["rows"] = _call(program, "ep_experts_received", (
        state["rows"], slots[:state["received_pairs"]],
        offsets[:layer.local_experts], state["weights"], layer.w_gate_up,
        layer.w_down), state["training"], main_grads)[0]
    return state


def send_back(layer, state: dict) -> dict:
    """The partial sums back to their tokens' ranks."""
    _move(state, "rows", state["exchange"].reversed())
    return state


def weigh(layer, state: dict) -> torch.Tensor:
    """ep_sum_ranks: each token's partial sums (one per rank) added, [T,
    H]."""
    ones = torch.ones((state["tokens"], layer.world_size),
                      dtype=torch.float32, device=state["rows"].device)
    return _call(layer._program, "ep_sum_ranks",
                 (state["rows"], state["slots"], state["ends"], ones),
                 state["training"])[0]
