"""moec.torch.MoE(fp8="blockwise") on the host backend: FP8 training's
gradients against float64 next to the bf16 block's on the same inputs, the
edge cases of the routing, autocast with f32 master weights, main
gradients, torch.compile, bundles and the errors."""

import os

import pytest

if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

import moec  # noqa: E402
import moec.torch  # noqa: E402
from moec.layers import entry_runs_fp8  # noqa: E402
from test_torch_moe import rel  # noqa: E402
from test_torch_train import kernel_ids, reference_grads  # noqa: E402

pytestmark = pytest.mark.compiler
# H and I not multiples of the recipe's 128: partial groups and blocks.
H, I, E, K = 160, 96, 6, 2
NAMES = ("x", "gate", "w_gate_up", "w_down")
# e4m3 has 3 mantissa bits (a rounding is up to 2^-4 relative): the FP8
# gradients measure 5-7 % from float64 here, the f32 kernels' 1e-6.
FP8_TOL = 0.1


def fp8_block(seed=0, dtype=torch.float32, **options):
    gen = torch.Generator().manual_seed(seed)
    block = moec.torch.MoE(H, I, E, K, dtype=dtype, fp8="blockwise",
                           **options)
    with torch.no_grad():
        for p, fan_in in ((block.gate.weight, H), (block.w_gate_up, H),
                          (block.w_down, I)):
            p.copy_(torch.randn(p.shape, generator=gen) / fan_in ** 0.5)
    return block


def gradients(block, x, dy):
    x = x.detach().clone().requires_grad_()
    block.zero_grad()
    block(x).backward(dy)
    return [x.grad, block.gate.weight.grad, block.w_gate_up.grad,
            block.w_down.grad]


def errors(block, x, dy):
    """{name: ‖g − ref‖/‖ref‖} of the block's gradients against float64
    with the kernel's routing."""
    got = gradients(block, x, dy)
    want = reference_grads(block, x, dy, kernel_ids(block, x))
    return {n: rel(g, w) for n, g, w in zip(NAMES, got, want)}


@pytest.mark.parametrize("tokens,bias_to", [
    (1, None),     # one token: four of the six experts get none
    (37, None),
    (300, None),   # experts with more than one 128-row block
    (45, [2]),     # every token routes to expert 2 (and one other)
])
def test_fp8_gradients_against_float64_next_to_bf16(tokens, bias_to):
    block = fp8_block(seed=tokens)
    plain = moec.torch.MoE(config=block.config.replace(fp8=None))
    plain.load_state_dict(block.state_dict())
    gen = torch.Generator().manual_seed(tokens + 1)
    x = torch.randn(tokens, H, generator=gen)
    if bias_to is not None:
        x = x.abs()
        with torch.no_grad():
            for b in (block, plain):
                b.gate.weight[bias_to] += 6.0 / (0.8 * H)
    dy = torch.randn(tokens, H, generator=gen)
    if bias_to is not None:
        ids = kernel_ids(block, x)
        assert all((ids == e).any(dim=1).all() for e in bias_to)
    fp8 = errors(block, x, dy)
    f32 = errors(plain, x, dy)
    for name in NAMES:
        # The router's gradient of one token is a difference of two
        # expert outputs' products with dy: its error doubles (12 %).
        tol = 2 * FP8_TOL if name == "gate" and tokens == 1 else FP8_TOL
        assert fp8[name] < tol, (name, fp8, f32)
        # FP8 really ran: its error is far above the f32 kernels'.
        assert fp8[name] > 100 * f32[name], (name, fp8, f32)


