"""The backward moe-autodiff derives (Kernel.grad), on the host backend.

Each rule against central differences of the moec forward (f32 kernels,
random directions), and the whole MoE block's gradient against the float64
reference's gradient (central differences of reference.moe_block, every
element), for each save policy, in f32 and bf16, with the edge cases: one
token (most experts empty), every token on one expert.
"""

import re

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec
from moec import ops
from moec.layers import moe_kernel

from conftest import rel_error
import reference

pytestmark = pytest.mark.compiler
BF16 = ml_dtypes.bfloat16
E, H, I, K = 4, 16, 8, 2


def _random(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _layer_inputs(rng, tokens, one_expert=False):
    x = _random(rng, tokens, H)
    gate_w = _random(rng, E, H, scale=0.5)
    if one_expert:
        # Every token's first choice is expert 0: a large logit from a
        # constant feature.
        x[:, 0] = 1.0
        gate_w[0, 0] = 8.0
    return [x, gate_w, _random(rng, E, 2 * I, H, scale=H ** -0.5),
            _random(rng, E, H, I, scale=I ** -0.5)]


def _reference_gradient(args, dy, eps=1e-6, **routing):
    """d<dy, moe_block(args)> / d args in float64, by central differences
    (the routing must not change under the step; checked)."""
    args = [reference.f64(a) for a in args]
    _, ids = reference.moe_block(*args, K, **routing)
    grads = []
    for i, arg in enumerate(args):
        grad = np.zeros_like(arg)
        for index in np.ndindex(arg.shape):
            values = []
            for step in (eps, -eps):
                moved = list(args)
                moved[i] = arg.copy()
                moved[i][index] += step
                out, moved_ids = reference.moe_block(*moved, K, **routing)
                assert (moved_ids == ids).all(), "the step changed the routing"
                values.append(float((out * dy).sum()))
            grad[index] = (values[0] - values[1]) / (2 * eps)
        grads.append(grad)
    return grads


@pytest.mark.parametrize("tokens,one_expert,save", [
    (7, False, "all"), (7, False, "matmuls"), (7, False, "inputs"),
    (1, False, "all"), (6, True, "all")])
def test_block_gradient_matches_float64(tokens, one_expert, save):
    rng = np.random.default_rng(tokens + 10 * one_expert)
    args = _layer_inputs(rng, tokens, one_expert)
    grad = moe_kernel(H, I, E, K, dtype="f32").grad(save=save)
    assert grad.wrt == ["x", "gate_w", "w_gate_up", "w_down"]
    (y,), saved = grad.forward(*args)
    ref_y, _ = reference.moe_block(*args, K)
    assert rel_error(y, ref_y) < 1e-5
    dy = _random(rng, tokens, H)
    got = grad.backward(args, saved, (dy,))
    want = _reference_gradient(args, reference.f64(dy))
    for name, g, w in zip(grad.wrt, got, want):
        assert g.shape == w.shape
        assert rel_error(g, w) < 1e-4, name


@pytest.mark.parametrize("order", ["softmax_then_topk", "topk_then_softmax"])
def test_block_gradient_bf16(order):
    # bf16 kernels against the float64 gradient of the bf16-rounded inputs:
    # the target of 1e-2.
    rng = np.random.default_rng(3)
    args = [a.astype(BF16) for a in _layer_inputs(rng, 9)]
    renormalize = order == "softmax_then_topk"
    grad = moe_kernel(H, I, E, K, routing=order, dtype="bf16",
                      norm_topk_prob=renormalize).grad()
    (y,), saved = grad.forward(*args)
    dy = _random(rng, 9, H).astype(BF16)
    got = grad.backward(args, saved, (dy,))
    want = _reference_gradient(args, reference.f64(dy), order=order,
                               renormalize=renormalize)
    for name, g, w in zip(grad.wrt, got, want):
        assert g.dtype == BF16
        assert rel_error(g, w) < 1e-2, name


def test_block_gradient_fp8():
    # moe-fp8-recipe on the forward and the derived backward: every expert
    # matmul in e4m3 with block scales, against the float64 gradient of the
    # bf16 inputs. e4m3 keeps 3 mantissa bits (relative rounding up to
    # 2^-4 per operand), so the bound is FP8's, not bf16's 1e-2; the bf16
    # kernel's own error on the same inputs is the floor it is compared to.
    rng = np.random.default_rng(5)
    args = [a.astype(BF16) for a in _layer_inputs(rng, 9)]
    kernel = moe_kernel(H, I, E, K, dtype="bf16")
    fp8, bf16 = kernel.grad(fp8="blockwise"), kernel.grad()
    grouped = re.findall(r"moe\.grouped_(?:matmul|weight_grad) .*", fp8.module)
    assert grouped and all("scales(" in op for op in grouped)
    assert "f8E4M3FN" in fp8.ir("moe") and "f8E4M3FN" not in bf16.module
    dy = _random(rng, 9, H).astype(BF16)
    want = _reference_gradient(args, reference.f64(dy))
    (y, ), saved = fp8.forward(*args)
    ref_y, _ = reference.moe_block(*[reference.f64(a) for a in args], K)
    assert rel_error(y, ref_y) < 0.1
    got = fp8.backward(args, saved, (dy,))
    (_, ), bf16_saved = bf16.forward(*args)
    floor = bf16.backward(args, bf16_saved, (dy,))
    for name, g, b, w in zip(fp8.wrt, got, floor, want):
        assert g.dtype == BF16 and g.shape == w.shape
        assert rel_error(g, w) < 0.1, name
        assert rel_error(g, w) > rel_error(b, w), name  # FP8 really ran
    with pytest.raises(ValueError, match="'fp8': expected one of blockwise"):
        kernel.grad(fp8="tensorwise")


def test_wrt_and_saved_values():
    kernel = moe_kernel(H, I, E, K, dtype="f32")
    grad = kernel.grad(wrt=["w_gate_up", "w_down"], save="matmuls")
    assert grad.wrt == ["w_gate_up", "w_down"]
    # Saved: the routing weights, slots, offsets, positions and the two
    # matmul outputs (no router gradient: no logits or ids); SwiGLU is
    # recomputed, and the permuted rows are never made: both functions
    # read the tokens by slot (gate_up's weight gradient included).
    assert len(grad.saved_results) == 6
    backward = grad.module.split("func.func @moe_block_grad")[1]
    derived = grad.module.split("func.func @moe_block_fwd")[1]
    assert "moe.permute " not in derived
    assert "moe.swiglu " in backward
    assert ("transpose_rhs" in backward
            and "moe.grouped_weight_grad" in backward)
    assert "router_topk_grad" not in backward
    rng = np.random.default_rng(5)
    args = _layer_inputs(rng, 5)
    (y,), saved = grad.forward(*args)
    dy = _random(rng, 5, H)
    d_w_gate_up, d_w_down = grad.backward(args, saved, (dy,))
    full = kernel.grad().backward(args, kernel.grad().forward(*args)[1], (dy,))
    assert rel_error(d_w_gate_up, full[2]) < 1e-6
    assert rel_error(d_w_down, full[3]) < 1e-6
    assert "moe_block_grad" in grad.ir("optimized")


@pytest.mark.parametrize("dtype,save", [("f32", "all"), ("bf16", "all"),
                                        ("f32", "matmuls")])
def test_accumulate_adds_to_main_gradients_in_place(dtype, save):
    # Two micro-batches into f32 main gradients that start nonzero: main +
    # both gradients, in the arrays given (in place), the other gradients
    # as without accumulate. One token: most experts get no rows and keep
    # their main gradient.
    kernel = moe_kernel(H, I, E, K, dtype=dtype)
    grad = kernel.grad(save=save, accumulate=["w_down", "w_gate_up"])
    plain = kernel.grad(save=save)
    assert grad.accumulate == ["w_gate_up", "w_down"]
    assert grad.wrt == plain.wrt == ["x", "gate_w", "w_gate_up", "w_down"]
    assert "accumulate(" in grad.module.split("func.func @moe_block_grad")[1]
    rng = np.random.default_rng(3)
    cast = (lambda a: a.astype(BF16)) if dtype == "bf16" else (lambda a: a)
    mains = [_random(rng, E, 2 * I, H), _random(rng, E, H, I)]
    want = [m.astype(np.float64) for m in mains]
    for tokens in (5, 1):
        before = [m.copy() for m in mains]
        args = [cast(a) for a in _layer_inputs(rng, tokens)]
        dy = cast(_random(rng, tokens, H))
        ref = plain.backward(args, plain.forward(*args)[1], (dy,))
        got = grad.backward(args, grad.forward(*args)[1], (dy,),
                            main_grads=mains)
        assert got[2] is mains[0] and got[3] is mains[1]
        assert mains[0].dtype == np.float32
        for g, r in zip(got[:2], ref[:2]):
            assert g.dtype == r.dtype and np.array_equal(g, r)
        for w, r in zip(want, ref[2:]):
            w += r.astype(np.float64)
        # Experts without rows keep their main gradient bit for bit.
        empty = [e for e in range(E) if not ref[3][e].any()]
        assert len(empty) == (E - K if tokens == 1 else len(empty))
        for m, b in zip(mains, before):
            assert np.array_equal(m[empty], b[empty])
    tol = 1e-2 if dtype == "bf16" else 1e-6
    for m, w in zip(mains, want):
        assert rel_error(m, w) < tol


def test_accumulate_errors():
    kernel = moe_kernel(H, I, E, K, dtype="f32")
    with pytest.raises(ValueError, match="'accumulate': moe_block has no "
                                         "argument 'w_up'"):
        kernel.grad(accumulate=["w_up"])
    with pytest.raises(moec.CompileError, match="option 'accumulate' names "
                                           "argument 1, whose gradient is not "
                                           "one moe.grouped_weight_grad"):
        kernel.grad(accumulate=["gate_w"]).module
    grad = kernel.grad(accumulate=["w_down"])
    args = _layer_inputs(np.random.default_rng(0), 3)
    _, saved = grad.forward(*args)
    dy = args[0]
    with pytest.raises(ValueError, match=r"'main_grads': expected 1 \(one "
                                         r"per accumulated argument: w_down\)"
                                         r", got 0"):
        grad.backward(args, saved, (dy,))
    with pytest.raises(ValueError, match="'w_down_main_grad': expected "
                                         "element type f32"):
        grad.backward(args, saved, (dy,),
                      main_grads=[np.zeros((E, H, I), np.float64)])


@pytest.mark.parametrize("tokens,one_expert", [(7, False), (1, False),
                                               (6, True)])
def test_input_gradient_fuses_unpermute_grad(tokens, one_expert):
    # Frozen experts (gradients of x and the router only): the down
    # projection's input gradient gathers dy by slot and takes the routing
    # weights as its row scale, so unpermute_grad writes no rows
    # (moe-fuse-permute). Same gradients as the unfused full backward.
    kernel = moe_kernel(H, I, E, K, dtype="f32")
    grad = kernel.grad(wrt=["x", "gate_w"])
    optimized = grad.ir("optimized").split("func.func @moe_block_grad")[1]
    assert "moe.permute_probs" in optimized
    assert "row_scale(" in optimized and "gather(" in optimized
    full = kernel.grad()
    assert "moe.permute_probs" not in \
        full.ir("optimized").split("func.func @moe_block_grad")[1]
    rng = np.random.default_rng(20 + tokens)
    args = _layer_inputs(rng, tokens, one_expert)
    dy = _random(rng, tokens, H)
    dx, d_gate = grad.backward(args, grad.forward(*args)[1], (dy,))
    want = full.backward(args, full.forward(*args)[1], (dy,))
    assert rel_error(dx, want[0]) < 1e-6
    assert rel_error(d_gate, want[1]) < 1e-6


# The down projection's backward with LoRA as moe-decompose-lora-grad
# leaves it on sm_90a (f32, r = 8, scaling 2): unpermute_grad's rows feed
# the input gradient (then SwiGLU's), du = dY · B_e and dB = Σ dYᵀ u.
# {extra} returns the rows as well, which keeps them (no fusion).
_DOWN_LORA_GRAD = """
func.func @down(%dy: tensor<?x40xf32>, %w: tensor<?x2xf32>,
                %ids: tensor<?x2xi32>,
                %y: tensor<?x40xf32> {moe.sym = "M"},
                %a: tensor<?x24xf32> {moe.sym = "M"},
                %h: tensor<?x48xf32> {moe.sym = "M"},
                %w_down: tensor<6x40x24xf32>, %la: tensor<6x8x24xf32>,
                %lbt: tensor<6x8x40xf32>)
    -> (tensor<?x48xf32>, tensor<6x40x8xf32>, tensor<6x8x24xf32>,
        tensor<?x2xf32>{extra_type}) {
  %c0 = arith.constant 0 : index
  %two = arith.constant 2.0 : f32
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = 6
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<6xi32>
  %dr, %dw = moe.unpermute_grad %dy, %slots, %offsets k = 2
      weights(%w, %y : tensor<?x2xf32>, tensor<?x40xf32> -> tensor<?x2xf32>)
      : tensor<?x40xf32>, tensor<?xi32>, tensor<6xi32> -> tensor<?x40xf32>
  %da = moe.grouped_matmul %dr, %w_down, %offsets
      : tensor<?x40xf32>, tensor<6x40x24xf32>, tensor<6xi32> -> tensor<?x24xf32>
  %dh = moe.swiglu_grad %h, %da
      : tensor<?x48xf32>, tensor<?x24xf32> -> tensor<?x48xf32>
  %m = tensor.dim %dr, %c0 : tensor<?x40xf32>
  %e = tensor.empty(%m) : tensor<?xf32>
  %s = linalg.fill ins(%two : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  %u = moe.grouped_matmul %a, %la, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs}
      : tensor<?x24xf32>, tensor<6x8x24xf32>, tensor<6xi32> -> tensor<?x8xf32>
  %du = moe.grouped_matmul %dr, %lbt, %offsets row_scale(%s : tensor<?xf32>)
      {transpose_rhs}
      : tensor<?x40xf32>, tensor<6x8x40xf32>, tensor<6xi32> -> tensor<?x8xf32>
  %db = moe.grouped_weight_grad %dr, %u, %offsets
      : tensor<?x40xf32>, tensor<?x8xf32>, tensor<6xi32> -> tensor<6x40x8xf32>
  %dla = moe.grouped_weight_grad %du, %a, %offsets
      : tensor<?x8xf32>, tensor<?x24xf32>, tensor<6xi32> -> tensor<6x8x24xf32>
  return %dh, %db, %dla, %dw{extra} : tensor<?x48xf32>, tensor<6x40x8xf32>,
      tensor<6x8x24xf32>, tensor<?x2xf32>{extra_type}
}
"""


@pytest.mark.parametrize("tokens,one_expert", [(9, False), (1, False),
                                               (8, True)])
def test_fused_unpermute_grad_matches_unfused(tokens, one_expert):
    # The fused form (dy gathered by slot, routing weights as the row scale
    # of dX, du and u; dB gathering dy) against the same function with the
    # rows kept, on the host, same inputs.
    def source(extra, extra_type):
        return (_DOWN_LORA_GRAD.replace("{extra}", extra)
                .replace("{extra_type}", extra_type))
    fused = source("", "")
    kept = source(", %dr", ", tensor<?x40xf32>")
    assert "moe.permute_probs" in moec.ir(fused, stage="optimized")
    assert "moe.permute_probs" not in moec.ir(kept, stage="optimized")
    rng = np.random.default_rng(40 + tokens)
    rows = 2 * tokens
    ids = np.stack([rng.permutation(6)[:2] for _ in range(tokens)])
    if one_expert:
        ids[:, 0] = 3
        ids[:, 1] = rng.choice([0, 1, 2, 4, 5], tokens)
    args = [_random(rng, tokens, 40), rng.random((tokens, 2), np.float32),
            ids.astype(np.int32), _random(rng, rows, 40),
            _random(rng, rows, 24), _random(rng, rows, 48),
            _random(rng, 6, 40, 24), _random(rng, 6, 8, 24),
            _random(rng, 6, 8, 40)]
    got = moec.compile(fused, target="host", cache=False)(*args)
    want = moec.compile(kept, target="host", cache=False)(*args)
    assert len(got) == 4
    for name, g, w in zip(["dh", "db", "dla", "dw"], got, want):
        assert g.shape == w.shape
        assert rel_error(g, w) < 1e-5, name


def test_bad_arguments():
    kernel = moe_kernel(H, I, E, K, dtype="f32")
    with pytest.raises(ValueError, match="'wrt': moe_block has no argument "
                                         "'w_up'"):
        kernel.grad(wrt=["w_up"])
    with pytest.raises(ValueError, match="'save': expected one of"):
        kernel.grad(save="some")
    grad = kernel.grad()
    args = _layer_inputs(np.random.default_rng(0), 3)
    _, saved = grad.forward(*args)
    with pytest.raises(ValueError, match="'grad_outputs': moe_block has 1 "
                                         "floating-point results, got 2"):
        grad.backward(args, saved, (args[0], args[0]))


# -- each rule against central differences of the moec forward -------------

def _check_rule(fn, signature, args, seed, eps=1e-2, tol=2e-3, wrt=None):
    """Directional derivatives of <dy, f(args)> along random directions
    against the gradients; results that are ids must not move."""
    kernel = moec.kernel(fn, signature=signature)
    grad = kernel.grad(wrt)
    if wrt:
        assert grad.wrt == wrt
    rng = np.random.default_rng(seed)
    outs, saved = grad.forward(*args)
    floats = [o for o in outs if o.dtype == np.float32]
    dys = [_random(rng, *o.shape) for o in floats]
    grads = grad.backward(args, saved, dys)
    names = kernel.arg_names
    forward = kernel.compile("host", cache=False)
    for name, g in zip(grad.wrt, grads):
        i = names.index(name)
        for _ in range(3):
            v = _random(rng, *args[i].shape)
            values = []
            for step in (eps, -eps):
                moved = list(args)
                moved[i] = (args[i] + step * v).astype(np.float32)
                moved_outs = forward(*moved)
                moved_outs = (moved_outs if isinstance(moved_outs, tuple)
                              else (moved_outs,))
                for o, m in zip(outs, moved_outs):
                    if o.dtype != np.float32:
                        assert (o == m).all(), "the step changed the routing"
                values.append(sum(float((m.astype(np.float64) * dy).sum())
                                  for m, dy in zip(
                                      [m for m in moved_outs
                                       if m.dtype == np.float32], dys)))
            numeric = (values[0] - values[1]) / (2 * eps)
            analytic = float((g.astype(np.float64) * v).sum())
            assert abs(analytic - numeric) <= tol * max(abs(numeric), 1.0), \
                (name, analytic, numeric)
    return grad


def test_rule_swiglu():
    _check_rule(lambda h: ops.swiglu(h), {"h": moec.Tensor["T", 2 * I, "f32"]},
                [_random(np.random.default_rng(1), 5, 2 * I)], 1)


def test_rule_dense_matmul():
    def fn(x, w, wt):
        return (ops.matmul(x, w), ops.matmul(x, wt, transpose_rhs=True))
    rng = np.random.default_rng(2)
    _check_rule(fn, {"x": moec.Tensor["T", H, "f32"],
                     "w": moec.Tensor[H, 6, "f32"],
                     "wt": moec.Tensor[5, H, "f32"]},
                [_random(rng, 7, H), _random(rng, H, 6), _random(rng, 5, H)],
                2)


@pytest.mark.parametrize("router", ["qwen3", "mixtral", "deepseek", "plain"])
def test_rule_router_permute_combine(router):
    # router_topk -> sort -> permute -> one matmul per expert -> unpermute
    # with the routing weights: the routing-weight, permute and combine
    # rules together (the matmul makes a token's k rows differ, else a
    # renormalized combine would not depend on the logits).
    options = {"qwen3": dict(renormalize=True),
               "mixtral": dict(order="topk_then_softmax"),
               "deepseek": dict(scoring="sigmoid", renormalize=True,
                                scaling_factor=2.5),
               "plain": {}}[router]

    def fn(x, logits, bias, w):
        weights, ids = ops.router_topk(
            logits, K, bias=bias if router == "deepseek" else None, **options)
        _, slots, offsets = ops.sort_by_expert(ids, E)
        rows = ops.permute(x, slots, offsets, K)
        h = ops.grouped_matmul(rows, w, offsets, transpose_rhs=True)
        return ops.unpermute(h, slots, offsets, K, weights=weights), ids

    rng = np.random.default_rng(4)
    _check_rule(fn, {"x": moec.Tensor["T", H, "f32"],
                     "logits": moec.Tensor["T", E, "f32"],
                     "bias": moec.Tensor[E, "f32"],
                     "w": moec.Tensor[E, H, H, "f32"]},
                [_random(rng, 6, H), _random(rng, 6, E), _random(rng, E),
                 _random(rng, E, H, H, scale=H ** -0.5)], 4,
                wrt=["x", "logits", "w"])


@pytest.mark.parametrize("transpose_rhs", [False, True])
def test_rule_gathered_grouped_matmul(transpose_rhs):
    def fn(x, logits, w):
        weights, ids = ops.router_topk(logits, K)
        _, slots, offsets = ops.sort_by_expert(ids, E)
        h = ops.grouped_matmul(x, w, offsets, gather=slots, k=K,
                               transpose_rhs=transpose_rhs)
        return ops.unpermute(h, slots, offsets, K), ids

    rng = np.random.default_rng(6)
    w_shape = (E, 12, H) if transpose_rhs else (E, H, 12)
    grad = _check_rule(fn, {"x": moec.Tensor["T", H, "f32"],
                            "logits": moec.Tensor["T", E, "f32"],
                            "w": moec.Tensor[w_shape + ("f32",)]},
                       [_random(rng, 7, H), _random(rng, 7, E),
                        _random(rng, *w_shape, scale=0.3)], 6)
    # The logits reach no result (an unweighted combine): left out.
    assert grad.wrt == ["x", "w"]


@pytest.mark.parametrize("wrt", [None, ["a1", "b1", "a2", "b2"]])
def test_rule_lora(wrt):
    # LoRA (r = 3) on a gathered gate_up with nn.Linear weights and on the
    # down projection: dX with the transposed adapter, dA and dB from
    # lora_grad; all arguments, or the adapters alone (LoRA fine-tuning).
    r = 3

    def fn(x, logits, w1, w2, a1, b1, a2, b2):
        weights, ids = ops.router_topk(logits, K, renormalize=True)
        _, slots, offsets = ops.sort_by_expert(ids, E)
        h = ops.grouped_matmul(x, w1, offsets, gather=slots, k=K,
                               transpose_rhs=True, lora=(a1, b1),
                               lora_scaling=2.0)
        d = ops.grouped_matmul(ops.swiglu(h), w2, offsets, lora=(a2, b2),
                               lora_scaling=0.5)
        return ops.unpermute(d, slots, offsets, K, weights=weights), ids

    rng = np.random.default_rng(8)
    shapes = {"x": (7, H), "logits": (7, E), "w1": (E, 2 * I, H),
              "w2": (E, I, H), "a1": (E * r, H), "b1": (2 * I, E * r),
              "a2": (E * r, I), "b2": (H, E * r)}
    signature = {n: moec.Tensor[(("T",) + s[1:] if n in ("x", "logits")
                                 else s) + ("f32",)]
                 for n, s in shapes.items()}
    args = [_random(rng, *s, scale=0.5) for s in shapes.values()]
    # A smaller step than the default: the SwiGLU after an adapter scaled
    # by 2 curves enough that eps = 1e-2 leaves 0.2 % of truncation error.
    grad = _check_rule(fn, signature, args, 8, wrt=wrt, eps=3e-3)
    if wrt is None:
        assert grad.wrt == list(shapes)
    text = str(grad.module)
    assert "transpose_lora" in text and "moe.lora_grad" in text


def test_ops_lora_grad_errors():
    def fn(x, dy, ids, a, b):
        _, slots, offsets = ops.sort_by_expert(ids, E)
        return ops.lora_grad(x, dy, offsets, (a, b), gather=slots)

    signature = {
        "x": moec.Tensor["T", H, "f32"], "dy": moec.Tensor["M", 8, "f32"],
        "ids": moec.Tensor["T", K, "i32"], "a": moec.Tensor[E, H, "f32"],
        "b": moec.Tensor[8, E, "f32"]}
    with pytest.raises(ValueError, match="'gather' and 'k' go together"):
        moec.kernel(fn, signature=signature).module

    def wrong_b(x, dy, ids, a, b):
        _, slots, offsets = ops.sort_by_expert(ids, E)
        return ops.lora_grad(x, dy, offsets, (a, b), gather=slots, k=K)
    signature["b"] = moec.Tensor[8, 2 * E, "f32"]
    with pytest.raises(ValueError, match="'lora\\[1\\]' columns"):
        moec.kernel(wrong_b, signature=signature).module

    def lora_in_weight_grad(x, dy, ids, a, b):
        _, slots, offsets = ops.sort_by_expert(ids, E)
        return ops.grouped_matmul(x, dy, offsets, gather=slots, k=K,
                                  mode="weight_grad", lora=(a, b))
    signature["b"] = moec.Tensor[8, E, "f32"]
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="'lora' is not taken"):
        moec.kernel(lora_in_weight_grad, signature=signature).module


