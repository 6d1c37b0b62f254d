"""Kernels on the host backend against float64 references (numpy arrays)."""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec
from moec import ops

from conftest import rel_error
import reference

pytestmark = pytest.mark.compiler
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def layer_bundle():
    # E8 H40 I20 k2: 40 and 20 are not multiples of the 16x16 matmul tile.
    kernel = moec.kernel(
        _layer, signature={"x": moec.Tensor["T", 40, "bf16"],
                           "gate": moec.Tensor[8, 40, "bf16"],
                           "w1": moec.Tensor[8, 40, 40, "bf16"],
                           "w2": moec.Tensor[8, 40, 20, "bf16"]})
    return moec.compile(kernel, target="host", cache=False)


def _layer(x, gate, w1, w2):
    logits = ops.matmul(x, gate, transpose_rhs=True)
    w, ids = ops.router_topk(logits, k=2, renormalize=True)
    _, slots, offsets = ops.sort_by_expert(ids, 8)
    rows = ops.permute(x, slots, offsets, k=2)
    h = ops.grouped_matmul(rows, w1, offsets, transpose_rhs=True)
    d = ops.grouped_matmul(ops.swiglu(h), w2, offsets, transpose_rhs=True)
    return ops.unpermute(d, slots, offsets, k=2, weights=w)


def _weights(rng, bias_to=None):
    gate = rng.standard_normal((8, 40))
    if bias_to is not None:  # every token routes to these experts
        gate[bias_to] += 50.0
    return (gate.astype(BF16),
            (rng.standard_normal((8, 40, 40)) * 0.2).astype(BF16),
            (rng.standard_normal((8, 40, 20)) * 0.2).astype(BF16))


@pytest.mark.parametrize("tokens,bias_to", [
    (37, None),        # ragged groups
    (1, None),         # one token: six experts get nothing
    (29, [3, 5]),      # all tokens to experts 3 and 5, the rest empty
])
def test_moe_layer_matches_float64(layer_bundle, rng, tokens, bias_to):
    x = rng.standard_normal((tokens, 40))
    if bias_to is not None:
        x = np.abs(x)  # positive features make the biased gate rows win
    x = x.astype(BF16)
    gate, w1, w2 = _weights(rng, bias_to)
    y = layer_bundle(x, gate, w1, w2)
    assert y.shape == (tokens, 40) and y.dtype == BF16
    ref, ids = reference.moe_block(x, gate, w1, w2, k=2)
    if bias_to is not None:
        assert set(np.unique(ids)) == set(bias_to)
    assert rel_error(y, ref) < 2e-2


def test_routing_ops_match_reference(rng):
    @moec.kernel
    def route(logits: moec.Tensor["T", 16, "f32"]):
        w, ids = ops.router_topk(logits, k=4, renormalize=True)
        sorted_ids, slots, offsets = ops.sort_by_expert(ids, 16)
        return w, ids, sorted_ids, slots, offsets

    logits = rng.standard_normal((50, 16)).astype(np.float32)
    w, ids, sorted_ids, slots, offsets = route(logits)
    ref_w, ref_ids = reference.router_topk(logits, 4, renormalize=True)
    np.testing.assert_array_equal(ids, ref_ids)
    assert rel_error(w, ref_w) < 1e-5
    ref_sorted, ref_slots, ref_offsets = reference.sort_by_expert(ids, 16)
    np.testing.assert_array_equal(slots, ref_slots)
    np.testing.assert_array_equal(sorted_ids, ref_sorted)
    np.testing.assert_array_equal(offsets, ref_offsets)


def test_quantize_rowwise_round_trip(rng):
    @moec.kernel
    def quant(x: moec.Tensor["T", 200, "f32"]):
        q, s = ops.quantize(x, group_size=128, pow2_scale=True)
        return q, s, ops.dequantize(q, s, group_size=128, dtype="f32")

    x = rng.standard_normal((9, 200)).astype(np.float32) * 3
    q, s, back = quant(x)
    assert q.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and s.shape == (9, 2)
    for row in range(9):
        for g, cols in enumerate((slice(0, 128), slice(128, 200))):
            amax = np.abs(x[row, cols]).max()
            scale = 2.0 ** np.ceil(np.log2(amax / 448.0))
            assert s[row, g] == pytest.approx(scale)
    assert rel_error(back, x) < 0.05  # e4m3 keeps 3 mantissa bits


