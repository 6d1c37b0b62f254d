"""Training moec.torch.MoE on the host backend: its gradients against the
same block in float64 torch autograd (with moec's routing), .grad
accumulation, torch.autocast, the training custom ops under opcheck, a
transformers model's gradients after replace_moe_blocks."""

import os

import pytest

if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import moec.torch  # noqa: E402
from test_torch_moe import make_block, rel  # noqa: E402

pytestmark = pytest.mark.compiler
GRAD_TOL = {torch.bfloat16: 1e-2, torch.float32: 1e-5}


def reference_grads(block, x, dy, ids):
    """float64 gradients of <dy, block(x)> (x [T, H]) with the experts
    fixed to `ids` (the kernel's routing: a near tie may go either way):
    of x and the three weights, or with LoRA of x and the four adapters."""
    tensors = (x, block.gate.weight, block.w_gate_up, block.w_down,
               *block.adapters())
    params = [t.detach().double().requires_grad_() for t in tensors]
    xd, gate_w, w_gate_up, w_down = params[:4]
    if block.lora_rank:
        # The merged weights of each expert: W + s · B_e · A_e.
        r, s = block.lora_rank, block.lora_scaling
        merged = []
        for w, a, b in ((w_gate_up, params[4], params[5]),
                        (w_down, params[6], params[7])):
            merged.append(torch.stack([
                w[e] + s * b[:, e * r:(e + 1) * r] @ a[e * r:(e + 1) * r]
                for e in range(block.num_experts)]))
        w_gate_up, w_down = merged
    logits = xd @ gate_w.T
    ids = ids.long()
    if block.routing == "topk_then_softmax":
        weights = logits.gather(1, ids).softmax(dim=-1)
    else:
        weights = logits.softmax(dim=-1).gather(1, ids)
        if block.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    inter = block.intermediate_size
    out = torch.zeros_like(xd)
    for e in range(block.num_experts):
        token, slot = (ids == e).nonzero(as_tuple=True)
        h = xd[token] @ w_gate_up[e].T
        a = F.silu(h[:, :inter]) * h[:, inter:]
        out = out.index_add(0, token,
                            (a @ w_down[e].T) * weights[token, slot, None])
    (out * dy.double()).sum().backward()
    if block.lora_rank:
        return [params[0].grad] + [p.grad for p in params[4:]]
    return [p.grad for p in params]


def kernel_ids(block, tokens):
    """The experts the kernel picks (moe_block_fwd's ids)."""
    outs = torch.ops.moec.moe_block_train(
        tokens.detach(), block.gate.weight.detach(),
        block.w_gate_up.detach(), block.w_down.detach(),
        [a.detach() for a in block.adapters()], [], block._launcher, [])
    return outs[3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("routing,norm", [("softmax_then_topk", True),
                                          ("topk_then_softmax", True),
                                          ("softmax_then_topk", False)])
@pytest.mark.parametrize("tokens", [1, 13])
def test_gradients_match_float64(dtype, routing, norm, tokens):
    block = make_block(40, 24, experts=6, k=2, routing=routing,
                       norm_topk_prob=norm, dtype=dtype, seed=tokens)
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 40, generator=gen).to(dtype).requires_grad_()
    dy = torch.randn(tokens, 40, generator=gen).to(dtype)
    y = block(x)
    assert y.requires_grad and y.dtype == dtype
    y.backward(dy)
    want = reference_grads(block, x, dy, kernel_ids(block, x))
    got = [x.grad, block.gate.weight.grad, block.w_gate_up.grad,
           block.w_down.grad]
    for name, g, w in zip(("x", "gate", "w_gate_up", "w_down"), got, want):
        assert g.dtype == dtype and g.shape == w.shape, name
        assert rel(g, w) < GRAD_TOL[dtype], name


def test_all_tokens_on_one_expert():
    block = make_block(32, 16, experts=4, k=2, dtype=torch.float32)
    with torch.no_grad():
        block.gate.weight[0, 0] = 20.0
    x = torch.randn(9, 32)
    x[:, 0] = 1.0
    x.requires_grad_()
    dy = torch.randn(9, 32)
    block(x).backward(dy)
    ids = kernel_ids(block, x)
    assert (ids == 0).any(dim=1).all()
    want = reference_grads(block, x, dy, ids)
    for g, w in zip((x.grad, block.gate.weight.grad, block.w_gate_up.grad,
                     block.w_down.grad), want):
        assert rel(g, w) < GRAD_TOL[torch.float32]


