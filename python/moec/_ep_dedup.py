"""The deduplicated forward of moec.ep.ExpertParallelMoE (`dedup=True`):
each token travels once to each rank that holds any of its experts, not
once per expert, and comes back once per rank, already summed there.

    sender                               receiver
    ep_route: router, top-k (ids, w)
    dest[t, d] = d if a k-expert of t
      lives on rank d, else W
    ep_send_once: sort by rank, one
      row per (token, rank)    ---- rows, and per row its (local expert,
                                    weight) pairs (at most min(k, E / W);
                                    local experts fill the row's first
                                    columns, `E / W` marks an empty one) -->
                                         ep_sort_received: by local expert
                                         ep_experts_received: gate_up,
                                           SwiGLU, down on the gathered rows,
                                           each row's experts weighted and
                                           summed (the combine, on this side)
    ep_sum_ranks: a token's rows  <---- one row per row received ----
      (one per rank) summed

For DeepSeek-V3 (k = 8) over two ranks a token then moves at most 2 rows
each way where the plain layer moves 8. The result equals the plain
layer's up to rounding: each rank's partial sum is rounded to the dtype
before it travels, and the sum runs in another order.
"""

from __future__ import annotations

import math

import torch

from . import _peer
from ._ep_kernels import _call, received_columns
from ._exchange import _AllToAll, _Exchange

#: The tag of a deduplicated forward in the count exchange (ranks that
#: would run differently raise the same error).
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
    and each row's (local expert, weight) pairs, its local experts in the
    first columns (made here, before the count exchange's host read, so
    that they queue behind the kernels instead of after the sync)."""
    program, W, local = layer._program, layer.world_size, layer.local_experts
    args = (tokens, layer.gate.weight)
    if layer.router_options["selection_bias"]:
        args += (layer.e_score_correction_bias.float(),)
    weights, ids = _call(program, "ep_route", args, training)
    ranks = torch.div(ids, local, rounding_mode="floor")
    dest = torch.full((tokens.shape[0], W), W, dtype=torch.int32,
                      device=tokens.device)
    dest.scatter_(1, ranks.long(), ranks)
    send, slots, offsets = _call(program, "ep_send_once", (tokens, dest),
                                 training)
    # Few torch ops: each costs a launch on the host, and the count
    # exchange's host read waits for them all.
    token = torch.div(slots, W, rounding_mode="floor")
    chosen = ids[token]  # [T * W, k]
    mine = torch.div(chosen, local, rounding_mode="floor") == \
        (slots % W)[:, None]
    lids = torch.where(mine, chosen % local, local)
    # The sort drops the other ranks' pairs, so their weights are never
    # read; under autograd they are zeros, so that their gradients are.
    picked = (torch.where(mine, weights[token], 0.0) if training
              else weights[token])
    kr = received_columns(layer.top_k, local)
    if kr < layer.top_k:  # a row's local experts into its first kr columns
        lids, order = lids.sort(dim=1, stable=True)
        lids, picked = lids[:, :kr], picked.gather(1, order[:, :kr])
    lids = lids.to(torch.int32)
    ends = offsets[:W]
    # Rows per destination rank (cumulative), and (row, expert) pairs.
    counts = torch.cat([ends, torch.bincount(ranks.view(-1), minlength=W)
                        .to(torch.int32)])
    state = dict(rows=send, slots=slots, ends=ends, counts=counts,
                 tokens=tokens.shape[0], training=training)
    if training:  # the weights travel apart, with their gradients
        state.update(ids=lids, weights=picked)
    else:  # one exchange of both
        state["meta"] = torch.cat([lids, picked.view(torch.int32)], 1)
    return state


def plan(layer, state: dict) -> dict:
    """The row counts of every rank to every rank (one all_gather, the
    forward's one host read) and the receive regions of the copy
    engines."""
    rank, W = layer.rank, layer.world_size
    kr = received_columns(layer.top_k, layer.local_experts)
    every = layer._all_gather(state["counts"], DEDUP_MODE - state["training"])[1]
    matrix = [[end - start for start, end in zip([0] + row[:W - 1], row[:W])]
              for row in every]  # rows, [source][dest]
    sent = sum(matrix[rank])
    # The pairs this rank receives: the sorted ones before the unused.
    state["pairs"] = sum(row[W + rank] for row in every)
    for key in ("rows", "meta", "ids", "weights"):
        if key in state:
            state[key] = state[key][:sent]
    state["slots"] = state["slots"][:sent]
    peers = layer._peers(state["rows"].device)
    # Copy-engine regions: rows, pairs (ids and weights), weights apart
    # (autograd); back: rows, weights' gradients.
    regions = [0] * 6
    if peers is not None:
        rows = state["rows"]
        row_bytes = math.prod(rows.shape[1:]) * rows.element_size()
        there = _peer.region_rows(matrix)
        back = _peer.region_rows(_peer.transposed(matrix))
        sizes = [there * row_bytes, there * 2 * kr * 4, there * kr * 4,
                 back * row_bytes, back * kr * 4]
        for i, size in enumerate(sizes):
            regions[i + 1] = regions[i] + _peer.aligned(size)
        peers.reserve(regions[-1])
    state["exchange"] = _Exchange(matrix, rank, layer.group, peers,
                                  regions[0], regions[3])
    state["weights_exchange"] = _Exchange(matrix, rank, layer.group, peers,
                                          regions[2], regions[4])
    state["meta_region"] = regions[1]
    return state


def _move(state: dict, key: str, exchange: _Exchange) -> None:
    """state[key] through `exchange`, under autograd where training."""
    if state["training"]:
        state[key] = _AllToAll.apply(state[key], exchange)
    else:
        state[key] = exchange.start(state[key], async_op=False,
                                    keep=False)[0]


def _move_ints(state: dict, key: str, exchange: _Exchange) -> torch.Tensor:
    """state[key] (no gradient) to the experts' ranks, after the rows."""
    peers = exchange.peers
    if peers is None:
        return exchange.start(state[key], async_op=False, keep=False)[0]
    # Its region was last read before the rows' fenced exchange.
    return peers.exchange(state[key], _peer.copies(exchange.matrix,
                                                   exchange.rank),
                          state["rows"].shape[0], state["meta_region"],
                          keep=False, async_op=False, fence=False)[0]


def send(layer, state: dict) -> dict:
    """The rows and their pairs to the experts' ranks."""
    _move(state, "rows", state["exchange"])
    kr = received_columns(layer.top_k, layer.local_experts)
    # Copies of their own (one row, or none, would leave the columns a
    # view off the 16-byte alignment the kernels need).
    if state["training"]:
        state["ids"] = _move_ints(state, "ids", state["exchange"]).clone()
        _move(state, "weights", state["weights_exchange"])
    else:
        meta = _move_ints(state, "meta", state["exchange"])
        state["ids"] = meta[:, :kr].clone()
        state["weights"] = meta[:, kr:].clone().view(torch.float32)
    return state


def compute(layer, state: dict) -> dict:
    """The local experts on the received rows: one row per row received,
    its experts' outputs weighted and summed."""
    program = layer._program
    slots, offsets = _call(program, "ep_sort_received", (state["ids"],),
                           False)
    main_grads = (layer.main_grads() if layer.main_grad and
                  state["training"] else ())
    # Only the pairs' rows: the matmuls then have no rows past the last
    # expert's (they would write zeros there).
    state["rows"] = _call(program, "ep_experts_received", (
        state["rows"], slots[:state["pairs"]], offsets[:layer.local_experts],
        state["weights"], layer.w_gate_up, layer.w_down), state["training"],
        main_grads)[0]
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