def test_quantize_weight_blocks_both_layouts(rng):
    # [E, N, K] = [3, 20, 12] in 8 x 8 blocks: partial blocks along both.
    @moec.kernel
    def quant(w: moec.Tensor[3, 20, 12, "f32"]):
        q, s = ops.quantize(w, group_size=8, axis="blocks")
        qt, st = ops.quantize(w, group_size=8, axis="blocks", transpose=True)
        return q, s, qt, st

    w = rng.standard_normal((3, 20, 12)).astype(np.float32)
    q, s, qt, st = quant(w)
    assert q.shape == (3, 20, 12) and s.shape == (3, 3, 2)
    assert qt.shape == (3, 12, 20) and st.shape == (3, 2, 3)
    for e in range(3):
        for br in range(3):
            for bc in range(2):
                block = w[e, 8 * br:8 * br + 8, 8 * bc:8 * bc + 8]
                assert s[e, br, bc] == pytest.approx(
                    np.abs(block).max() / 448.0, rel=1e-6)
                assert st[e, bc, br] == s[e, br, bc]
    np.testing.assert_array_equal(qt.astype(np.float32),
                                  q.astype(np.float32).transpose(0, 2, 1))
    scale = np.repeat(np.repeat(s, 8, axis=1), 8, axis=2)[:, :20, :12]
    assert rel_error(q.astype(np.float64) * scale, w) < 0.05
    with pytest.raises(ValueError, match="'x' must have rank 3"):
        moec.kernel(lambda x: ops.quantize(x, axis="blocks"),
                    signature={"x": moec.Tensor[20, 12, "f32"]}).ir("moe")
    with pytest.raises(ValueError, match="'transpose' is for axis='colwise'"):
        moec.kernel(lambda x: ops.quantize(x, transpose=True),
                    signature={"x": moec.Tensor[20, 12, "f32"]}).ir("moe")


def test_outputs_into_given_arrays(rng):
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "f32"]):
        return ops.swiglu(x)

    x = rng.standard_normal((5, 8)).astype(np.float32)
    out = np.full((5, 4), np.nan, dtype=np.float32)
    result = act(x, out=out)
    assert result is out
    g, u = x[:, :4].astype(np.float64), x[:, 4:].astype(np.float64)
    assert rel_error(out, reference.silu(g) * u) < 1e-6


@pytest.mark.parametrize("routing,renormalize", [
    ("softmax_then_topk", True),     # Qwen3 (norm_topk_prob)
    ("softmax_then_topk", False),    # OLMoE, Qwen3 without renormalization
    ("topk_then_softmax", True),     # Mixtral
])
def test_layer_kernel_routings(rng, routing, renormalize):
    from moec.layers import moe_kernel
    kernel = moe_kernel(40, 20, 8, 2, norm_topk_prob=renormalize,
                        routing=routing)
    x = rng.standard_normal((23, 40)).astype(BF16)
    gate, w1, w2 = _weights(rng)
    y = kernel(x, gate, w1, w2)
    ref, _ = reference.moe_block(x, gate, w1, w2, k=2,
                                 renormalize=renormalize, order=routing)
    assert rel_error(y, ref) < 2e-2


def _backward_inputs(rng, tokens):
    """x, dy [T, 40] and routing weights [T, 2] f32, ids [T, 2] i32 (two
    distinct experts of 8 per token)."""
    x = rng.standard_normal((tokens, 40)).astype(np.float32)
    dy = rng.standard_normal((tokens, 40)).astype(np.float32)
    w = rng.random((tokens, 2)).astype(np.float32)
    ids = np.stack([rng.permutation(8)[:2] for _ in range(tokens)])
    return x, dy, w, ids.astype(np.int32)