def test_grad_accumulates_and_frozen_weights():
    block = make_block(32, 16, experts=4, k=2, dtype=torch.float32)
    x = torch.randn(2, 5, 32)  # [..., hidden]: leading dims are flattened
    block(x).sum().backward()
    first = block.w_down.grad.clone()
    block(x).sum().backward()
    assert torch.allclose(block.w_down.grad, 2 * first, rtol=1e-6, atol=0)
    # A frozen router and no input gradient: the experts still train.
    block.zero_grad()
    block.gate.weight.requires_grad_(False)
    block(x).sum().backward()
    assert block.gate.weight.grad is None
    assert block.w_gate_up.grad is not None and block.w_down.grad is not None
    # No gradient needed at all: the inference op, no graph.
    with torch.no_grad():
        assert not block(x).requires_grad


def test_autocast_runs_bf16_and_trains_f32_weights():
    block = make_block(32, 16, experts=4, k=2, dtype=torch.float32, seed=3)
    x = torch.randn(7, 32)
    dy = torch.randn(7, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = block(x)
    assert y.dtype == torch.bfloat16
    y.float().backward(dy)
    assert block.w_gate_up.grad.dtype == torch.float32
    f32 = make_block(32, 16, experts=4, k=2, dtype=torch.float32, seed=3)
    f32(x).backward(dy)
    for a, b in ((block.w_gate_up, f32.w_gate_up), (block.w_down, f32.w_down),
                 (block.gate.weight, f32.gate.weight)):
        assert rel(a.grad, b.grad) < 3e-2


def test_training_ops_opcheck():
    block = make_block(40, 20, dtype=torch.float32)
    x = torch.randn(11, 40, requires_grad=True)
    args = (x, block.gate.weight, block.w_gate_up, block.w_down, [], [],
            block._launcher, [])
    torch.library.opcheck(torch.ops.moec.moe_block_train.default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))


def test_transformers_gradients_after_swap():
    transformers = pytest.importorskip("transformers") \
        if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1" else \
        __import__("transformers")
    config = transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48,
        moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
        max_position_embeddings=64)
    torch.manual_seed(0)
    original = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32)
    swapped = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32)
    swapped.load_state_dict(original.state_dict())
    assert moec.torch.replace_moe_blocks(swapped)
    ids = torch.randint(0, 96, (2, 11), generator=torch.Generator()
                        .manual_seed(1))
    for model in (original, swapped):
        model(input_ids=ids, labels=ids).loss.backward()
    grads = dict(original.named_parameters())
    for name, p in swapped.named_parameters():
        assert p.grad is not None, name
        assert rel(p.grad, grads[name].grad) < 1e-4, name


@pytest.mark.parametrize("save", ["matmuls", "inputs"])
def test_save_policies_give_the_same_gradients(save):
    # Keeping less for the backward recomputes it there: the same values.
    x = torch.randn(9, 32, generator=torch.Generator().manual_seed(4))
    grads = {}
    for policy in ("all", save):
        block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32, save=policy)
        torch.manual_seed(5)
        with torch.no_grad():
            for p in block.parameters():
                p.copy_(torch.randn(p.shape) * 0.3)
        xg = x.clone().requires_grad_()
        block(xg).sum().backward()
        grads[policy] = [xg.grad] + [p.grad for p in block.parameters()]
    for a, b in zip(grads["all"], grads[save]):
        assert rel(b, a) < 1e-6
    with pytest.raises(ValueError, match="'save': expected one of"):
        moec.torch.MoE(32, 16, 4, 2, save="some")


