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
               dtype="bf16", lora_rank: int = 0,
               lora_scaling: float = 1.0) -> Kernel:
    """The moec kernel of one MoE block forward (Mixtral / Qwen3 style) for
    these sizes: router, top-k, sort, gathered gate_up + SwiGLU, down, combine.

    `lora_rank` r > 0 adds a LoRA adapter per expert to both projections,
    scaled by `lora_scaling`, as four more arguments: `gate_up_lora_a`
    [E*r, H], `gate_up_lora_b` [2I, E*r], `down_lora_a` [E*r, I] and
    `down_lora_b` [H, E*r] (expert e's A is rows e*r..e*r+r of A, its B
    columns e*r..e*r+r of B).
    """
    H, I, E, dt = hidden_size, intermediate_size, num_experts, canonical(dtype)
    r = lora_rank
    if not isinstance(r, int) or isinstance(r, bool) or r < 0:
        raise ValueError(f"'lora_rank': expected an int >= 0, got {r!r}")

    def experts(x, gate_w, w_gate_up, w_down, gate_up_lora=None,
                down_lora=None):
        logits = ops.matmul(x, gate_w, transpose_rhs=True)
        weights, ids = ops.router_topk(
            logits, k=top_k, order=routing,
            renormalize=norm_topk_prob and routing == "softmax_then_topk")
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
