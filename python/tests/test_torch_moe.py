"""moec.torch.MoE on the host backend (torch CPU tensors) against the same
block in float64 torch, its argument errors, and its custom op under
torch.compile."""

import os

import pytest

# make test installs torch into the full package's venv and sets
# MOEC_TEST_EXPECT_TORCH=1 there: a missing torch then fails, not skips.
if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import moec.torch  # noqa: E402

pytestmark = pytest.mark.compiler

# ‖out − ref‖ / ‖ref‖ against float64; the kernels round their
# intermediates (gate_up, SwiGLU, down) to the block's dtype.
TOL = {torch.bfloat16: 1e-2, torch.float16: 1e-3, torch.float32: 2e-6}
ROUTINGS = [("softmax_then_topk", True),    # Qwen3
            ("softmax_then_topk", False),   # OLMoE
            ("topk_then_softmax", True)]    # Mixtral


def reference(x, gate_w, w_gate_up, w_down, k, routing, norm_topk_prob):
    """The block as transformers computes it, in float64: (out [T, H],
    expert ids [T, k])."""
    x, gate_w, w_gate_up, w_down = (t.double() for t in
                                    (x, gate_w, w_gate_up, w_down))
    logits = x @ gate_w.T
    if routing == "topk_then_softmax":
        top, ids = logits.topk(k, dim=-1)
        weights = top.softmax(dim=-1)
    else:
        weights, ids = logits.softmax(dim=-1).topk(k, dim=-1)
        if norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
    inter = w_down.shape[2]
    out = torch.zeros_like(x)
    for e in range(gate_w.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        h = x[token] @ w_gate_up[e].T
        a = F.silu(h[:, :inter]) * h[:, inter:]
        out.index_add_(0, token, (a @ w_down[e].T) * weights[token, slot,
                                                              None])
    return out, ids


def rel(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def make_block(hidden, inter, experts=8, k=2, routing="softmax_then_topk",
               norm_topk_prob=True, dtype=torch.bfloat16, seed=0):
    """A block with fresh random weights; router rows scaled so that logits
    are of order 1, as in a trained router."""
    gen = torch.Generator().manual_seed(seed)
    block = moec.torch.MoE(hidden, inter, experts, k, routing=routing,
                           norm_topk_prob=norm_topk_prob, dtype=dtype)
    with torch.no_grad():
        for p, fan_in in ((block.gate.weight, hidden),
                          (block.w_gate_up, hidden), (block.w_down, inter)):
            p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
    return block


def check(block, x, dtype):
    with torch.no_grad():
        y = block(x)
    assert y.shape == x.shape and y.dtype == dtype
    tokens = x.reshape(-1, block.hidden_size)
    ref, ids = reference(tokens, block.gate.weight, block.w_gate_up,
                         block.w_down, block.top_k, block.routing,
                         block.norm_topk_prob)
    err = rel(y.reshape(tokens.shape), ref)
    assert err < TOL[dtype], f"rel error {err:.2e}"
    return ids


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16,
                                   torch.float32])