def lora_block(dtype, seed, rank=3, alpha=6.0, **kwargs):
    """A LoRA block with random base weights and random (nonzero) B, so that
    every adapter has a gradient."""
    block = make_block(40, 24, experts=6, k=2, dtype=dtype, seed=seed)
    lora = moec.torch.MoE(40, 24, 6, 2, dtype=dtype, lora_rank=rank,
                          lora_alpha=alpha, **kwargs)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name in ("gate.weight", "w_gate_up", "w_down"):
            lora.get_parameter(name).copy_(block.get_parameter(name))
        for a in (lora.gate_up_lora_A, lora.down_lora_A):
            a.copy_(torch.randn(a.shape, generator=gen) / a.shape[1] ** 0.5)
        for b in (lora.gate_up_lora_B, lora.down_lora_B):
            b.copy_(torch.randn(b.shape, generator=gen) * 0.3)
    return lora


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 13])
def test_lora_gradients_match_float64(dtype, tokens):
    block = lora_block(dtype, tokens)
    assert block.lora_scaling == 2.0
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 40, generator=gen).to(dtype).requires_grad_()
    dy = torch.randn(tokens, 40, generator=gen).to(dtype)
    block(x).backward(dy)
    want = reference_grads(block, x, dy, kernel_ids(block, x))
    got = [x.grad] + [a.grad for a in block.adapters()]
    names = ("x", "gate_up_lora_A", "gate_up_lora_B", "down_lora_A",
             "down_lora_B")
    for name, g, w in zip(names, got, want):
        assert g.dtype == dtype and g.shape == w.shape, name
        assert rel(g, w) < GRAD_TOL[dtype], name
    for frozen in (block.gate.weight, block.w_gate_up, block.w_down):
        assert frozen.grad is None


def test_lora_all_tokens_on_one_expert_and_no_input_grad():
    block = lora_block(torch.float32, 5)
    with torch.no_grad():  # every token: expert 0 first, expert 1 second
        block.gate.weight[0, 0] = 20.0
        block.gate.weight[1, 0] = 10.0
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(9, 40, generator=gen)
    x[:, 0] = 1.0
    dy = torch.randn(9, 40, generator=gen)
    block(x).backward(dy)  # x needs no gradient: the adapters still train
    ids = kernel_ids(block, x)
    assert (ids == 0).any(dim=1).all()
    want = reference_grads(block, x, dy, ids)[1:]
    for a, w in zip(block.adapters(), want):
        assert rel(a.grad, w) < GRAD_TOL[torch.float32]
    # Experts that received no token have zero adapter gradients.
    r = block.lora_rank
    unused = [e for e in range(6) if not (ids == e).any()]
    assert unused == [2, 3, 4, 5]
    for e in unused:
        assert not block.gate_up_lora_A.grad[e * r:(e + 1) * r].any()
        assert not block.down_lora_B.grad[:, e * r:(e + 1) * r].any()


def test_lora_block_starts_as_the_base_block_and_freezes_it():
    base = make_block(40, 24, experts=6, k=2, dtype=torch.float32, seed=2)
    lora = moec.torch.MoE(40, 24, 6, 2, dtype=torch.float32, lora_rank=4)
    with torch.no_grad():
        for name in ("gate.weight", "w_gate_up", "w_down"):
            lora.get_parameter(name).copy_(base.get_parameter(name))
    shapes = {n: tuple(p.shape) for n, p in lora.named_parameters()
              if p.requires_grad}
    assert shapes == {"gate_up_lora_A": (24, 40), "gate_up_lora_B": (48, 24),
                      "down_lora_A": (24, 24), "down_lora_B": (40, 24)}
    x = torch.randn(7, 40)
    with torch.no_grad():
        assert torch.equal(lora(x), base(x))
    assert "lora_rank=4" in repr(lora)
    lora.w_down.requires_grad_(True)
    with torch.no_grad():  # nothing trains: no complaint
        assert torch.equal(lora(x), base(x))
    with pytest.raises(ValueError, match="'w_down' requires grad, but a LoRA"):
        lora(x.requires_grad_())
    for bad in (-1, True, 2.0):
        with pytest.raises(ValueError, match="'lora_rank'"):
            moec.torch.MoE(40, 24, 6, 2, lora_rank=bad)
    with pytest.raises(ValueError, match="'lora_alpha' needs"):
        moec.torch.MoE(40, 24, 6, 2, lora_alpha=8)
    with pytest.raises(ValueError, match="'lora_alpha': expected"):
        moec.torch.MoE(40, 24, 6, 2, lora_rank=2, lora_alpha=0)


