"""moec.torch.replace_moe_blocks on small transformers models (built from a
config with random weights: nothing is downloaded), on the host backend:
the swapped model gives the original's logits."""

import copy
import os

import pytest

# make test installs torch and transformers into the full package's venv and
# sets MOEC_TEST_EXPECT_TORCH=1 there: a missing one then fails, not skips.
if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
from torch import nn  # noqa: E402
from transformers import (AutoModelForCausalLM, MixtralConfig,  # noqa: E402
                          OlmoeConfig, Qwen2MoeConfig, Qwen3MoeConfig)

import moec.torch  # noqa: E402
from moec.torch.hf import HFMoE  # noqa: E402

pytestmark = pytest.mark.compiler

# ‖out − ref‖ / ‖ref‖ of the logits against the original model in the same
# dtype. In bf16 each model is about 1e-2 from exact (two layers of bf16
# attention, norms and experts), and they round differently (moec's router
# computes in f32, transformers' in bf16).
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2,
              num_experts_per_tok=2, max_position_embeddings=64,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)


def config(family, **kwargs):
    if family == "qwen3":
        return Qwen3MoeConfig(**COMMON, num_experts=8, moe_intermediate_size=32,
                              intermediate_size=96, norm_topk_prob=True,
                              head_dim=16, **kwargs)
    if family == "mixtral":
        return MixtralConfig(**COMMON, num_local_experts=8,
                             intermediate_size=32, **kwargs)
    return OlmoeConfig(**COMMON, num_experts=8, intermediate_size=32,
                       **kwargs)


