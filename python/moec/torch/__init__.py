"""moec.torch: MoE blocks for PyTorch on moec kernels (`MoE`, custom ops
with fake implementations for torch.compile, autograd through the derived
backward, LoRA, main gradients) and the transformers / peft helpers
(moec.torch.hf: `replace_moe_blocks`, `load_peft_adapter`,
`peft_adapter_state_dict`)."""

from ..layers import LORA_ARGS, MAIN_GRAD_ARGS, MoEConfig
from ._moe import (MoE, clear_fp8_weights, load_hf_experts, main_grads_of,
                   zero_main_grads)
from .hf import (HFMoE, load_peft_adapter, peft_adapter_state_dict,
                 replace_moe_blocks)

__all__ = ["HFMoE", "LORA_ARGS", "MAIN_GRAD_ARGS", "MoE", "MoEConfig",
           "clear_fp8_weights", "load_hf_experts", "load_peft_adapter", "main_grads_of",
           "peft_adapter_state_dict", "replace_moe_blocks", "zero_main_grads"]