def test_fp8_bf16_block_and_no_tokens():
    block = fp8_block(seed=5, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(29, H, generator=gen).bfloat16()
    dy = torch.randn(29, H, generator=gen).bfloat16()
    got = errors(block, x, dy)
    assert all(e < FP8_TOL for e in got.values()), got
    with torch.no_grad():
        assert block(x[:0]).shape == (0, H)
    empty = x[:0].clone().requires_grad_()
    block.zero_grad()
    block(empty).sum().backward()
    assert empty.grad.shape == (0, H)
    assert block.w_down.grad.abs().max() == 0


def test_fp8_inference_is_the_training_forward():
    block = fp8_block(seed=7)
    x = torch.randn(21, H, generator=torch.Generator().manual_seed(8))
    y = block(x.requires_grad_())
    with torch.no_grad():
        inference = block(x)
    assert rel(inference, y.detach()) < 1e-6
    plain = moec.torch.MoE(config=block.config.replace(fp8=None))
    plain.load_state_dict(block.state_dict())
    with torch.no_grad():
        assert 1e-3 < rel(inference, plain(x)) < FP8_TOL


def test_fp8_autocast_trains_f32_master_weights():
    block = fp8_block(seed=9)
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(33, H, generator=gen)
    dy = torch.randn(33, H, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = block(x)
    assert y.dtype == torch.bfloat16
    y.float().backward(dy)
    for p in (block.w_gate_up, block.w_down, block.gate.weight):
        assert p.grad.dtype == torch.float32
    want = reference_grads(block, x, dy, kernel_ids(block, x))
    for name, g, w in zip(NAMES[1:], (block.gate.weight.grad,
                                      block.w_gate_up.grad,
                                      block.w_down.grad), want[1:]):
        assert rel(g, w) < FP8_TOL, name


@pytest.mark.parametrize("save", ["matmuls", "inputs"])
def test_fp8_save_policies_give_the_same_gradients(save):
    # The backward recomputes what the forward did not keep with the same
    # FP8 kernels (the same quantizations): bitwise the same gradients.
    gen = torch.Generator().manual_seed(3)
    x, dy = torch.randn(41, H, generator=gen), torch.randn(41, H,
                                                            generator=gen)
    want = gradients(fp8_block(seed=2), x, dy)
    got = gradients(fp8_block(seed=2, save=save), x, dy)
    for name, g, w in zip(NAMES, got, want):
        assert torch.equal(g, w), name


def test_fp8_saves_the_weight_gradients_operands_in_fp8():
    # moe-fp8-recipe: the permuted rows [T*k, H] and the SwiGLU output
    # [T*k, I], which the backward reads only as the weight gradients' FP8
    # operands, are saved quantized (data [H | I, padded rows] e4m3 and
    # their scales) instead of in the block's dtype. Each expert's rows are
    # padded to 128-row blocks (up to 127 * E rows more): fewer bytes than
    # bf16 once T*k > 127 * E.
    from moec.torch._moe import _LAUNCHERS
    blocks = (fp8_block(dtype=torch.bfloat16),
              moec.torch.MoE(H, I, E, K, dtype=torch.bfloat16))

    def saved(block, tokens):
        x = torch.empty(tokens, H, dtype=torch.bfloat16)
        return _LAUNCHERS[block._launcher].saved_specs(x)[1:]

    def nbytes(specs):
        return sum(torch.Size(s).numel() * torch.empty((), dtype=d)
                   .element_size() for s, d in specs)

    for tokens in (37, 600):
        fp8, wide = (saved(b, tokens) for b in blocks)
        shapes = [[s for s, _ in specs] for specs in (fp8, wide)]
        # [T*k, H]: the rows, and the down projection's output (unpermute's
        # weights gradient reads it), which stays.
        rows, swiglu = (tokens * K, H), (tokens * K, I)
        assert shapes[1].count(rows) == 2 and shapes[0].count(rows) == 1
        assert swiglu in shapes[1] and swiglu not in shapes[0]
        data = [s for s, d in fp8 if d == torch.float8_e4m3fn]
        assert [s[0] for s in data] == [H, I]  # the transposed copies
        saving = nbytes(wide) - nbytes(fp8)
        assert saving > 0 if tokens * K > 127 * E else saving < 0


def test_fp8_main_grad_accumulates():
    block = fp8_block(seed=11, main_grad=True)
    plain = fp8_block(seed=11)
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 19, H, generator=gen)
    for part in x:  # two micro-batches
        block(part).sum().backward()
        plain(part).sum().backward()
    assert block.w_down.grad is None
    for name in ("w_gate_up", "w_down"):
        main = getattr(block, name).main_grad
        # f32 main gradient against the f32 .grad sum of the same kernels.
        assert rel(main, getattr(plain, name).grad) < 1e-5, name


@pytest.mark.parametrize("keep", [False, True])
def test_fp8_torch_compile_fullgraph(keep):
    torch._dynamo.reset()
    block = fp8_block(seed=13, keep_fp8_weights=keep)
    proj = torch.nn.Linear(H, H)

    def model(x):
        return x + block(torch.relu(proj(x)))

    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 7, H, generator=torch.Generator().manual_seed(13))
    compiled(x).sum().backward()
    got = [block.w_gate_up.grad.clone(), proj.weight.grad.clone()]
    block.zero_grad()
    proj.zero_grad()
    model(x).sum().backward()
    for g, w in zip(got, (block.w_gate_up.grad, proj.weight.grad)):
        assert torch.equal(g, w)