@pytest.mark.parametrize("tokens", [1, 31])
def test_permute_unpermute_backward(rng, tokens):
    # The backward of permute -> unpermute(weights): each token's gradient is
    # its k weights times the output gradient, each weight's gradient the
    # output gradient dotted with the token.
    @moec.kernel
    def backward(x: moec.Tensor["T", 40, "f32"],
                 dy: moec.Tensor["T", 40, "f32"],
                 w: moec.Tensor["T", 2, "f32"],
                 ids: moec.Tensor["T", 2, "i32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8, align=2)
        rows = ops.permute(x, slots, offsets, k=2)
        drows, dw = ops.unpermute_grad(dy, slots, offsets, k=2, weights=w,
                                       rows=rows)
        return ops.permute_grad(drows, slots, offsets, k=2), dw

    x, dy, w, ids = _backward_inputs(rng, tokens)
    dx, dw = backward(x, dy, w, ids)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    assert rel_error(dx, w.sum(axis=1, keepdims=True) * dy64) < 1e-6
    ref_dw = np.repeat((x64 * dy64).sum(axis=1, keepdims=True), 2, axis=1)
    assert rel_error(dw, ref_dw) < 1e-6


@pytest.mark.parametrize("tokens", [1, 31])
def test_weights_only_unpermute_grad_and_permute_probs(rng, tokens):
    # The fused backward's pieces, written by hand: the weights' gradient
    # alone, and each grouped row's routing weight times 2 (0 on the
    # alignment padding), against numpy in float64.
    @moec.kernel
    def pieces(x: moec.Tensor["T", 40, "f32"],
               dy: moec.Tensor["T", 40, "f32"],
               w: moec.Tensor["T", 2, "f32"],
               ids: moec.Tensor["T", 2, "i32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8, align=2)
        rows = ops.permute(x, slots, offsets, k=2)
        dw = ops.unpermute_grad(dy, slots, offsets, k=2, weights=w,
                                rows=rows, row_gradients=False)
        return dw, ops.permute_probs(w, slots, offsets, k=2, scale=2.0), slots

    x, dy, w, ids = _backward_inputs(rng, tokens)
    dw, probs, slots = pieces(x, dy, w, ids)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    ref_dw = np.repeat((x64 * dy64).sum(axis=1, keepdims=True), 2, axis=1)
    assert rel_error(dw, ref_dw) < 1e-6
    ref_probs = np.where(slots >= 0, 2.0 * w.reshape(-1)[np.maximum(slots, 0)],
                         0.0)
    assert (slots < 0).any() or tokens > 1  # align 2 pads the groups at T=1
    np.testing.assert_allclose(probs, ref_probs, rtol=1e-7)


def test_weights_only_unpermute_grad_names_bad_arguments():
    @moec.kernel
    def bad(dy: moec.Tensor["T", 40, "f32"],
            ids: moec.Tensor["T", 2, "i32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 8)
        return ops.unpermute_grad(dy, slots, offsets, k=2,
                                  row_gradients=False)

    with pytest.raises(ValueError, match="'row_gradients=False' needs "
                                         "'weights' and 'rows'"):
        bad.module
    with pytest.raises(ValueError, match="permute_probs: 'scale' must be "
                                         "finite"):
        @moec.kernel
        def bad_scale(w: moec.Tensor["T", 2, "f32"],
                      ids: moec.Tensor["T", 2, "i32"]):
            _, slots, offsets = ops.sort_by_expert(ids, 8)
            return ops.permute_probs(w, slots, offsets, k=2,
                                     scale=float("inf"))
        bad_scale.module


@pytest.mark.parametrize("tokens", [1, 19])
def test_positions_passed_between_kernels(rng, tokens):
    # One kernel sorts and returns the row of each slot; another, compiled
    # apart, takes it for its permute and for its matmul's combine.
    @moec.kernel
    def route(ids: moec.Tensor["T", 2, "i32"]):
        return ops.sort_by_expert(ids, 8, positions=True)

    # Kernel inputs have one symbolic size, T, so the second kernel is
    # compiled for this token count (its slot arrays are 2T long).
    def expert_mlp(x, slots, offsets, positions, w, w1):
        rows = ops.permute(x, slots, offsets, k=2, positions=positions)
        y = ops.grouped_matmul(rows, w1, offsets, scatter=slots, k=2,
                               scatter_weights=w,
                               scatter_positions=positions)
        return rows, y
    expert_mlp = moec.kernel(expert_mlp, signature={
        "x": moec.Tensor[tokens, 40, "f32"],
        "slots": moec.Tensor[2 * tokens, "i32"],
        "offsets": moec.Tensor[8, "i32"],
        "positions": moec.Tensor[2 * tokens, "i32"],
        "w": moec.Tensor[tokens, 2, "f32"],
        "w1": moec.Tensor[8, 40, 24, "f32"]})
    assert "scatter_positions(" in expert_mlp.module

    ids = rng.integers(0, 8, (tokens, 2)).astype(np.int32)
    ids[:, 1] = (ids[:, 0] + 1 + rng.integers(0, 7, tokens)) % 8  # distinct
    _, slots, offsets, positions = route(ids)
    assert positions.shape == (tokens * 2,)
    np.testing.assert_array_equal(slots[positions], np.arange(tokens * 2))

    x = rng.standard_normal((tokens, 40)).astype(np.float32)
    w = rng.random((tokens, 2)).astype(np.float32)
    w1 = rng.standard_normal((8, 40, 24)).astype(np.float32)
    rows, y = expert_mlp(x, slots, offsets, positions, w, w1)
    np.testing.assert_array_equal(rows, x[slots // 2])
    flat = ids.reshape(-1)
    ref = np.zeros((tokens, 24))
    for s in range(tokens * 2):
        ref[s // 2] += w.reshape(-1)[s] * (
            x[s // 2].astype(np.float64) @ w1[flat[s]].astype(np.float64))
    assert rel_error(y, ref) < 1e-5



# Rows per expert of 4 experts: ragged groups of 3, 4 and 5 rows and one
# empty expert; one row in all; every row on one expert.
edge_groups = pytest.mark.parametrize(
    "sizes", [(3, 4, 5, 0), (0, 0, 1, 0), (12, 0, 0, 0)])


@edge_groups
def test_grouped_matmul_swiglu_grad_epilogue(rng, sizes):
    # The down projection's input gradient with SwiGLU's gradient in its
    # epilogue: d = dy · W_e (rhs [E, K, N]), then for the saved input
    # h = [g | u]: dg = d·u·s·(1 + g·(1 − s)), du = d·g·s, s = sigmoid(g).
    @moec.kernel
    def down_dx(dy: moec.Tensor["M", 24, "f32"],
                w: moec.Tensor[4, 24, 10, "f32"],
                offsets: moec.Tensor[4, "i32"],
                h: moec.Tensor["M", 20, "f32"]):
        return ops.grouped_matmul(dy, w, offsets, activation="swiglu_grad",
                                  activation_input=h)

    rows = sum(sizes)
    dy = rng.standard_normal((rows, 24)).astype(np.float32)
    w = rng.standard_normal((4, 24, 10)).astype(np.float32)
    h = (2 * rng.standard_normal((rows, 20))).astype(np.float32)
    offsets = np.cumsum(sizes).astype(np.int32)
    out = moec.compile(down_dx, target="host", cache=False)(dy, w, offsets, h)
    d = np.zeros((rows, 10))
    for e in range(4):
        start = offsets[e - 1] if e else 0
        d[start:offsets[e]] = (dy[start:offsets[e]].astype(np.float64)
                               @ w[e].astype(np.float64))
    g, u = h[:, :10].astype(np.float64), h[:, 10:].astype(np.float64)
    s = 1 / (1 + np.exp(-g))
    ref = np.concatenate([d * u * s * (1 + g * (1 - s)), d * g * s], axis=1)
    assert out.shape == (rows, 20)
    assert rel_error(out, ref) < 1e-5


@edge_groups
def test_grouped_matmul_experts_in_columns(rng, sizes):
    # A LoRA B adapter [N, E*r] as [N, E, r]: du = dy · B_e reads it in
    # place, and dB_e = dyᵀ · u is written into it.
    @moec.kernel
    def du_db(dy: moec.Tensor["M", 24, "f32"],
              b: moec.Tensor[24, 4, 8, "f32"],
              offsets: moec.Tensor[4, "i32"],
              u: moec.Tensor["M", 8, "f32"]):
        du = ops.grouped_matmul(dy, b, offsets, experts_in_columns=True)
        db = ops.grouped_weight_grad(dy, u, offsets, experts_in_columns=True)
        return du, db

    rows = sum(sizes)
    dy = rng.standard_normal((rows, 24)).astype(np.float32)
    b = rng.standard_normal((24, 4, 8)).astype(np.float32)
    u = rng.standard_normal((rows, 8)).astype(np.float32)
    offsets = np.cumsum(sizes).astype(np.int32)
    du, db = moec.compile(du_db, target="host", cache=False)(dy, b, offsets, u)
    du_ref, db_ref = np.zeros((rows, 8)), np.zeros((24, 4, 8))
    for e in range(4):
        g = slice(offsets[e - 1] if e else 0, offsets[e])
        du_ref[g] = dy[g].astype(np.float64) @ b[:, e, :]
        db_ref[:, e, :] = dy[g].T.astype(np.float64) @ u[g]
    assert du.shape == (rows, 8) and db.shape == (24, 4, 8)
    assert rel_error(du, du_ref) < 1e-5
    assert rel_error(db, db_ref) < 1e-5


@edge_groups
def test_grouped_weight_grad_transposed_gathered(rng, sizes):
    # The gradient of [E, N, K] weights: dW_e = Σ dy_iᵀ · x[slot_i // k],
    # written [E, N, K], the token rows read by slot (zero for slot -1).
    @moec.kernel
    def dw(x: moec.Tensor["T", 16, "f32"], dy: moec.Tensor["M", 24, "f32"],
           offsets: moec.Tensor[4, "i32"], slots: moec.Tensor["M", "i32"]):
        return ops.grouped_weight_grad(x, dy, offsets, gather=slots, k=2,
                                       transpose_rhs=True)

    rows = sum(sizes)
    tokens = rows + 1
    x = rng.standard_normal((tokens, 16)).astype(np.float32)
    dy = rng.standard_normal((rows, 24)).astype(np.float32)
    slots = rng.choice(2 * tokens, rows, replace=False).astype(np.int32)
    if rows > 1:
        slots[rows // 2] = -1
    offsets = np.cumsum(sizes).astype(np.int32)
    got = moec.compile(dw, target="host", cache=False)(x, dy, offsets, slots)
    xs = np.where((slots >= 0)[:, None], x[np.maximum(slots, 0) // 2], 0.0)
    ref = np.zeros((4, 24, 16))
    for e in range(4):
        g = slice(offsets[e - 1] if e else 0, offsets[e])
        ref[e] = dy[g].T.astype(np.float64) @ xs[g]
    assert got.shape == (4, 24, 16)
    if sizes[3] == 0:
        assert not got[3].any()
    assert rel_error(got, ref) < 1e-5


@edge_groups
def test_grouped_weight_grad_accumulate(rng, sizes):
    # Gradient accumulation: main + Σ dy_iᵀ · x[slot_i // k] in the [E, N, K]
    # layout, and main + Σ x_iᵀ · dy_i in [E, K, N]; an expert without rows
    # keeps main. The second also runs in place (out=main).
    @moec.kernel
    def dw(x: moec.Tensor["T", 16, "f32"], dy: moec.Tensor["M", 24, "f32"],
           offsets: moec.Tensor[4, "i32"], slots: moec.Tensor["M", "i32"],
           main: moec.Tensor[4, 24, 16, "f32"]):
        return ops.grouped_weight_grad(x, dy, offsets, gather=slots, k=2,
                                       transpose_rhs=True, accumulate=main)

    @moec.kernel
    def dw_rows(x: moec.Tensor["M", 16, "f32"],
                dy: moec.Tensor["M", 24, "f32"],
                offsets: moec.Tensor[4, "i32"],
                main: moec.Tensor[4, 16, 24, "f32"]):
        return ops.grouped_weight_grad(x, dy, offsets, accumulate=main)

    rows = sum(sizes)
    tokens = rows + 1
    x = rng.standard_normal((tokens, 16)).astype(np.float32)
    dy = rng.standard_normal((rows, 24)).astype(np.float32)
    slots = rng.choice(2 * tokens, rows, replace=False).astype(np.int32)
    offsets = np.cumsum(sizes).astype(np.int32)
    main = rng.standard_normal((4, 24, 16)).astype(np.float32)
    got = moec.compile(dw, target="host", cache=False)(x, dy, offsets, slots,
                                                       main)
    xs = x[slots // 2].astype(np.float64)
    ref = main.astype(np.float64)
    for e in range(4):
        g = slice(offsets[e - 1] if e else 0, offsets[e])
        ref[e] += dy[g].T.astype(np.float64) @ xs[g]
    assert got.shape == (4, 24, 16)
    if sizes[3] == 0:
        assert np.array_equal(got[3], main[3])
    assert rel_error(got, ref) < 1e-5

    rows_x = x[:rows].copy()
    main2 = rng.standard_normal((4, 16, 24)).astype(np.float32)
    ref2 = main2.astype(np.float64)
    for e in range(4):
        g = slice(offsets[e - 1] if e else 0, offsets[e])
        ref2[e] += rows_x[g].T.astype(np.float64) @ dy[g]
    entry = moec.compile(dw_rows, target="host", cache=False)
    out = entry(rows_x, dy, offsets, main2, out=main2)
    assert out is main2
    assert rel_error(main2, ref2) < 1e-5


def test_grouped_weight_grad_accumulate_names_bad_arguments():
    signature = {"x": moec.Tensor["M", 16, "f32"],
                 "w": moec.Tensor[4, 16, 24, "f32"],
                 "dy": moec.Tensor["M", 24, "f32"],
                 "o": moec.Tensor[4, "i32"],
                 "main": moec.Tensor[4, 16, 24, "f32"],
                 "main16": moec.Tensor[4, 16, 24, "bf16"]}
    with pytest.raises(ValueError, match="'accumulate' belongs to the "
                       "weight gradient: use grouped_weight_grad"):
        moec.kernel(lambda x, w, dy, o, main, main16: ops.grouped_matmul(
            x, w, o, accumulate=main), signature=signature).ir()
    with pytest.raises(ValueError, match="'accumulate' dimension 1"):
        moec.kernel(lambda x, w, dy, o, main, main16: ops.grouped_weight_grad(
            x, dy, o, transpose_rhs=True, accumulate=main),
            signature=signature).ir()
    with pytest.raises(ValueError, match="'accumulate' is bf16"):
        moec.kernel(lambda x, w, dy, o, main, main16: ops.grouped_weight_grad(
            x, dy, o, accumulate=main16, out_dtype="f32"),
            signature=signature).ir()
    with pytest.raises(ValueError, match="'k' is only taken with 'gather'"):
        moec.kernel(lambda x, w, dy, o, main, main16: ops.grouped_weight_grad(
            x, dy, o, k=2), signature=signature).ir()
    ir = moec.kernel(lambda x, w, dy, o, main, main16: ops.grouped_weight_grad(
        x, dy, o, accumulate=main16), signature=signature).ir()
    assert "accumulate(" in ir and "-> tensor<4x16x24xbf16>" in ir


def test_grouped_matmul_weight_grad_mode_is_deprecated():
    # grouped_matmul(mode="weight_grad") still builds the weight gradient
    # for one release, with a DeprecationWarning naming its replacement;
    # the forward's options stay errors there.
    signature = {"x": moec.Tensor["M", 16, "f32"],
                 "dy": moec.Tensor["M", 24, "f32"],
                 "o": moec.Tensor[4, "i32"],
                 "main": moec.Tensor[4, 24, 16, "f32"],
                 "b": moec.Tensor[4, 24, "f32"]}
    with pytest.warns(DeprecationWarning, match="grouped_weight_grad"):
        old = moec.kernel(lambda x, dy, o, main, b: ops.grouped_matmul(
            x, dy, o, mode="weight_grad", transpose_rhs=True,
            accumulate=main), signature=signature).ir()
    new = moec.kernel(lambda x, dy, o, main, b: ops.grouped_weight_grad(
        x, dy, o, transpose_rhs=True, accumulate=main),
        signature=signature).ir()
    assert old == new and "moe.grouped_weight_grad" in new
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="'bias' is not taken with "
                                            "mode='weight_grad'"):
        moec.kernel(lambda x, dy, o, main, b: ops.grouped_matmul(
            x, dy, o, mode="weight_grad", bias=b), signature=signature).ir()
    with pytest.warns(DeprecationWarning), \
            pytest.raises(ValueError, match="'lora_scaling' is not taken"):
        moec.kernel(lambda x, dy, o, main, b: ops.grouped_matmul(
            x, dy, o, mode="weight_grad", lora_scaling=0.5),
            signature=signature).ir()


def test_grouped_weight_grad_transposed_names_bad_arguments():
    signature = {"x": moec.Tensor["M", 16, "f32"],
                 "dy": moec.Tensor["M", 24, "f32"],
                 "o": moec.Tensor[4, "i32"]}
    with pytest.raises(ValueError, match="'transpose_rhs'"):
        moec.kernel(lambda x, dy, o: ops.grouped_weight_grad(
            x, dy, o, experts_in_columns=True,
            transpose_rhs=True), signature=signature).ir()
    ir = moec.kernel(lambda x, dy, o: ops.grouped_weight_grad(
        x, dy, o, transpose_rhs=True), signature=signature).ir()
    assert "transpose_rhs" in ir and "tensor<4x24x16xf32>" in ir


def test_grouped_matmul_experts_in_columns_names_bad_arguments():
    signature = {"x": moec.Tensor["M", 24, "f32"],
                 "w": moec.Tensor[24, 4, 8, "f32"],
                 "o": moec.Tensor[4, "i32"]}
    with pytest.raises(ValueError, match="'transpose_rhs'"):
        moec.kernel(lambda x, w, o: ops.grouped_matmul(
            x, w, o, experts_in_columns=True, transpose_rhs=True),
            signature=signature).ir()
    with pytest.raises(ValueError, match="experts and 'offsets' size"):
        moec.kernel(lambda x, w, o: ops.grouped_matmul(
            x, w, o, experts_in_columns=True),
            signature={**signature, "w": moec.Tensor[24, 5, 8, "f32"]}).ir()


def test_grouped_matmul_swiglu_grad_names_bad_arguments():
    h = moec.Tensor["M", 20, "f32"]
    with pytest.raises(ValueError, match="activation_input"):
        moec.kernel(lambda dy, w, o: ops.grouped_matmul(
            dy, w, o, activation="swiglu_grad"),
            signature={"dy": moec.Tensor["M", 24, "f32"],
                       "w": moec.Tensor[4, 24, 10, "f32"],
                       "o": moec.Tensor[4, "i32"]}).ir()
    with pytest.raises(ValueError, match="'activation_input' columns"):
        moec.kernel(lambda dy, w, o, h: ops.grouped_matmul(
            dy, w, o, activation="swiglu_grad", activation_input=h),
            signature={"dy": moec.Tensor["M", 24, "f32"],
                       "w": moec.Tensor[4, 24, 12, "f32"],
                       "o": moec.Tensor[4, "i32"], "h": h}).ir()