def test_lora_block_save_bundle_has_exactly_its_entries(tmp_path,
                                                      monkeypatch):
    # The documented AOT path of a LoRA block: block.save_bundle(path)
    # where the compiler is, then MoE(..., bundle=moec.load(path)) trains
    # without compiling anything (on the GPU machine).
    block = lora_block(torch.float32, 3)
    path = tmp_path / "lora.moecb"
    written = block.save_bundle(path, target="host")
    for bundle in (written, moec.load(path)):
        assert sorted(e.name for e in bundle.entries) == [
            "moe_block", "moe_block_fwd", "moe_block_grad"]
        # The backward is to x and the four adapters (not all 8 arguments).
        assert len(bundle.entry("moe_block_grad", "host").outputs) == 5
    # The bundle as read back from disk: its host entries run from their
    # object (loaded, not compiled again), as a loaded sm_90a bundle's
    # entries run from their cubins.
    given = moec.torch.MoE(config=block.config, bundle=moec.load(path))
    given.load_state_dict(block.state_dict())
    assert given.config == block.config

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the bundle has the entries")
    monkeypatch.setattr(moec.torch._moe, "_compile", no_compile)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 40, generator=gen)
    given(x).sum().backward()
    with torch.no_grad():
        inference = given(x)
    monkeypatch.undo()
    block(x).sum().backward()
    with torch.no_grad():
        assert torch.equal(inference, block(x))
    for a, b in zip(given.adapters(), block.adapters()):
        assert torch.equal(a.grad, b.grad)
    assert sorted(e.name for e in block.compile("host", training=False)
                  .entries) == ["moe_block"]


def test_lora_block_rejects_a_bundle_of_the_full_backward():
    # kernel().grad() differentiates all 8 arguments: the error says how
    # to write the bundle instead of failing inside torch.
    block = lora_block(torch.float32, 4)
    full = moec.compile(block.kernel().grad(), "host")
    given = moec.torch.MoE(config=block.config, bundle=full)
    x = torch.randn(3, 40)
    with pytest.raises(ValueError, match=r"returns 8 gradients, a block with "
                       r"lora_rank=3 needs 5 .*block\.save_bundle\(path\)"):
        given(x).sum().backward()


def test_lora_save_policies_and_autocast():
    # Seeded: under autocast the bf16 router may route a near tie of the
    # f32 one elsewhere, which would move the gradients past the tolerance.
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(11, 40, generator=gen)
    dy = torch.randn(11, 40, generator=gen)
    grads = {}
    for save in ("all", "matmuls", "inputs"):
        block = lora_block(torch.float32, 7, save=save)
        block(x.clone().requires_grad_()).backward(dy)
        grads[save] = [a.grad for a in block.adapters()]
    for save in ("matmuls", "inputs"):
        for g, w in zip(grads[save], grads["all"]):
            assert torch.equal(g, w), save
    block = lora_block(torch.float32, 7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = block(x)
    assert y.dtype == torch.bfloat16
    y.float().backward(dy)
    for g, w in zip((a.grad for a in block.adapters()), grads["all"]):
        assert g.dtype == torch.float32 and rel(g, w) < 3e-2


def test_lora_training_ops_opcheck():
    block = lora_block(torch.float32, 3)
    x = torch.randn(11, 40, requires_grad=True)
    args = (x, block.gate.weight, block.w_gate_up, block.w_down,
            list(block.adapters()), [], block._launcher, [])
    torch.library.opcheck(torch.ops.moec.moe_block_train.default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))


def test_lora_torch_compile_fullgraph():
    # A LoRA block between torch layers compiles without a graph break, and
    # the compiled backward gives eager mode's adapter gradients.
    torch._dynamo.reset()
    block = lora_block(torch.float32, 9)
    proj = torch.nn.Linear(40, 40)

    def model(x):
        return x + block(torch.relu(proj(x)))

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 7, 40, generator=torch.Generator().manual_seed(9))
    compiled(x).sum().backward()
    got = [a.grad.clone() for a in block.adapters()] + [proj.weight.grad.clone()]
    block.zero_grad()
    proj.zero_grad()
    model(x).sum().backward()
    want = [a.grad for a in block.adapters()] + [proj.weight.grad]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