def test_fp8_bundles_are_checked(tmp_path):
    block = fp8_block(seed=14)
    path = tmp_path / "fp8.moecb"
    bundle = block.save_bundle(path, target="host")
    for entry in bundle.entries:
        assert entry_runs_fp8(entry), entry.name
    given = moec.torch.MoE(config=block.config, bundle=moec.load(path))
    given.load_state_dict(block.state_dict())
    x = torch.randn(9, H, generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        assert torch.equal(given(x), block(x))
    plain = moec.torch.MoE(config=block.config.replace(fp8=None))
    with pytest.raises(ValueError, match=r"moe_block \[host\] runs its "
                       r"expert matmuls in FP8, the block has fp8=None"):
        moec.torch.MoE(config=plain.config, bundle=bundle)
    with pytest.raises(ValueError, match=r"runs its expert matmuls in f32, "
                       r"the block has fp8='blockwise'"):
        moec.torch.MoE(config=block.config,
                       bundle=plain.compile("host", training=False))


def test_fp8_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"'fp8': expected one of blockwise"):
        moec.torch.MoE(H, I, E, K, fp8="tensorwise")
    with pytest.raises(ValueError, match=r"'fp8'"):
        moec.MoEConfig(H, I, E, K, fp8=True)


class CountingQuantizer:
    """A `<entry>_fp8_weights` entry that counts its calls."""

    def __init__(self, entry):
        self.entry, self.calls = entry, 0

    def __getattr__(self, name):
        return getattr(self.entry, name)

    def __call__(self, *args):
        self.calls += 1
        return self.entry(*args)


def counting(block, dtype=None):
    """The block's launcher (of the kernels of `dtype`: under autocast)
    with every FP8 weight quantizer (each entry's and the training
    forward's step quantizer) counted from zero (those made by a first
    call), and that launcher's cache emptied."""
    from moec.torch._moe import _LAUNCHERS
    launcher = _LAUNCHERS[block._launcher if dtype is None
                          else block._launcher_for(dtype)]
    launcher.fp8_cache.clear()

    def counted(q):
        return q and CountingQuantizer(
            q.entry if isinstance(q, CountingQuantizer) else q)
    launcher._quantizers = {
        key: found and found._replace(quantizer=counted(found.quantizer),
                                      step=counted(found.step))
        for key, found in launcher._quantizers.items()}
    return launcher


def calls(launcher) -> int:
    return sum(q.calls for found in launcher._quantizers.values()
               if found is not None for q in (found.quantizer, found.step)
               if q is not None)