def test_training_step_kernels(tmp_path):
    # bench/kernels/training_step.mlir is what bench/training_step.py
    # generates, and moe-autodiff derives every layer's backward.
    import pathlib
    import subprocess
    import sys
    bench = pathlib.Path(__file__).resolve().parents[2] / "bench"
    out = tmp_path / "training_step.mlir"
    subprocess.run([sys.executable, str(bench / "training_step.py"),
                    "--emit-mlir", str(out)], check=True)
    checked_in = bench / "kernels" / "training_step.mlir"
    assert out.read_text() == checked_in.read_text(), \
        "regenerate bench/kernels/training_step.mlir (--emit-mlir)"
    text = checked_in.read_text()
    compiler = moec.runtime._native.compiler()
    for key in ("qwen3", "mixtral", "dsv3"):
        text = compiler.autodiff(text, f"layer_{key}", [], "all")
        assert f"func.func @layer_{key}_grad(" in text


def test_ops_router_topk_grad():
    # ops.router_topk_grad written by hand equals the central differences of
    # router_topk's weights (selection held: the ids must not move).
    def fn(logits, dw):
        w, ids = ops.router_topk(logits, 3, scoring="sigmoid",
                                 renormalize=True, scaling_factor=2.0)
        d = ops.router_topk_grad(logits, ids, dw, scoring="sigmoid",
                                 renormalize=True, scaling_factor=2.0)
        return w, ids, d

    kernel = moec.kernel(fn, signature={"logits": moec.Tensor["T", 8, "f32"],
                                        "dw": moec.Tensor["T", 3, "f32"]})
    assert "moe.router_topk_grad" in kernel.module
    rng = np.random.default_rng(9)
    logits, dw = _random(rng, 5, 8), _random(rng, 5, 3)
    w, ids, d = kernel(logits, dw)
    eps = 1e-2
    for t, e in [(0, int(ids[0, 0])), (2, int(ids[2, 1])), (4, 0), (1, 7)]:
        values = []
        for step in (eps, -eps):
            moved = logits.copy()
            moved[t, e] += step
            w2, ids2, _ = kernel(moved, dw)
            assert (ids2 == ids).all()
            values.append(float((w2.astype(np.float64) * dw).sum()))
        numeric = (values[0] - values[1]) / (2 * eps)
        assert abs(d[t, e] - numeric) < 2e-3 * max(1.0, abs(numeric))
    with pytest.raises(ValueError, match="router_topk_grad: 'grad_weights' "
                                         "must be f32"):
        moec.kernel(lambda l, g: ops.router_topk_grad(
            l, ops.router_topk(l, 2)[1], g),
            signature={"l": moec.Tensor["T", 8, "f32"],
                       "g": moec.Tensor["T", 2, "bf16"]}).module
