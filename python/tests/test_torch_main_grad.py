"""moec.torch.MoE(main_grad=True) on the host backend: the expert weights'
gradients added to f32 `.main_grad` tensors inside the weight-gradient
kernels (gradient accumulation over micro-batches), against float64 torch
autograd; in place in tensors the user gives; argument errors; the
training ops under opcheck and torch.compile."""

import os

import pytest

if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

import moec.torch  # noqa: E402
from test_torch_moe import make_block, rel  # noqa: E402
from test_torch_train import GRAD_TOL, kernel_ids, reference_grads  # noqa: E402

pytestmark = pytest.mark.compiler


def main_grad_block(dtype, seed, experts=6, hidden=40, inter=24):
    """make_block's weights in a main_grad=True block."""
    base = make_block(hidden, inter, experts=experts, k=2, dtype=dtype,
                      seed=seed)
    block = moec.torch.MoE(hidden, inter, experts, 2, dtype=dtype,
                           main_grad=True)
    block.load_state_dict(base.state_dict())
    return block


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_main_grad_accumulates_micro_batches(dtype):
    block = main_grad_block(dtype, seed=4)
    gen = torch.Generator().manual_seed(4)
    # A flat f32 buffer whose views are the main gradients (as Megatron's
    # DDP buffer), starting nonzero.
    sizes = [block.w_gate_up.numel(), block.w_down.numel()]
    flat = torch.randn(sum(sizes), generator=gen)
    views = [flat[:sizes[0]].view(block.w_gate_up.shape),
             flat[sizes[0]:].view(block.w_down.shape)]
    block.w_gate_up.main_grad, block.w_down.main_grad = views
    want = [v.double().clone() for v in views]
    gate_want = 0
    # Micro-batches of 13 tokens, one token (4 of 6 experts get no rows)
    # and all tokens on expert 0.
    for tokens, one_expert in ((13, False), (1, False), (9, True)):
        x = torch.randn(tokens, 40, generator=gen).to(dtype)
        if one_expert:
            x[:, 0] = 1.0
        dy = torch.randn(tokens, 40, generator=gen).to(dtype)
        with torch.no_grad():
            saved_gate = block.gate.weight[0, 0].item()
            if one_expert:
                block.gate.weight[0, 0] = 20.0
        before = [v.clone() for v in views]
        x.requires_grad_()
        block(x).backward(dy)
        ids = kernel_ids(block, x)
        if one_expert:
            assert (ids == 0).any(dim=1).all()
        ref = reference_grads(block, x, dy, ids)
        assert rel(x.grad, ref[0]) < GRAD_TOL[dtype]
        gate_want = gate_want + ref[1]
        for w, r in zip(want, ref[2:]):
            w += r
        # Experts that no token chose keep their main gradient exactly.
        empty = [e for e in range(6) if not (ids == e).any()]
        if tokens == 1:
            assert len(empty) == 4
        for v, b in zip(views, before):
            assert torch.equal(v[empty], b[empty])
        with torch.no_grad():
            block.gate.weight[0, 0] = saved_gate
    assert block.w_gate_up.grad is None and block.w_down.grad is None
    assert block.w_gate_up.main_grad is views[0]
    assert block.w_down.main_grad.data_ptr() == views[1].data_ptr()
    for v, w in zip(views, want):
        assert v.dtype == torch.float32
        assert rel(v, w) < GRAD_TOL[dtype]
    # The router's gradient went to .grad as usual (accumulated by torch in
    # the parameter's dtype).
    assert rel(block.gate.weight.grad, gate_want) < 3 * GRAD_TOL[dtype]
    block.zero_main_grad()
    assert not flat.any()


def test_main_grad_made_on_first_training_forward_and_autocast():
    block = main_grad_block(torch.float32, seed=2)
    x = torch.randn(7, 40)
    with torch.no_grad():
        block(x)
    assert getattr(block.w_down, "main_grad", None) is None
    plain = make_block(40, 24, experts=6, k=2, dtype=torch.float32, seed=2)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, y_plain = block(x), plain(x)
        y.float().sum().backward()
        y_plain.float().sum().backward()
    for name in ("w_gate_up", "w_down"):
        main = getattr(block, name).main_grad
        assert main.dtype == torch.float32
        assert rel(main, getattr(plain, name).grad) < 3e-2, name


def test_main_grad_errors():
    with pytest.raises(ValueError, match="'main_grad': a LoRA block"):
        moec.torch.MoE(32, 16, 4, 2, lora_rank=8, main_grad=True)
    with pytest.raises(ValueError, match="'main_grad': expected a bool"):
        moec.torch.MoE(32, 16, 4, 2, main_grad=1)
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32, main_grad=True)
    x = torch.randn(3, 32, requires_grad=True)
    block.w_down.main_grad = torch.zeros(block.w_down.shape,
                                         dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"'w_down.main_grad': expected a "
                                         r"contiguous float32 tensor of "
                                         r"shape \[4, 32, 16\]"):
        block(x)
    block.w_down.main_grad = torch.zeros(16, 32, 4).transpose(0, 2)
    with pytest.raises(ValueError, match="not contiguous"):
        block(x)


def test_main_grad_ops_opcheck_and_compile():
    block = main_grad_block(torch.float32, seed=5)
    x = torch.randn(11, 40, requires_grad=True)
    args = (x, block.gate.weight, block.w_gate_up, block.w_down, [],
            block.main_grads(), block._launcher, [])
    torch.library.opcheck(torch.ops.moec.moe_block_train.default, args,
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))
    outs = torch.ops.moec.moe_block_train(*[
        a.detach() if isinstance(a, torch.Tensor) else a for a in args])
    backward_args = (torch.randn(11, 40), x.detach(), block.gate.weight.detach(),
                     block.w_gate_up.detach(), block.w_down.detach(),
                     list(outs[1:]), *block.main_grads(), block._launcher, [])
    torch.library.opcheck(torch.ops.moec.moe_block_backward_main_grad.default,
                          backward_args,
                          test_utils=("test_schema", "test_faketensor"))
    # torch.compile traces the block and its backward without a graph
    # break; the main gradients match eager mode's.
    torch._dynamo.reset()
    block.zero_main_grad()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    compiled(x).sum().backward()
    got = [m.clone() for m in block.main_grads()]
    block.zero_main_grad()
    block(x).sum().backward()
    for g, w in zip(got, block.main_grads()):
        assert torch.equal(g, w)


def test_main_grad_with_a_given_bundle():
    # A precompiled bundle (a machine without the compiler) must hold the
    # backward of the block's kind: with main gradients or without.
    import moec
    plain = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32)
    without = moec.compile(plain.kernel().grad().module, "host")
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32, main_grad=True,
                           bundle=without)
    x = torch.randn(3, 32, requires_grad=True)
    with pytest.raises(ValueError, match="'bundle': its moe_block_grad was "
                                         "compiled without main gradients"):
        block(x)
    with_main = moec.compile(plain.kernel().grad(
        accumulate=["w_gate_up", "w_down"]).module, "host")
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32, main_grad=True,
                           bundle=with_main)
    block.load_state_dict(plain.state_dict())
    block(x).sum().backward()
    plain(x).sum().backward()
    assert torch.equal(block.w_down.main_grad, plain.w_down.grad)
    with pytest.raises(ValueError, match="compiled with main gradients, the "
                                         "block has main_grad=False"):
        moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32,
                       bundle=with_main)(x)