def test_fp8_weights_are_quantized_once_per_version():
    """Weights that train are quantized on every call and keep no copies.
    Frozen ones (requires_grad False) are quantized once while they stay
    as they are (inference, training x over several micro-batches), again
    after an in-place change and after clear_fp8_weights(); the results
    equal a fresh quantization's bitwise."""
    block = fp8_block(seed=7, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(40, H, generator=gen).bfloat16()
    dy = torch.randn(40, H, generator=gen).bfloat16()
    with torch.no_grad():
        first = block(x)      # compiles; the quantizers now exist
    gradients(block, x, dy)   # the training entries' too
    launcher = counting(block)
    with torch.no_grad():
        assert torch.equal(block(x), first) and torch.equal(block(x), first)
    assert calls(launcher) == 2 and len(launcher.fp8_cache) == 0
    # Frozen: once for the inference forward...
    block.requires_grad_(False)
    with torch.no_grad():
        y = block(x)
        assert torch.equal(block(x), y) and calls(launcher) == 3
    assert torch.equal(y, first)

    def dx():
        xg = x.clone().requires_grad_()
        block(xg).backward(dy)
        return xg.grad
    # ...and once for the training forward's and the backward's
    # (transposed) copies over three micro-batches: one call of the step
    # quantizer makes both (one read of the weights).
    grads = [dx() for _ in range(3)]
    assert calls(launcher) == 4
    assert all(torch.equal(g, grads[0]) for g in grads[1:])
    # An in-place change, seen by the version counter.
    with torch.no_grad():
        block.w_down.mul_(0.5)
        block.w_gate_up.add_(0.01)
        z = block(x)
    assert calls(launcher) == 5 and not torch.equal(z, y)
    fresh = fp8_block(seed=7, dtype=torch.bfloat16)
    fresh.load_state_dict(block.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(x), z)
    # A write through .data is not seen until clear_fp8_weights().
    block.w_down.data.mul_(2.0)
    moec.torch.clear_fp8_weights()
    with torch.no_grad():
        after = block(x)
    assert calls(launcher) == 7 and not torch.equal(after, z)
    # A freed weight takes its copies with it.
    size = len(launcher.fp8_cache)
    del block, fresh
    import gc
    gc.collect()
    assert len(launcher.fp8_cache) < size


def test_keep_fp8_weights_over_micro_batches():
    """keep_fp8_weights=True: weights that train keep their FP8 copies too.
    Over three micro-batches of gradient accumulation the forward's and the
    backward's copies are made once (one step quantizer call), again after
    the optimizer step; every gradient equals bitwise that of a block
    without it, which quantizes on every call."""
    kept = fp8_block(seed=21, dtype=torch.bfloat16, keep_fp8_weights=True)
    plain = fp8_block(seed=21, dtype=torch.bfloat16)
    assert kept.keep_fp8_weights and not plain.keep_fp8_weights
    assert "keep_fp8_weights" not in repr(plain)
    assert "keep_fp8_weights=True" in repr(kept)
    gen = torch.Generator().manual_seed(22)
    xs = torch.randn(3, 40, H, generator=gen).bfloat16()
    dy = torch.randn(40, H, generator=gen).bfloat16()
    for b in (kept, plain):
        gradients(b, xs[0], dy)  # compiles; the quantizers now exist
    launcher, others = counting(kept), counting(plain)
    optimizers = [torch.optim.SGD(b.parameters(), lr=0.1)
                  for b in (kept, plain)]
    for step in range(2):
        for b, opt in zip((kept, plain), optimizers):
            opt.zero_grad()
            for x in xs:
                b(x).backward(dy)
        assert calls(launcher) == step + 1, step
        assert calls(others) == 6 * (step + 1), step
        for name in NAMES[1:]:
            p = "gate.weight" if name == "gate" else name
            assert torch.equal(kept.get_parameter(p).grad,
                               plain.get_parameter(p).grad), (step, name)
        # The forward's and the backward's copies, kept until the step.
        assert len(launcher.fp8_cache) == 2 and len(others.fp8_cache) == 0
        for opt in optimizers:
            opt.step()  # a new version of every weight: new copies
        assert len(launcher.fp8_cache) == 0  # freed before the step


def test_kept_fp8_weights_go_at_an_optimizer_step():
    """Kept copies of weights that train are dropped before any torch.optim
    step, also where the weights changed without their version counter
    seeing it (a write through .data); frozen weights keep theirs."""
    kept = fp8_block(seed=26, dtype=torch.bfloat16, keep_fp8_weights=True)
    frozen = fp8_block(seed=27, dtype=torch.bfloat16).requires_grad_(False)
    x = torch.randn(30, H, generator=torch.Generator().manual_seed(28))
    x = x.bfloat16()
    dy = torch.ones_like(x)
    for b in (kept, frozen):
        gradients(b, x, dy)
    launcher, still = counting(kept), counting(frozen)
    gradients(kept, x, dy)
    with torch.no_grad():
        frozen(x)
    before = gradients(kept, x, dy)[0]  # dx: it reads w_down's copies
    assert calls(launcher) == 1 and calls(still) == 1
    kept.w_down.data.mul_(2.0)  # not seen by the version counter
    other = torch.nn.Parameter(torch.zeros(3))
    other.grad = torch.ones(3)
    torch.optim.SGD([other], lr=0.1).step()  # an unrelated optimizer
    assert len(launcher.fp8_cache) == 0 and len(still.fp8_cache) == 1
    after = gradients(kept, x, dy)[0]
    assert calls(launcher) == 2  # quantized again: the doubled w_down
    assert not torch.equal(after, before)
    with torch.no_grad():
        frozen(x)
    assert calls(still) == 1


def test_fp8_copies_follow_the_parameters_under_autocast():
    """Under autocast the kernels take a new bf16 cast of each f32
    parameter on every call; the kept copies follow the parameter: made
    once over micro-batches with keep_fp8_weights=True, and once for a
    frozen block (the LoRA base under autocast) without it."""
    gen = torch.Generator().manual_seed(23)
    x = torch.randn(35, H, generator=gen)
    dy = torch.randn(35, H, generator=gen)

    def step(block):
        xg = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = block(xg)
        y.float().backward(dy)
        return [xg.grad] + [p.grad for p in (block.gate.weight,
                                             block.w_gate_up, block.w_down)]

    kept = fp8_block(seed=24, keep_fp8_weights=True)
    plain = fp8_block(seed=24)
    for b in (kept, plain):
        step(b)  # compiles the bf16 kernels
    launcher = counting(kept, torch.bfloat16)
    kept.zero_grad()
    plain.zero_grad()
    for _ in range(3):
        want, got = step(plain), step(kept)
    assert calls(launcher) == 1
    for name, g, w in zip(NAMES, got, want):
        assert g.dtype == torch.float32 and torch.equal(g, w), name
    with torch.no_grad():
        kept.w_down.mul_(0.5)  # the f32 parameter's version moves
    step(kept)
    assert calls(launcher) == 2
    frozen = fp8_block(seed=25, lora_rank=4)

    def lora_step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            frozen(x.clone().requires_grad_()).float().backward(dy)
    lora_step()
    launcher = counting(frozen, torch.bfloat16)
    for _ in range(3):
        lora_step()
    assert calls(launcher) == 1


def test_keep_fp8_weights_errors():
    with pytest.raises(ValueError, match=r"'keep_fp8_weights': the block "
                       r"keeps FP8 weight copies only with fp8='blockwise'"):
        moec.torch.MoE(H, I, E, K, keep_fp8_weights=True)
    with pytest.raises(ValueError, match=r"'keep_fp8_weights': expected a "
                       r"bool, got 1"):
        moec.MoEConfig(H, I, E, K, fp8="blockwise", keep_fp8_weights=1)
    from moec.ep import ExpertParallelMoE, ep_module
    for make in (ExpertParallelMoE, ep_module):
        with pytest.raises(ValueError, match=r"'keep_fp8_weights': "
                           r"ExpertParallelMoE's entries quantize"):
            make(H, I, E, K, fp8="blockwise", keep_fp8_weights=True)


def test_gradient_fp8_weights_as_arguments():
    """Kernel.grad(fp8=..., fp8_weights="arguments"): quantize_weights makes
    the copies forward and backward take; given or made on the spot, the
    results are the same bitwise. Wrong counts, a gradient without them
    and an unknown `which` are errors naming the argument."""
    block = fp8_block(seed=3)
    config = block.config
    kernel = config.kernel()
    grad = kernel.grad(fp8="blockwise", fp8_weights="arguments")
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(50, H, generator=gen)
    dy = torch.randn(50, H, generator=gen)
    args = (x, block.gate.weight.detach(), block.w_gate_up.detach(),
            block.w_down.detach())
    fwd_w = grad.quantize_weights(args, "forward")
    bwd_w = grad.quantize_weights(args, "backward")
    assert len(fwd_w) == len(bwd_w) == 4   # data and scales, two weights
    assert fwd_w[0].shape == block.w_gate_up.shape
    assert bwd_w[0].shape == (E, H, 2 * I)  # the transposed copy
    outs, saved = grad.forward(*args, fp8_weights=fwd_w)
    outs2, saved2 = grad.forward(*args)
    assert all(torch.equal(a, b) for a, b in zip(outs + saved,
                                                 outs2 + saved2))
    d = grad.backward(args, saved, (dy,), fp8_weights=bwd_w)
    d2 = grad.backward(args, saved, (dy,))
    assert all(torch.equal(a, b) for a, b in zip(d, d2))
    # "both": the two sets from one entry, which reads each weight once
    # for both layouts; bitwise the two quantizers' copies.
    both_fwd, both_bwd = grad.quantize_weights(args, "both")
    assert len(both_fwd) == len(fwd_w) and len(both_bwd) == len(bwd_w)

    def bits(t):
        return t.view(torch.uint8) if t.element_size() == 1 else t
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(
        both_fwd + both_bwd, fwd_w + bwd_w))
    # Inline: the same numbers, no copies to pass.
    inline = kernel.grad(fp8="blockwise")
    assert inline.quantize_weights(args, "forward") == ()
    assert inline.quantize_weights(args, "both") == ((), ())
    outs3, _ = inline.forward(*args)
    assert torch.equal(outs3[0], outs[0])
    with pytest.raises(ValueError, match="'fp8_weights': .* takes 4 "):
        grad.forward(*args, fp8_weights=fwd_w[:2])
    with pytest.raises(ValueError, match="quantizes its own weights"):
        inline.forward(*args, fp8_weights=fwd_w)
    with pytest.raises(ValueError, match="'which': expected forward, "
                                         "backward or both"):
        grad.quantize_weights(args, "grad")
    with pytest.raises(ValueError, match="'fp8_weights': expected one of "
                                         "inline, arguments"):
        kernel.grad(fp8="blockwise", fp8_weights="cached")


