"""Swapping the sparse MoE blocks of Hugging Face transformers models for
moec.torch.MoE.

    model = transformers.AutoModelForCausalLM.from_pretrained(...)
    moec.torch.replace_moe_blocks(model)   # or moec.torch.hf.replace_moe_blocks

Qwen3-MoE, Mixtral and OLMoE blocks of transformers >= 5 (experts stored
fused: `experts.gate_up_proj` [E, 2I, H], `experts.down_proj` [E, H, I],
the layout moec's kernel takes) are replaced by blocks that hold the same
parameter objects under the same names, so the model's state dict,
`save_pretrained` and an optimizer built before the swap keep working.
transformers is imported only when a model is swapped.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from ..layers import MoEConfig
from ._moe import MoE

__all__ = [
    "HFMoE", "load_peft_adapter", "peft_adapter_state_dict",
    "replace_moe_blocks",
]


def _block_routings() -> dict:
    """{transformers sparse MoE block class: moec routing}."""
    import transformers
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise ImportError(
            f"moec.torch.hf needs transformers >= 5 (experts stored as fused "
            f"tensors; checked with 5.24), found {transformers.__version__}")
    from transformers.models.mixtral.modeling_mixtral import (
        MixtralSparseMoeBlock)
    from transformers.models.olmoe.modeling_olmoe import OlmoeSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import (
        Qwen3MoeSparseMoeBlock)
    # Mixtral's router (softmax over all experts, top-k, renormalized) is
    # the softmax of the top-k logits.
    return {Qwen3MoeSparseMoeBlock: "softmax_then_topk",
            OlmoeSparseMoeBlock: "softmax_then_topk",
            MixtralSparseMoeBlock: "topk_then_softmax"}


def _is_silu(module: nn.Module) -> bool:
    from transformers.activations import SiLUActivation
    return isinstance(module, (nn.SiLU, SiLUActivation))


class _Experts(nn.Module):
    """The experts' weights under transformers' names (no forward: the
    moec kernel computes the experts)."""

    def __init__(self, gate_up_proj: nn.Parameter, down_proj: nn.Parameter):
        super().__init__()
        self.gate_up_proj, self.down_proj = gate_up_proj, down_proj

    def extra_repr(self) -> str:
        return (f"gate_up_proj={list(self.gate_up_proj.shape)}, "
                f"down_proj={list(self.down_proj.shape)}")


class HFMoE(MoE):
    """A moec.torch.MoE in place of a transformers sparse MoE block.

    It adopts the block's parameters under the block's names: the router
    module `gate` (its `weight` is the router matrix) and `experts.
    gate_up_proj` / `experts.down_proj`. The router module is kept because
    transformers records router logits (`output_router_logits`) with hooks
    on it: when it has hooks, it runs on the block's input as well (the
    moec kernel routes by itself). Mixtral's router jitter applies in
    training as in transformers.
    """

    def __init__(self, block: nn.Module, routing: str, name: str = "block",
                 bundle=None, **options):
        """`options`: the MoEConfig fields a model does not fix (tile,
        save, lora_rank, lora_alpha, main_grad, fp8, keep_fp8_weights)."""
        nn.Module.__init__(self)
        gate, experts = block.gate, block.experts
        extra = sorted(set(dict(block.named_children())) - {"gate", "experts"})
        if extra:
            raise ValueError(
                f"'model': {name} ({type(block).__name__}) has submodules "
                f"{', '.join(extra)} besides gate and experts (shared "
                f"experts?), which moec.torch.MoE does not compute")
        if not _is_silu(experts.act_fn):
            raise ValueError(
                f"'model': {name}: the experts' activation is "
                f"{type(experts.act_fn).__name__}; moec's experts are SwiGLU "
                f"(config.hidden_act 'silu')")
        dtype = experts.down_proj.dtype
        for what, tensor in (("gate.weight", gate.weight),
                             ("experts.gate_up_proj", experts.gate_up_proj)):
            if tensor.dtype != dtype:
                raise ValueError(
                    f"'model': {name}.{what} is {tensor.dtype}, its "
                    f"experts.down_proj {dtype}: moec takes one dtype")
        num_experts, hidden = gate.weight.shape
        self._configure(MoEConfig(
            hidden, experts.down_proj.shape[2], num_experts, gate.top_k,
            norm_topk_prob=getattr(gate, "norm_topk_prob", True),
            routing=routing, dtype=dtype, **options), bundle)
        for child in dict(block.named_children()):  # the block's key order
            if child == "gate":
                self.gate = gate
            else:
                self.experts = _Experts(experts.gate_up_proj,
                                        experts.down_proj)
        self.jitter_noise = float(getattr(block, "jitter_noise", 0.0))
        if self.lora_rank:
            self._add_adapters(dict(dtype=dtype,
                                    device=experts.down_proj.device))

    @property
    def w_gate_up(self) -> nn.Parameter:
        return self.experts.gate_up_proj

    @property
    def w_down(self) -> nn.Parameter:
        return self.experts.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and self.jitter_noise > 0:
            x = x * torch.empty_like(x).uniform_(1.0 - self.jitter_noise,
                                                 1.0 + self.jitter_noise)
        if self.gate._forward_hooks:
            self.gate(x.reshape(-1, self.hidden_size))
        return super().forward(x)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", jitter_noise={self.jitter_noise}"
                                       if self.jitter_noise else "")


def replace_moe_blocks(model: nn.Module, *, bundle=None, tile=None,
                       save: str = "all", lora_rank: int = 0,
                       lora_alpha=None, main_grad: bool = False,
                       fp8=None, keep_fp8_weights: bool = False) -> list:
    """Replaces every Qwen3-MoE, Mixtral and OLMoE sparse MoE block of
    `model` (a transformers model, or any module holding such blocks) by an
    HFMoE holding the same parameters, with the block's routing (Qwen3 and
    OLMoE: softmax then top-k, renormalized when the config's
    norm_topk_prob is set; Mixtral: top-k then softmax). Returns the
    qualified names of the replaced modules. `bundle`, `tile`, `save`,
    `lora_rank`, `lora_alpha`, `main_grad`, `fp8` and `keep_fp8_weights`
    are passed to every block (see moec.torch.MoE: with `lora_rank` each
    block gains LoRA adapters on its experts and freezes its router and
    base experts; the rest of the model is left as it is, so freeze it for
    LoRA fine-tuning).
    Raises ValueError, naming the block, for blocks moec cannot compute
    (shared experts, an activation other than SiLU, mixed dtypes), and when
    there is no block to replace.
    """
    routings = _block_routings()
    blocks = [(name, module) for name, module in model.named_modules()
              if isinstance(module, tuple(routings))]
    if not blocks:
        raise ValueError(
            f"'model': no Qwen3-MoE, Mixtral or OLMoE sparse MoE block in "
            f"{type(model).__name__} (other families, e.g. with shared "
            f"experts, are not supported)")
    if blocks[0][0] == "":
        raise ValueError("'model': is itself a sparse MoE block; pass the "
                         "module that holds it")
    # Build every replacement before changing the model: an error leaves it
    # as it was.
    swaps = []
    for name, block in blocks:
        routing = next(r for cls, r in routings.items()
                       if isinstance(block, cls))
        swaps.append((name, HFMoE(block, routing, name, bundle, tile=tile,
                                  save=save, lora_rank=lora_rank,
                                  lora_alpha=lora_alpha,
                                  main_grad=main_grad, fp8=fp8,
                                  keep_fp8_weights=keep_fp8_weights)))
    for name, new in swaps:
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, new)
    return [name for name, _ in swaps]


# peft's LoRA on 3-D expert parameters (LoraConfig(target_parameters=[
# "mlp.experts.gate_up_proj", "mlp.experts.down_proj"]), peft >= 0.17):
# each target wraps the experts module, the later around the earlier, so
# the first target's adapter sits under "experts.base_layer." and the
# second's under "experts.". lora_A is [E*r, in] with expert e's rows
# e*r..e*r+r (moec's layout); lora_B is [out, r*E] with expert e's rank j
# in column j*E + e, where moec keeps expert e's columns together
# (e*r + j).
_PEFT_KEY = re.compile(r"(.*)\.experts\.((?:base_layer\.)*)lora_([AB])"
                       r"(?:\.[A-Za-z_]\w*)?\.weight$")


def _b_from_peft(b: torch.Tensor, experts: int) -> torch.Tensor:
    out, er = b.shape
    return b.reshape(out, er // experts, experts).transpose(1, 2).reshape(
        out, er)


def _b_to_peft(b: torch.Tensor, experts: int) -> torch.Tensor:
    out, er = b.shape
    return b.reshape(out, experts, er // experts).transpose(1, 2).reshape(
        out, er)


def _lora_blocks(model: nn.Module) -> list:
    blocks = [(name, m) for name, m in model.named_modules()
              if isinstance(m, HFMoE) and m.lora_rank]
    if not blocks:
        raise ValueError("'model': no MoE block with LoRA adapters (call "
                         "replace_moe_blocks(model, lora_rank=r) first)")
    return blocks


@torch.no_grad()
def load_peft_adapter(model: nn.Module, state_dict: dict) -> int:
    """Copies the expert adapters of a peft LoRA checkpoint
    (`get_peft_model_state_dict`, or a peft model's state dict) made with
    `target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]`
    into the LoRA blocks of `model` (after `replace_moe_blocks(model,
    lora_rank=r, lora_alpha=alpha)` with peft's r and alpha). Adapters are
    told apart by their shapes (gate_up: [E*r, H] and [2I, E*r]; down:
    [E*r, I] and [H, E*r]); other keys are ignored. Returns the number of
    tensors copied; raises ValueError naming the block and key when a
    block finds no adapter or one of another rank."""
    found: dict = {}
    for key, value in state_dict.items():
        match = _PEFT_KEY.match(key)
        if match:
            prefix, nesting, which = match.groups()
            pair = found.setdefault(prefix, {}).setdefault(nesting, {})
            if which in pair:
                raise ValueError(f"'state_dict': {pair[which][0]} and {key} "
                                 f"are two adapters of one parameter (load "
                                 f"one adapter's state dict)")
            pair[which] = (key, value)
    copied = 0
    for name, block in _lora_blocks(model):
        prefixes = [p for p in found if p == name or p.endswith("." + name)]
        if len(prefixes) != 1:
            raise ValueError(f"'state_dict': {len(prefixes) or 'no'} peft "
                             f"expert adapters for {name} (keys ending in "
                             f"'{name}.experts.lora_A.weight'"
                             + (f": {', '.join(prefixes)})" if prefixes
                                else ")"))
        prefix = prefixes[0]
        E, H, I = block.num_experts, block.hidden_size, block.intermediate_size
        targets = {(H, 2 * I): (block.gate_up_lora_A, block.gate_up_lora_B),
                   (I, H): (block.down_lora_A, block.down_lora_B)}
        for pair in found[prefix].values():
            if set(pair) != {"A", "B"}:
                raise ValueError(f"'state_dict': {name}: lora_A and lora_B "
                                 f"must come together, got {sorted(pair)}")
            (key_a, a), (key_b, b) = pair["A"], pair["B"]
            target = targets.pop((a.shape[1], b.shape[0]), None)
            if target is None or tuple(a.shape) != tuple(target[0].shape) \
                    or tuple(b.shape) != tuple(target[1].shape):
                raise ValueError(
                    f"'state_dict': {key_a} {list(a.shape)} / {key_b} "
                    f"{list(b.shape)} fit no adapter of {name} (rank "
                    f"{block.lora_rank}, E {E}, H {H}, I {I})")
            target[0].copy_(a)
            target[1].copy_(_b_from_peft(b.to(target[1].device), E))
            copied += 2
        if targets:
            raise ValueError(f"'state_dict': {name} has no peft adapter for "
                             f"its {'gate_up' if (H, 2 * I) in targets else 'down'}"
                             f" projection")
    return copied


def peft_adapter_state_dict(model: nn.Module) -> dict:
    """The LoRA blocks' adapters in peft's format (see load_peft_adapter),
    as `get_peft_model_state_dict` of a peft model of the original
    transformers model with target_parameters=["mlp.experts.gate_up_proj",
    "mlp.experts.down_proj"] names them; `peft.set_peft_model_state_dict`
    loads it."""
    out = {}
    for name, block in _lora_blocks(model):
        base = f"base_model.model.{name}.experts."
        E = block.num_experts
        for nesting, a, b in (("base_layer.", block.gate_up_lora_A,
                               block.gate_up_lora_B),
                              ("", block.down_lora_A, block.down_lora_B)):
            out[base + nesting + "lora_A.weight"] = a.detach().clone()
            out[base + nesting + "lora_B.weight"] = _b_to_peft(b.detach(), E)
    return out
