"""Kernels of whole layers, built from moec.ops (no torch needed)."""

from __future__ import annotations

from . import ops
from ._compile import Kernel
from ._dtypes import canonical
from ._ir import Tensor

ROUTINGS = ("softmax_then_topk", "topk_then_softmax")


def moe_kernel(hidden_size: int, intermediate_size: int, num_experts: int,
               top_k: int, *, norm_topk_prob: bool = True,
               routing: str = "softmax_then_topk",
               dtype="bf16") -> Kernel:
    """The moec kernel of one MoE block forward (Mixtral / Qwen3 style) for
    these sizes: router, top-k, sort, gathered gate_up + SwiGLU, down, combine."""
    H, I, E, dt = hidden_size, intermediate_size, num_experts, canonical(dtype)

    def moe_block(x, gate_w, w_gate_up, w_down):
        logits = ops.matmul(x, gate_w, transpose_rhs=True)
        weights, ids = ops.router_topk(
            logits, k=top_k, order=routing,
            renormalize=norm_topk_prob and routing == "softmax_then_topk")
        _, slots, offsets = ops.sort_by_expert(ids, E)
        rows = ops.permute(x, slots, offsets, k=top_k)
        h = ops.grouped_matmul(rows, w_gate_up, offsets, transpose_rhs=True)
        down = ops.grouped_matmul(ops.swiglu(h), w_down, offsets,
                                  transpose_rhs=True)
        return ops.unpermute(down, slots, offsets, k=top_k, weights=weights)

    signature = {"x": Tensor["T", H, dt], "gate_w": Tensor[E, H, dt],
                 "w_gate_up": Tensor[E, 2 * I, H, dt],
                 "w_down": Tensor[E, H, I, dt]}
    return Kernel(moe_block, name="moe_block", signature=signature)
