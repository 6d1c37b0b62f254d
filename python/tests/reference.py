"""float64 numpy references for the tests (the dialect's semantics)."""

import numpy as np


def f64(a):
    return np.asarray(a, dtype=np.float64)


def router_topk(logits, k, renormalize=False, order="softmax_then_topk"):
    logits = f64(logits)
    if order == "topk_then_softmax":
        ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        sel = np.take_along_axis(logits, ids, axis=1)
        e = np.exp(sel - sel.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), ids.astype(np.int32)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores = e / e.sum(axis=1, keepdims=True)
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    weights = np.take_along_axis(scores, ids, axis=1)
    if renormalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return weights, ids.astype(np.int32)


def sort_by_expert(ids, num_experts):
    flat = ids.reshape(-1)
    slots = np.argsort(flat, kind="stable").astype(np.int32)
    offsets = np.cumsum(np.bincount(flat, minlength=num_experts)).astype(
        np.int32)
    return flat[slots], slots, offsets


def silu(x):
    return x / (1.0 + np.exp(-x))


def moe_block(x, gate_w, w_gate_up, w_down, k, renormalize=True,
              order="softmax_then_topk"):
    """The MoE block forward in float64: [T, H]."""
    x, gate_w = f64(x), f64(gate_w)
    w_gate_up, w_down = f64(w_gate_up), f64(w_down)
    weights, ids = router_topk(x @ gate_w.T, k, renormalize, order)
    inter = w_down.shape[2]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(k):
            e = ids[t, j]
            h = w_gate_up[e] @ x[t]
            out[t] += weights[t, j] * (w_down[e] @ (silu(h[:inter]) *
                                                    h[inter:]))
    return out, ids