@pytest.mark.parametrize("routing,norm_topk_prob", ROUTINGS)
@pytest.mark.parametrize("hidden,inter", [(64, 32), (40, 20)])
def test_matches_float64(dtype, routing, norm_topk_prob, hidden, inter):
    # (40, 20): sizes that are not multiples of the 16-wide tiles.
    block = make_block(hidden, inter, routing=routing,
                       norm_topk_prob=norm_topk_prob, dtype=dtype, seed=1)
    x = torch.randn(3, 13, hidden, generator=torch.Generator().manual_seed(2))
    check(block, x.to(dtype), dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("tokens,bias_to", [
    (1, None),       # one token: six of the eight experts get none
    (29, [3]),       # every token routes to expert 3 (and one other)
    (29, [3, 5]),    # every token to experts 3 and 5, six experts empty
])
def test_edge_cases(dtype, tokens, bias_to):
    block = make_block(40, 20, dtype=dtype, seed=3)
    x = torch.randn(tokens, 40, generator=torch.Generator().manual_seed(4))
    if bias_to is not None:
        # Positive features and raised router rows: the biased experts'
        # logits lead by about 6, so their weights stay below 1 and the
        # other slots keep a small share.
        x = x.abs()
        with torch.no_grad():
            block.gate.weight[bias_to] += 6.0 / (0.8 * 40)
    ids = check(block, x.to(dtype), dtype)
    if bias_to is not None:  # the routing the case is about
        for e in bias_to:
            assert (ids == e).any(dim=1).all()
        used = set(ids.unique().tolist())
        assert len(bias_to) < 2 or used == set(bias_to)


def test_no_tokens():
    block = make_block(64, 32)
    with torch.no_grad():
        assert block(torch.empty(0, 64, dtype=torch.bfloat16)).shape == (0, 64)
        assert block(torch.empty(2, 0, 64,
                                 dtype=torch.bfloat16)).shape == (2, 0, 64)


def test_bad_inputs_name_the_argument():
    block = make_block(64, 32)
    with pytest.raises(ValueError, match="'x': expected last dimension 64"):
        block(torch.randn(5, 48, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="'x': expected dtype torch.bfloat16"):
        block(torch.randn(5, 64))
    with pytest.raises(ValueError, match="'dtype'"):
        moec.torch.MoE(64, 32, 8, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="'routing'"):
        moec.torch.MoE(64, 32, 8, 2, routing="sigmoid")
    with pytest.raises(ValueError, match="'top_k' \\(9\\) exceeds"):
        moec.torch.MoE(64, 32, 8, 9)


def test_load_hf_state_dict_fused_and_per_expert():
    E, H, I = 4, 40, 20
    gen = torch.Generator().manual_seed(5)
    gate = torch.randn(E, H, generator=gen)
    gate_up = torch.randn(E, 2 * I, H, generator=gen)
    down = torch.randn(E, H, I, generator=gen)
    fused = {"mlp.gate.weight": gate, "mlp.experts.gate_up_proj": gate_up,
             "mlp.experts.down_proj": down}
    qwen = {"gate.weight": gate}
    mixtral = {"gate.weight": gate}
    for e in range(E):
        for names, state in ((("gate_proj", "up_proj", "down_proj"), qwen),
                             (("w1", "w3", "w2"), mixtral)):
            state[f"experts.{e}.{names[0]}.weight"] = gate_up[e, :I]
            state[f"experts.{e}.{names[1]}.weight"] = gate_up[e, I:]
            state[f"experts.{e}.{names[2]}.weight"] = down[e]
    for state, prefix in ((fused, "mlp."), (qwen, ""), (mixtral, "")):
        block = moec.torch.MoE(H, I, E, 2, dtype=torch.float32)
        block.load_hf_state_dict(state, prefix)
        assert torch.equal(block.gate.weight, gate)
        assert torch.equal(block.w_gate_up, gate_up)
        assert torch.equal(block.w_down, down)
    del qwen["experts.2.up_proj.weight"]
    with pytest.raises(KeyError, match="'experts.2.up_proj.weight'"):
        block.load_hf_state_dict(qwen)


def test_blocks_of_one_configuration_compile_once(monkeypatch):
    calls = []
    compile_ = moec.torch._moe._compile
    monkeypatch.setattr(moec.torch._moe, "_compile",
                        lambda *a, **kw: calls.append(a) or compile_(*a, **kw))
    # A size used nowhere else in this file: its configuration is new here.
    blocks = [make_block(48, 24, seed=s) for s in range(3)]
    other = make_block(48, 24, routing="topk_then_softmax")
    x = torch.randn(7, 48, dtype=torch.bfloat16)
    with torch.no_grad():
        for block in blocks + [other]:
            block(x)
    assert len(calls) == 2


def test_custom_op_opcheck():
    # Schema, fake (meta) implementation and autograd registration as
    # torch checks them (the training ops: test_torch_train.py).
    block = make_block(40, 20, dtype=torch.float32)
    x = torch.randn(11, 40)
    args = (x, block.gate.weight.detach(), block.w_gate_up.detach(),
            block.w_down.detach(), [], block._launcher, [])
    torch.library.opcheck(torch.ops.moec.moe_block.default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))


class TwoLayers(nn.Module):
    """A model holding moec blocks between torch layers."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64, dtype=torch.bfloat16)
        self.moe1 = make_block(64, 32, seed=6)
        self.moe2 = make_block(64, 32, routing="topk_then_softmax", seed=7)

    def forward(self, x):
        h = x + self.moe1(torch.relu(self.proj(x)))
        return h + self.moe2(h)


# Importing inductor scripts a module with the deprecated torch.jit API.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    torch._dynamo.reset()
    model = TwoLayers()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append(gm)
        if backend == "eager":
            return gm.forward
        return torch._dynamo.lookup_backend(backend)(gm, example_inputs)

    # fullgraph=True: a graph break is an error.
    compiled = torch.compile(model, fullgraph=True, backend=recording)
    gen = torch.Generator().manual_seed(8)
    for shape in ((2, 9, 64), (3, 17, 64)):  # a new T: no break either
        x = torch.randn(shape, generator=gen).bfloat16()
        with torch.no_grad():
            y, ref = compiled(x), model(x)
        # Inductor's generated C++ for the torch layers may round otherwise.
        assert (torch.equal(y, ref) if backend != "inductor"
                else rel(y, ref) < 1e-2)
    ops = [n.target for gm in graphs for n in gm.graph.nodes
           if n.op == "call_function"]
    assert ops.count(torch.ops.moec.moe_block.default) + ops.count(
        torch.ops.moec.moe_block) >= 2, ops

    # With grad enabled the training ops compile too, backward included:
    # the gradients are eager mode's.
    x = torch.randn(2, 5, 64, generator=gen).bfloat16()
    compiled(x).float().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).float().sum().backward()
    for g, p in zip(got, model.parameters()):
        assert (torch.equal(g, p.grad) if backend != "inductor"
                else rel(g, p.grad) < 2e-2)
    ops = [n.target for gm in graphs for n in gm.graph.nodes
           if n.op == "call_function"]
    assert (torch.ops.moec.moe_block_train in ops or
            torch.ops.moec.moe_block_train.default in ops), ops