@pytest.mark.parametrize("tokens", [1, 37, 300])
def test_fp8_lora_frozen_base_against_float64(tokens):
    """LoRA on a frozen FP8 base: the base matmuls in FP8, the adapters'
    products in the block's dtype (moe-fp8-recipe splits them off). The
    gradients of x and the four adapters against float64 next to the f32
    block's; the base's FP8 copies are made once over three steps whose
    adapters change (an optimizer step on them)."""
    block = fp8_block(seed=20 + tokens, lora_rank=8, lora_alpha=16)
    gen = torch.Generator().manual_seed(tokens)
    with torch.no_grad():
        for b in (block.gate_up_lora_B, block.down_lora_B):  # not zero
            b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
    plain = moec.torch.MoE(config=block.config.replace(fp8=None))
    plain.load_state_dict(block.state_dict())
    x = torch.randn(tokens, H, generator=gen)
    dy = torch.randn(tokens, H, generator=gen)
    names = ("x",) + moec.torch.LORA_ARGS

    def lora_errors(b):
        xg = x.clone().requires_grad_()
        b.zero_grad()
        b(xg).backward(dy)
        got = [xg.grad] + [a.grad for a in b.adapters()]
        want = reference_grads(b, x, dy, kernel_ids(b, x))
        return {n: rel(g, w) for n, g, w in zip(names, got, want)}
    fp8, f32 = lora_errors(block), lora_errors(plain)
    for name in names:
        assert fp8[name] < FP8_TOL, (name, fp8, f32)
        assert fp8[name] > max(10 * f32[name], 1e-4), (name, fp8, f32)
    launcher = counting(block)
    for _ in range(3):
        lora_errors(block)
        with torch.no_grad():
            for a in block.adapters():
                a.add_(0.01)
    # The forward's copies and the backward's, from one step quantizer call.
    assert calls(launcher) == 1
