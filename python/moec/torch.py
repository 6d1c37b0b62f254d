"""`moec.torch.MoE`: a sparse MoE block (Mixtral / Qwen3 style) on moec kernels.

    block = moec.torch.MoE(hidden_size=2048, intermediate_size=768,
                           num_experts=128, top_k=8).cuda()
    block.load_hf_state_dict(hf_block.state_dict())   # Qwen3 or Mixtral names
    y = block(x)                                      # x: [..., hidden]

The forward pass is one moec kernel: router matmul, top-k, sort, gathered
gate_up grouped matmul with fused SwiGLU, down projection with fused
weighted combine. Weights keep the checkpoint layout: `gate.weight` [E, H],
`w_gate_up` [E, 2I, H] (gate_proj rows, then up_proj rows) and `w_down`
[E, H, I]. Training is not supported yet: backward raises
NotImplementedError.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._bundle import Bundle
from ._compile import Kernel, compile as _compile
from .layers import ROUTINGS, moe_kernel


class _NoBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x, *weights):
        return fn(x, *weights)

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError(
            "moec.torch.MoE has no backward pass yet (training support is "
            "planned); run it under torch.no_grad() or use a torch MoE block "
            "for training")


class MoE(nn.Module):
    """A sparse MoE block whose forward runs moec kernels.

    `routing="softmax_then_topk"` with `norm_topk_prob` is Qwen3 (and
    Qwen3.5, OLMoE without renormalization); `routing="topk_then_softmax"`
    is Mixtral. `bundle`: a precompiled bundle of `kernel()` (e.g.
    `moec.load(path)` on a machine without the compiler); otherwise the
    kernel is compiled for the input's device on first use (cached on disk).
    """

    def __init__(self, hidden_size: int, intermediate_size: int,
                 num_experts: int, top_k: int, *, norm_topk_prob: bool = True,
                 routing: str = "softmax_then_topk",
                 dtype: torch.dtype = torch.bfloat16, device=None,
                 bundle: Optional[Bundle] = None,
                 tile: Optional[dict] = None):
        super().__init__()
        if routing not in ROUTINGS:
            raise ValueError(f"'routing': expected one of {', '.join(ROUTINGS)}"
                             f", got {routing!r}")
        for name, value in (("hidden_size", hidden_size),
                            ("intermediate_size", intermediate_size),
                            ("num_experts", num_experts), ("top_k", top_k)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"'{name}': expected a positive int, got "
                                 f"{value!r}")
        if top_k > num_experts:
            raise ValueError(f"'top_k' ({top_k}) exceeds 'num_experts' "
                             f"({num_experts})")
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_experts, self.top_k = num_experts, top_k
        self.norm_topk_prob, self.routing = norm_topk_prob, routing
        self.tile = tile
        factory = dict(dtype=dtype, device=device)
        self.gate = nn.Linear(hidden_size, num_experts, bias=False, **factory)
        self.w_gate_up = nn.Parameter(torch.empty(
            num_experts, 2 * intermediate_size, hidden_size, **factory))
        self.w_down = nn.Parameter(torch.empty(
            num_experts, hidden_size, intermediate_size, **factory))
        nn.init.normal_(self.w_gate_up, std=hidden_size ** -0.5)
        nn.init.normal_(self.w_down, std=intermediate_size ** -0.5)
        self._kernel: Optional[Kernel] = None
        self._bundle = bundle

    def kernel(self) -> Kernel:
        """The traced forward kernel (for moec.compile / AOT bundles)."""
        if self._kernel is None:
            self._kernel = moe_kernel(
                self.hidden_size, self.intermediate_size, self.num_experts,
                self.top_k, norm_topk_prob=self.norm_topk_prob,
                routing=self.routing, dtype=self.w_down.dtype)
        return self._kernel

    @torch.no_grad()
    def load_hf_state_dict(self, state_dict: dict, prefix: str = "") -> None:
        """Loads a Hugging Face block's weights: Qwen3-MoE names
        (`experts.{e}.gate_proj/up_proj/down_proj.weight`) or Mixtral names
        (`experts.{e}.w1/w3/w2.weight`), plus `gate.weight`."""
        def get(key):
            if prefix + key not in state_dict:
                raise KeyError(f"state_dict has no '{prefix + key}'")
            return state_dict[prefix + key]

        self.gate.weight.copy_(get("gate.weight"))
        qwen = prefix + "experts.0.gate_proj.weight" in state_dict
        names = (("gate_proj", "up_proj", "down_proj") if qwen
                 else ("w1", "w3", "w2"))
        I = self.intermediate_size
        for e in range(self.num_experts):
            base = f"experts.{e}."
            self.w_gate_up[e, :I].copy_(get(base + names[0] + ".weight"))
            self.w_gate_up[e, I:].copy_(get(base + names[1] + ".weight"))
            self.w_down[e].copy_(get(base + names[2] + ".weight"))

    def _bundle_for(self, x: torch.Tensor) -> Bundle:
        target = "host" if x.device.type == "cpu" else "sm_90a"
        if self._bundle is None or target not in self._bundle.targets:
            self._bundle = _compile(self.kernel(), target, self.tile)
        return self._bundle

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"'x': expected last dimension {self.hidden_size}"
                             f", got shape {list(x.shape)}")
        if x.dtype != self.w_down.dtype:
            raise ValueError(f"'x': expected dtype {self.w_down.dtype} (the "
                             f"block's), got {x.dtype}")
        shape = x.shape
        tokens = x.reshape(-1, self.hidden_size).contiguous()
        bundle = self._bundle_for(tokens)
        target = "host" if tokens.device.type == "cpu" else "sm_90a"
        entry = bundle.entry("moe_block", target)
        weights = (self.gate.weight.contiguous(),
                   self.w_gate_up.contiguous(), self.w_down.contiguous())
        if torch.is_grad_enabled() and (x.requires_grad or any(
                w.requires_grad for w in weights)):
            y = _NoBackward.apply(entry, tokens, *weights)
        else:
            y = entry(tokens, *weights)
        return y.reshape(shape)

    def extra_repr(self) -> str:
        return (f"hidden_size={self.hidden_size}, intermediate_size="
                f"{self.intermediate_size}, num_experts={self.num_experts}, "
                f"top_k={self.top_k}, routing={self.routing}, norm_topk_prob="
                f"{self.norm_topk_prob}")