def make_model(family, dtype=torch.float32, seed=0, **kwargs):
    """A random model whose sparse blocks matter: transformers initializes
    weights with std 0.02, which makes the experts' output about 0.1 % of
    the residual stream; the blocks get 1/sqrt(fan-in) weights instead."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(family, **kwargs))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".mlp.gate." in name or ".mlp.experts." in name:
                p.copy_(torch.randn(p.shape) / p.shape[-1] ** 0.5)
    return model.to(dtype).eval()


def rel(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def tokens(seed=1, shape=(2, 16)):
    return torch.randint(3, 128, shape,
                         generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["qwen3", "mixtral", "olmoe"])
def test_swapped_model_gives_the_same_logits(family, dtype):
    original = make_model(family, dtype)
    model = copy.deepcopy(original)
    params = {id(p) for p in model.parameters()}
    names = moec.torch.replace_moe_blocks(model)
    assert names == ["model.layers.0.mlp", "model.layers.1.mlp"]
    for layer in model.model.layers:
        assert isinstance(layer.mlp, moec.torch.MoE)
    # The same parameter objects under the same names: the state dict, a
    # checkpoint and an optimizer built before the swap all still fit.
    assert {id(p) for p in model.parameters()} == params
    state, original_state = model.state_dict(), original.state_dict()
    assert list(state) == list(original_state)
    assert all(torch.equal(state[k], original_state[k]) for k in state)

    ids = tokens()
    with torch.no_grad():
        ref = original(ids).logits
        out = model(ids).logits
        # The original in f32 with the same (rounded) weights stands for the
        # exact logits.
        exact = copy.deepcopy(original).float()(ids).logits
        ref_err = rel(ref, exact)
        # The blocks matter: without their output the logits are far off.
        for layer in original.model.layers:
            layer.mlp.experts.down_proj.zero_()
        without_moe = original(ids).logits
    err = rel(out, ref)
    assert err < TOL[dtype], f"rel error {err:.2e}"
    assert rel(without_moe, ref) > 10 * TOL[dtype]
    # In bf16: no further from exact than transformers' own bf16 model.
    assert dtype == torch.float32 or rel(out, exact) <= 1.5 * ref_err


@pytest.mark.parametrize("family", ["qwen3", "mixtral"])
def test_main_grad_on_a_transformers_model(family):
    # replace_moe_blocks(main_grad=True): two micro-batches' expert
    # gradients land in the experts' f32 main_grad, the rest in .grad, as
    # the same model without main gradients accumulates them in .grad.
    plain = make_model(family).train()
    model = copy.deepcopy(plain)
    moec.torch.replace_moe_blocks(plain)
    moec.torch.replace_moe_blocks(model, main_grad=True)
    for seed in (1, 2):
        for m in (plain, model):
            m(tokens(seed), labels=tokens(seed)).loss.backward()
    for layer, ref in zip(model.model.layers, plain.model.layers):
        experts, ref_experts = layer.mlp.experts, ref.mlp.experts
        for name in ("gate_up_proj", "down_proj"):
            p, r = getattr(experts, name), getattr(ref_experts, name)
            assert p.grad is None and p.main_grad.dtype == torch.float32
            assert rel(p.main_grad, r.grad) < 1e-5, name
        assert rel(layer.mlp.gate.weight.grad, ref.mlp.gate.weight.grad) < 1e-5
    layer.mlp.zero_main_grad()
    assert not layer.mlp.experts.down_proj.main_grad.any()


def test_routing_config_follows_the_model():
    for family, routing, norm in (("qwen3", "softmax_then_topk", True),
                                  ("olmoe", "softmax_then_topk", False),
                                  ("mixtral", "topk_then_softmax", True)):
        model = make_model(family)
        moec.torch.replace_moe_blocks(model)
        block = model.model.layers[0].mlp
        assert (block.routing, block.norm_topk_prob, block.top_k,
                block.num_experts, block.intermediate_size) == (
                    routing, norm, 2, 8, 32), family


def test_only_sparse_blocks_are_swapped():
    # Qwen3-MoE's dense layers (mlp_only_layers) keep their MLP.
    original = make_model("qwen3", mlp_only_layers=[0])
    model = copy.deepcopy(original)
    assert moec.torch.replace_moe_blocks(model) == ["model.layers.1.mlp"]
    assert type(model.model.layers[0].mlp).__name__ == "Qwen3MoeMLP"
    with torch.no_grad():
        assert rel(model(tokens()).logits,
                   original(tokens()).logits) < TOL[torch.float32]


@pytest.mark.parametrize("family", ["qwen3", "mixtral"])
def test_router_logits_and_aux_loss(family):
    # transformers records router logits with hooks on the router module,
    # which the swapped block keeps and runs when hooked.
    original = make_model(family, router_aux_loss_coef=0.01)
    model = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(model)
    ids = tokens()
    with torch.no_grad():
        ref = original(ids, labels=ids, output_router_logits=True)
        out = model(ids, labels=ids, output_router_logits=True)
    assert len(out.router_logits) == 2
    for a, b in zip(out.router_logits, ref.router_logits):
        assert rel(a, b) < 1e-6
    assert rel(out.aux_loss, ref.aux_loss) < 1e-5
    assert rel(out.loss, ref.loss) < 1e-5


def test_mixtral_router_jitter_in_training():
    original = make_model("mixtral", router_jitter_noise=0.2)
    model = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(model)
    ids = tokens()
    with torch.no_grad():
        eval_logits = model(ids).logits
        original.train()
        model.train()
        torch.manual_seed(9)  # the same jitter draws for both
        ref = original(ids).logits
        torch.manual_seed(9)
        out = model(ids).logits
    assert rel(out, ref) < TOL[torch.float32]
    assert rel(eval_logits, ref) > 1e-3  # the jitter changed something


def test_generate_greedy():
    # Decoding runs the blocks on one token at a time, with a KV cache.
    original = make_model("olmoe")
    model = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(model)
    prompt = tokens(shape=(1, 5))
    args = dict(max_new_tokens=8, do_sample=False)
    assert torch.equal(model.generate(prompt, **args),
                       original.generate(prompt, **args))


def test_checkpoints_load_and_save(tmp_path):
    original = make_model("qwen3", seed=3)
    model = make_model("qwen3", seed=4)
    moec.torch.replace_moe_blocks(model)
    model.load_state_dict(original.state_dict())  # strict: the same keys
    with torch.no_grad():
        assert rel(model(tokens()).logits,
                   original(tokens()).logits) < TOL[torch.float32]
    # What the swapped model saves, transformers loads as its own.
    with torch.no_grad():
        model.model.layers[1].mlp.experts.down_proj.mul_(2.0)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded.model.layers[1].mlp).__name__ == "Qwen3MoeSparseMoeBlock"
    with torch.no_grad():
        assert rel(loaded(tokens()).logits,
                   model(tokens()).logits) < TOL[torch.float32]


def test_torch_compile_fullgraph():
    torch._dynamo.reset()
    model = make_model("qwen3", torch.bfloat16)
    moec.torch.replace_moe_blocks(model)
    ops = []

    def recording(gm, example_inputs):
        ops.extend(n.target for n in gm.graph.nodes
                   if n.op == "call_function")
        return gm.forward

    # fullgraph=True: a graph break is an error.
    compiled = torch.compile(model, fullgraph=True, backend=recording)
    ids = tokens()
    with torch.no_grad():
        assert torch.equal(compiled(ids).logits, model(ids).logits)
    assert sum(op in (torch.ops.moec.moe_block,
                      torch.ops.moec.moe_block.default) for op in ops) == 2


def test_unsupported_blocks_raise_and_leave_the_model():
    with pytest.raises(ValueError, match="'model': no Qwen3-MoE, Mixtral or "
                       "OLMoE sparse MoE block in Sequential"):
        moec.torch.replace_moe_blocks(nn.Sequential(nn.Linear(4, 4)))
    # Qwen2-MoE has a shared expert: not one of the three families.
    torch.manual_seed(0)
    qwen2 = AutoModelForCausalLM.from_config(Qwen2MoeConfig(
        **COMMON, num_experts=8, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, intermediate_size=96))
    with pytest.raises(ValueError, match="shared experts"):
        moec.torch.replace_moe_blocks(qwen2)

    # A block with an extra submodule (a shared expert added by a subclass).
    from transformers.models.qwen3_moe.modeling_qwen3_moe import (
        Qwen3MoeSparseMoeBlock)

    class WithSharedExpert(Qwen3MoeSparseMoeBlock):
        def __init__(self, config):
            super().__init__(config)
            self.shared_expert = nn.Linear(64, 64)

    model = make_model("qwen3")
    model.model.layers[1].mlp = WithSharedExpert(model.config)
    with pytest.raises(ValueError, match="'model': model.layers.1.mlp "
                       r"\(WithSharedExpert\) has submodules shared_expert"):
        moec.torch.replace_moe_blocks(model)
    # The error came before any swap.
    assert not isinstance(model.model.layers[0].mlp, HFMoE)

    with pytest.raises(ValueError, match="layers.0.mlp: the experts' "
                       "activation is GELU"):
        moec.torch.replace_moe_blocks(make_model("olmoe", hidden_act="gelu"))

    model = make_model("mixtral", torch.bfloat16)
    model.model.layers[1].mlp.gate.float()
    with pytest.raises(ValueError, match="'model': model.layers.1.mlp.gate."
                       "weight is torch.float32"):
        moec.torch.replace_moe_blocks(model)


@pytest.mark.parametrize("family", ["qwen3", "mixtral"])
def test_lora_on_a_transformers_model(family):
    # replace_moe_blocks(lora_rank=...): the blocks gain adapters and freeze
    # their router and experts. Against the original model with the
    # adapters merged into its expert weights (W + s·B_e·A_e): the same
    # logits, and the adapters' gradients are the chain rule through the
    # merged weights' gradients (dA_e = s·B_eᵀ·dW_e, dB_e = s·dW_e·A_eᵀ).
    original = make_model(family, torch.float32)
    model = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(model, lora_rank=3, lora_alpha=6)
    blocks = [layer.mlp for layer in model.model.layers]
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        ids = tokens()
        assert rel(model(ids).logits, original(ids).logits) < TOL[torch.float32]
        for blk in blocks:
            assert not blk.w_gate_up.requires_grad
            assert not blk.gate.weight.requires_grad
            for b in (blk.gate_up_lora_B, blk.down_lora_B):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.2)
    merged = copy.deepcopy(original)
    r, s = 3, 2.0
    for blk, layer in zip(blocks, merged.model.layers):
        experts = layer.mlp.experts
        for name, a, b in (("gate_up_proj", blk.gate_up_lora_A,
                            blk.gate_up_lora_B),
                           ("down_proj", blk.down_lora_A, blk.down_lora_B)):
            w = getattr(experts, name)
            with torch.no_grad():
                for e in range(w.shape[0]):
                    w[e] += s * b[:, e * r:(e + 1) * r] @ a[e * r:(e + 1) * r]
    out, want = model(ids).logits, merged(ids).logits
    assert rel(out, want) < 1e-4
    dy = torch.randn(out.shape, generator=gen)
    (out * dy).sum().backward()
    (want * dy).sum().backward()
    for blk, layer in zip(blocks, merged.model.layers):
        experts = layer.mlp.experts
        for name, a, b in (("gate_up_proj", blk.gate_up_lora_A,
                            blk.gate_up_lora_B),
                           ("down_proj", blk.down_lora_A, blk.down_lora_B)):
            dw = getattr(experts, name).grad
            da = torch.cat([s * b[:, e * r:(e + 1) * r].T @ dw[e]
                            for e in range(dw.shape[0])])
            db = torch.cat([s * dw[e] @ a[e * r:(e + 1) * r].T
                            for e in range(dw.shape[0])], dim=1)
            assert rel(a.grad, da.detach()) < 1e-4, name
            assert rel(b.grad, db.detach()) < 1e-4, name


@pytest.mark.parametrize("family", ["qwen3", "mixtral"])
def test_peft_adapter_round_trip(family):
    # A peft LoRA on the fused expert parameters (target_parameters) loads
    # into replace_moe_blocks(lora_rank=...) blocks with the same logits,
    # and the moec blocks' adapters exported in peft's format load back
    # into a fresh peft model with the same logits again.
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
        import peft
    else:
        peft = pytest.importorskip("peft")
    from moec.torch.hf import load_peft_adapter, peft_adapter_state_dict
    original = make_model(family, torch.float32)
    config = peft.LoraConfig(
        r=2, lora_alpha=6, target_modules=[],
        target_parameters=["mlp.experts.gate_up_proj",
                           "mlp.experts.down_proj"])
    peft_model = peft.get_peft_model(copy.deepcopy(original), config)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:  # lora_B starts at zero: make it count
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    ids = tokens()
    with torch.no_grad():
        want = peft_model(ids).logits
        base = original(ids).logits
    assert rel(want, base) > 1e-2  # the adapters change the logits

    model = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(model, lora_rank=2, lora_alpha=6)
    copied = load_peft_adapter(model,
                               peft.get_peft_model_state_dict(peft_model))
    assert copied == 8  # two layers x two projections x (A, B)
    with torch.no_grad():
        assert rel(model(ids).logits, want) < 1e-4

    fresh = peft.get_peft_model(copy.deepcopy(original), config)
    result = peft.set_peft_model_state_dict(fresh,
                                            peft_adapter_state_dict(model))
    assert not result.unexpected_keys
    with torch.no_grad():
        assert rel(fresh(ids).logits, want) < 1e-6

    # A checkpoint of another rank is refused, naming the block.
    wrong = copy.deepcopy(original)
    moec.torch.replace_moe_blocks(wrong, lora_rank=3)
    with pytest.raises(ValueError, match="model.layers.0.mlp"):
        load_peft_adapter(wrong, peft.get_peft_model_state_dict(peft_model))
