"""moec.ep.ExpertParallelMoE on the CPU: world sizes 2 and 4 as processes
(torch.multiprocessing, gloo), host-backend kernels, against the
single-process moec.torch.MoE on all ranks' tokens: the same output and
the same gradients (x, the router summed over the ranks, each rank's
experts), with a rank that has no tokens, ranks that receive none, experts
with none, T = 1; DeepSeek-V3's routing against a float64 reference at
world sizes 1, 2 and 4."""

import os
import tempfile

import pytest

if os.environ.get("MOEC_TEST_EXPECT_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import moec.ep  # noqa: E402
from test_torch_moe import make_block, rel  # noqa: E402

pytestmark = pytest.mark.compiler
H, I, E, K = 32, 24, 8, 2
# The layer does each row's arithmetic as the single-process block's
# training forward does (the expert outputs are rounded to the dtype before
# they travel, as that forward saves them): the output and the gradients of
# x and the experts are bitwise equal. The router's gradient is a sum over
# the ranks here (other rounding); inference (no_grad) runs fused kernels
# with fewer roundings in bf16 (~3e-3 from the training forward). Inference
# kernels of both layers combine differently (the single-process one in
# f32 before rounding), so both are compared to the training forward.
GATE_TOL = {torch.float32: 1e-6, torch.bfloat16: 1e-2}


def make_case(world, tokens, dtype, routing="softmax_then_topk",
              only_rank0=False, seed=0, k=K):
    """The single-process block's output and gradients on all ranks'
    tokens (rank r's are the r-th slice), and what the ranks need."""
    block = make_block(H, I, experts=E, k=k, routing=routing, dtype=dtype,
                       seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(sum(tokens), H, generator=gen)
    if only_rank0:
        # Every token picks experts of rank 0: the other ranks receive none.
        x = x.abs() + 0.1
        with torch.no_grad():
            block.gate.weight[E // world:] = -block.gate.weight[
                E // world:].abs()
            block.gate.weight[:E // world] = block.gate.weight[
                :E // world].abs()
    x = x.to(dtype).requires_grad_()
    dy = torch.randn(sum(tokens), H, generator=gen).to(dtype)
    y = block(x)
    y.backward(dy)
    return dict(world=world, tokens=tokens, dtype=dtype, routing=routing, k=k,
                weights={n: p.detach().clone()
                         for n, p in block.named_parameters()},
                x=x.detach(), dy=dy, y=y.detach(), grad_x=x.grad,
                grads={n: p.grad for n, p in block.named_parameters()})


def _worker(rank, world, init_file, out_dir, run, payload):
    """One rank: `run(payload, rank)` in a gloo group, its result saved."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    try:
        torch.save(run(payload, rank),
                   os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def spawn(tmp_path, world, run, payload) -> list:
    """Each rank's result of `run` (a module-level function).

    Each call rendezvouses through a fresh file: a group's file store can
    outlive destroy_process_group, and a later group reading it would take
    the earlier ranks' stale addresses (gloo: "Connection refused")."""
    run_dir = tempfile.mkdtemp(dir=tmp_path, prefix="spawn")
    mp.spawn(_worker, args=(world, os.path.join(run_dir, "init"), run_dir,
                            run, payload), nprocs=world, join=True)
    return [torch.load(os.path.join(run_dir, f"rank{r}.pt"))
            for r in range(world)]


def train_rank(ep, case, rank) -> dict:
    """One training step of `ep` on this rank's slice of the case's tokens:
    the output and the gradients (the router's summed over the group)."""
    first = sum(case["tokens"][:rank])
    rows = slice(first, first + case["tokens"][rank])
    x = case["x"][rows].clone().requires_grad_()
    y = ep(x)
    y.backward(case["dy"][rows])
    gate = ep.gate.weight.grad.clone()
    dist.all_reduce(gate)  # the replicated router's gradient
    return dict(x=x.detach(), y=y.detach(), grad_x=x.grad, gate=gate,
                w_gate_up=ep.w_gate_up.grad, w_down=ep.w_down.grad,
                experts=(ep.experts.start, ep.experts.stop))


def _moe_cases_rank(payload, rank):
    cases, save, chunks = payload
    results = []
    for case in cases:
        block = moec.torch.MoE(H, I, E, K, routing=case["routing"],
                               dtype=case["dtype"], save=save)
        block.load_state_dict(case["weights"])
        assert block.config.save == save  # from_moe takes the block's config
        ep = moec.ep.ExpertParallelMoE.from_moe(block, chunks=chunks)
        result = train_rank(ep, case, rank)
        with torch.no_grad():
            result["inference"] = ep(result["x"])  # the plain kernels
        results.append(result)
    return results


def run_world(tmp_path, cases, save="all", chunks=1):
    return spawn(tmp_path, cases[0]["world"], _moe_cases_rank,
                 (cases, save, chunks))


def check(case, results, expert_grad_tol=0.0):
    """Output and gradients against the single-process block's: bitwise,
    but for the router's gradient (and the experts' within
    `expert_grad_tol`, where pieces of the tokens add up their own)."""
    first = 0
    for rank, got in enumerate(results):
        rows = slice(first, first + case["tokens"][rank])
        first = rows.stop
        experts = slice(*got["experts"])
        exact = [("y", got["y"], case["y"][rows], 0.0),
                 ("grad x", got["grad_x"], case["grad_x"][rows], 0.0),
                 ("grad w_gate_up", got["w_gate_up"],
                  case["grads"]["w_gate_up"][experts], expert_grad_tol),
                 ("grad w_down", got["w_down"],
                  case["grads"]["w_down"][experts], expert_grad_tol)]
        for name, value, want, tol in exact:
            assert value.shape == want.shape and value.dtype == want.dtype, \
                (rank, name)
            if tol and want.abs().max() > 0:
                assert rel(value, want) <= tol, (rank, name, rel(value, want))
            else:
                assert torch.equal(value, want), (rank, name,
                                                  rel(value, want))
        # Inference fuses SwiGLU into gate_up (one rounding less in bf16).
        inference, want = got["inference"], case["y"][rows]
        assert inference.shape == want.shape, rank
        if case["dtype"] == torch.float32 or not want.numel():
            assert torch.equal(inference, want), rank
        else:
            assert rel(inference, want) <= GATE_TOL[case["dtype"]], rank
        want = case["grads"]["gate.weight"]
        assert got["gate"].dtype == want.dtype
        assert rel(got["gate"], want) <= GATE_TOL[case["dtype"]], rank


@pytest.mark.parametrize("world", [2, 4])
def test_matches_single_process(tmp_path, world):
    # Uneven token counts per rank, T = 1 on one, none on another (world 4).
    tokens = [13, 1] if world == 2 else [13, 1, 0, 6]
    cases = [
        make_case(world, tokens, torch.float32, seed=1),
        make_case(world, tokens, torch.float32, routing="topk_then_softmax",
                  seed=2),
        make_case(world, tokens, torch.bfloat16, seed=3),
        make_case(world, [5] * world, torch.float32, only_rank0=True, seed=4),
    ]
    results = run_world(tmp_path, cases)
    for i, case in enumerate(cases):
        check(case, [r[i] for r in results])
    # The last case sent every row to rank 0: the others got none and their
    # experts' gradients are zero.
    last = [r[-1] for r in results]
    for r in last[1:]:
        assert r["w_gate_up"].abs().max() == 0 and r["w_down"].abs().max() == 0
    assert last[0]["w_gate_up"].abs().max() > 0


@pytest.mark.parametrize("world", [2, 4])
def test_pipelined_pieces(tmp_path, world):
    # chunks=3: each rank's tokens in three pieces whose exchanges overlap;
    # pieces of one token and empty ones (T = 1, T = 0), and a case where
    # only rank 0 receives rows. Each row's arithmetic is unchanged (the
    # output and grad x bitwise); the experts' gradients add up per piece.
    tokens = [13, 1] if world == 2 else [13, 1, 0, 6]
    cases = [make_case(world, tokens, torch.float32, seed=11),
             make_case(world, tokens, torch.bfloat16, seed=12),
             make_case(world, [5] * world, torch.float32, only_rank0=True,
                       seed=13)]
    results = run_world(tmp_path, cases, chunks=3)
    for i, case in enumerate(cases):
        tol = 1e-6 if case["dtype"] == torch.float32 else 1e-2
        check(case, [r[i] for r in results], expert_grad_tol=tol)


@pytest.mark.parametrize("save", ["matmuls", "inputs"])
def test_save_policies(tmp_path, save):
    # What the training forward keeps changes no gradient: the backward
    # recomputes the rest with the same kernels.
    cases = [make_case(2, [7, 4], torch.float32, seed=5)]
    results = run_world(tmp_path, cases, save)
    check(cases[0], [r[0] for r in results])


def _main_grad_rank(payload, rank):
    case, chunks, dedup = payload
    block = moec.torch.MoE(H, I, E, K, routing=case["routing"],
                           dtype=case["dtype"], main_grad=True)
    block.load_state_dict(case["weights"])
    ep = moec.ep.ExpertParallelMoE.from_moe(block, chunks=chunks,
                                            dedup=dedup)
    assert ep.main_grad
    first = train_rank(ep, case, rank)
    # The same micro-batch again: the main gradients take it twice.
    second = train_rank(ep, case, rank)
    return dict(first=first, second=second, main=ep.main_grads(),
                experts=first["experts"])


@pytest.mark.parametrize("world,chunks,dedup", [(2, 1, False), (4, 1, False),
                                               (2, 3, False), (4, 1, True)])
def test_main_grad(tmp_path, world, chunks, dedup):
    # ExpertParallelMoE(main_grad=True) (from a main_grad block): each
    # rank's experts' gradients go into their f32 main gradients, none into
    # .grad; after two steps on the same tokens they hold twice the
    # single-process block's gradients (bitwise in f32, one piece), with a
    # rank of one token and, at world 4, one of none. With dedup the
    # experts' rows are summed on their rank before they travel (f32:
    # within 1e-6).
    tokens = [13, 1] if world == 2 else [13, 1, 0, 6]
    cases = [make_case(world, tokens, torch.float32, seed=21),
             make_case(world, tokens, torch.bfloat16, seed=22)]
    for case in cases:
        results = spawn(tmp_path, world, _main_grad_rank,
                        (case, chunks, dedup))
        tol = (0.0 if case["dtype"] == torch.float32 and chunks == 1 and
               not dedup
               else 1e-6 if case["dtype"] == torch.float32 else 1e-2)
        for rank, got in enumerate(results):
            experts = slice(*got["experts"])
            assert got["first"]["w_gate_up"] is None
            assert got["second"]["w_down"] is None
            assert torch.equal(got["first"]["y"], got["second"]["y"])
            for main, name in zip(got["main"], ("w_gate_up", "w_down")):
                want = 2 * case["grads"][name][experts].float()
                assert main.dtype == torch.float32, (rank, name)
                if tol:
                    assert rel(main, want) <= tol, (rank, name)
                else:
                    assert torch.equal(main, want), (rank, name)


def _fp8_rank(case, rank):
    block = moec.torch.MoE(H, I, E, K, dtype=case["dtype"], fp8="blockwise")
    block.load_state_dict(case["weights"])
    ep = moec.ep.ExpertParallelMoE.from_moe(block)
    assert ep.fp8 == "blockwise"
    return train_rank(ep, case, rank)


def test_fp8(tmp_path):
    # ExpertParallelMoE(fp8="blockwise") (from an FP8 block) over two ranks
    # against the single-process FP8 block on all ranks' tokens: each row's
    # arithmetic is the same, so bitwise (the router's gradient, summed
    # over the ranks, within 1e-6), with a rank of one token.
    world, tokens = 2, [13, 1]
    case = make_case(world, tokens, torch.float32, seed=31)
    block = moec.torch.MoE(H, I, E, K, fp8="blockwise", dtype=torch.float32)
    block.load_state_dict(case["weights"])
    x = case["x"].clone().requires_grad_()
    y = block(x)
    y.backward(case["dy"])
    # FP8 really ran: the output is e4m3's few per cent from the f32 one.
    assert 1e-3 < rel(y, case["y"]) < 0.1
    results = spawn(tmp_path, world, _fp8_rank, case)
    first = 0
    for rank, got in enumerate(results):
        rows = slice(first, first + tokens[rank])
        first = rows.stop
        experts = slice(*got["experts"])
        assert torch.equal(got["y"], y.detach()[rows]), rank
        assert torch.equal(got["grad_x"], x.grad[rows]), rank
        assert torch.equal(got["w_gate_up"], block.w_gate_up.grad[experts])
        assert torch.equal(got["w_down"], block.w_down.grad[experts])
        assert rel(got["gate"], block.gate.weight.grad) < 1e-6, rank


DEEPSEEK = dict(scoring="sigmoid", selection_bias=True, num_groups=4,
                topk_groups=2, scaling_factor=2.5)


def _dedup_rank(cases, rank):
    """Each case's forward with dedup=True (no autograd) and without, and a
    dedup layer's training step."""
    results = []
    for case in cases:
        E_, k_ = case.get("experts", E), case.get("k", K)
        block = moec.torch.MoE(H, I, E_, k_, routing=case["routing"],
                               dtype=case["dtype"])
        router = case.get("router", {})
        if router:  # DeepSeek-V3's router: the moec.ep layer only
            plain = moec.ep.ExpertParallelMoE(H, I, E_, k_,
                                              dtype=case["dtype"], **router)
            plain.load_hf_state_dict(case["state"])
        else:
            block.load_state_dict(case["weights"])
            plain = moec.ep.ExpertParallelMoE.from_moe(block)
        once = moec.ep.ExpertParallelMoE(H, I, E_, k_, dtype=case["dtype"],
                                         routing=case["routing"], dedup=True,
                                         **router)
        once.load_state_dict(plain.state_dict())
        first = sum(case["tokens"][:rank])
        x = case["x"][first:first + case["tokens"][rank]]
        with torch.no_grad():
            result = dict(once=once(x), plain=plain(x))
        if "y" in case:
            result.update(train_rank(once, case, rank))
        results.append(result)
    return results


@pytest.mark.parametrize("world", [2, 4])
def test_dedup(tmp_path, world):
    # Each token once per rank: the plain layer's output up to rounding (a
    # rank's partial sum is rounded to the dtype before it travels, and the
    # sums run in another order). Uneven token counts, T = 1, T = 0
    # (world 4), ranks that receive nothing; at world 4 with E = 8, k = 4
    # a rank holds 2 experts, so a received row carries 2 of a token's 4;
    # DeepSeek-V3's router. Training: the output and gradients against the
    # single-process block's.
    tokens = [13, 1] if world == 2 else [13, 1, 0, 6]
    gen = torch.Generator().manual_seed(40)
    E16 = 16
    deepseek = dict(
        world=world, tokens=tokens, dtype=torch.float32,
        routing="softmax_then_topk", experts=E16, k=4, router=DEEPSEEK,
        x=torch.randn(sum(tokens), H, generator=gen),
        state={"gate.weight": torch.randn(E16, H, generator=gen) / H ** 0.5,
               "gate.e_score_correction_bias": 0.1 * torch.randn(
                   E16, generator=gen),
               "experts.gate_up_proj": torch.randn(
                   E16, 2 * I, H, generator=gen) / H ** 0.5,
               "experts.down_proj": torch.randn(
                   E16, H, I, generator=gen) / I ** 0.5})
    wide = make_case(world, tokens, torch.float32, seed=44, k=4)
    cases = [make_case(world, tokens, torch.float32, seed=41),
             make_case(world, tokens, torch.bfloat16, seed=42),
             make_case(world, [5] * world, torch.float32, only_rank0=True,
                       seed=43),
             wide, deepseek]
    results = spawn(tmp_path, world, _dedup_rank, cases)
    for i, case in enumerate(cases):
        tol = GATE_TOL[case["dtype"]]
        got = [r[i] for r in results]
        first = 0
        for rank, r in enumerate(got):
            assert r["once"].shape == r["plain"].shape, (i, rank)
            assert r["once"].dtype == case["dtype"], (i, rank)
            if r["plain"].numel():
                assert rel(r["once"], r["plain"]) <= tol, (
                    i, rank, rel(r["once"], r["plain"]))
            if "router" not in case and r["plain"].numel():
                rows = slice(first, first + case["tokens"][rank])
                assert rel(r["once"], case["y"][rows]) <= tol, (i, rank)
            first += case["tokens"][rank]
        if "grads" not in case:
            continue
        first = 0
        for rank, r in enumerate(got):
            rows = slice(first, first + case["tokens"][rank])
            first = rows.stop
            experts = slice(*r["experts"])
            for name, value, want in (
                    ("y", r["y"], case["y"][rows]),
                    ("grad x", r["grad_x"], case["grad_x"][rows]),
                    ("grad gate", r["gate"], case["grads"]["gate.weight"]),
                    ("grad w_gate_up", r["w_gate_up"],
                     case["grads"]["w_gate_up"][experts]),
                    ("grad w_down", r["w_down"],
                     case["grads"]["w_down"][experts])):
                assert value.shape == want.shape, (i, rank, name)
                assert value.dtype == want.dtype, (i, rank, name)
                if not want.numel():
                    continue
                if want.abs().max() > 0:
                    assert rel(value, want) <= tol, (i, rank, name,
                                                     rel(value, want))
                else:  # a rank that received nothing: zero gradients
                    assert not value.abs().max() > 0, (i, rank, name)


def _deepseek_rank(case, rank):
    """DeepSeek-V3 routing (sigmoid, selection bias, group-limited top-k,
    scaling): this rank's output, gradients and the experts it chose."""
    ep = moec.ep.ExpertParallelMoE(H, I, 16, 4, dtype=torch.float32,
                                   chunks=case["chunks"], **DEEPSEEK)
    ep.load_hf_state_dict(case["state"])
    result = train_rank(ep, case, rank)
    # The experts the kernel chose: each slot's row, then its group.
    with torch.no_grad():
        state = ep.route(result["x"], False)
    row = state["positions"].long()
    ids = torch.searchsorted(state["offsets"].long(), row, right=True)
    result["ids"] = ids.view(-1, 4)
    return result


def deepseek_reference(state, x, dy, ids):
    """float64 output and gradients of DeepSeek-V3's block with the experts
    fixed to `ids`: weights sigmoid(logits) at ids, renormalized, x 2.5."""
    gate_w, w1, w2 = (state["gate.weight"], state["experts.gate_up_proj"],
                      state["experts.down_proj"])
    params = [t.double().requires_grad_() for t in (x, gate_w, w1, w2)]
    xd, gd, w1d, w2d = params
    weights = torch.sigmoid(xd @ gd.T).gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True) * 2.5
    out = torch.zeros_like(xd)
    for e in range(w1.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        h = xd[token] @ w1d[e].T
        a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
        out = out.index_add(0, token, (a @ w2d[e].T) * weights[token, slot,
                                                               None])
    (out * dy.double()).sum().backward()
    return out.detach(), [p.grad for p in params]


@pytest.mark.parametrize("world,chunks", [(1, 1), (2, 1), (4, 1), (2, 3)])
def test_deepseek_routing(tmp_path, world, chunks):
    # World 1 is the single-process layer; every world must give the same
    # output and gradients, and those of a float64 reference; chunks=3
    # pipelines pieces (the selection bias goes to each piece's routing).
    gen = torch.Generator().manual_seed(7)
    E = 16
    state = {"gate.weight": torch.randn(E, H, generator=gen) / H ** 0.5,
             "gate.e_score_correction_bias": 0.1 * torch.randn(
                 E, generator=gen),
             "experts.gate_up_proj": torch.randn(E, 2 * I, H,
                                                 generator=gen) / H ** 0.5,
             "experts.down_proj": torch.randn(E, H, I,
                                              generator=gen) / I ** 0.5}
    tokens = [9, 1, 0, 6][:world] if world > 1 else [11]
    x = torch.randn(sum(tokens), H, generator=gen)
    dy = torch.randn(sum(tokens), H, generator=gen)
    case = dict(world=world, tokens=tokens, state=state, x=x, dy=dy,
                chunks=chunks)
    results = spawn(tmp_path, world, _deepseek_rank, case)
    ids = torch.cat([r["ids"] for r in results])
    # The kernel's selection against DeepSeek-V3's, in float64: scores plus
    # the bias select; groups ranked by their best two; the best 2 of 4.
    select = (torch.sigmoid(x.double() @ state["gate.weight"].double().T) +
              state["gate.e_score_correction_bias"].double())
    groups = select.view(-1, 4, E // 4)
    best = groups.topk(2, dim=-1).values.sum(-1).topk(2, dim=-1).indices
    keep = torch.zeros_like(groups[..., 0]).scatter(1, best, 1.0).bool()
    masked = select.masked_fill(~keep.repeat_interleave(E // 4, 1),
                                float("-inf"))
    want_ids = masked.topk(4, dim=-1).indices
    assert torch.equal(ids.sort(1).values, want_ids.sort(1).values)
    want_y, (want_x, want_gate, want_w1, want_w2) = deepseek_reference(
        state, x, dy, ids)
    got_y = torch.cat([r["y"] for r in results])
    got_x = torch.cat([r["grad_x"] for r in results])
    got_w1 = torch.cat([r["w_gate_up"] for r in results])
    got_w2 = torch.cat([r["w_down"] for r in results])
    for name, got, want in (("y", got_y, want_y), ("grad x", got_x, want_x),
                            ("grad w_gate_up", got_w1, want_w1),
                            ("grad w_down", got_w2, want_w2),
                            ("grad gate", results[0]["gate"], want_gate)):
        assert rel(got, want) < 1e-5, (name, rel(got, want))


def test_bundle_without_saved_results_is_named():
    from moec.compiler import grad_attr
    with pytest.raises(ValueError, match="f_grad has no moe.saved_results"):
        grad_attr("func.func @f_grad(%a: f32) {", "f_grad",
                  "moe.saved_results")


def test_errors(tmp_path):
    with pytest.raises(RuntimeError, match="torch.distributed is not "
                                           "initialized"):
        moec.ep.ExpertParallelMoE(H, I, E, K)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'i'}",
                            rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="'top_k'"):
            moec.ep.ExpertParallelMoE(H, I, E, E + 1)
        ep = moec.ep.ExpertParallelMoE(H, I, E, K, dtype=torch.float32)
        with pytest.raises(ValueError, match="'x': expected last dimension"):
            ep(torch.randn(3, H + 1))
        with pytest.raises(ValueError, match="'x': expected dtype"):
            ep(torch.randn(3, H, dtype=torch.float64))
        with pytest.raises(ValueError, match="'num_experts' \\(8\\) must be "
                                             "a multiple"):
            moec.ep.ep_kernels(H, I, E, K, 3)
        with pytest.raises(ValueError, match="'scoring'"):
            moec.ep.ExpertParallelMoE(H, I, E, K, scoring="relu")
        with pytest.raises(ValueError, match="'routing': sigmoid"):
            moec.ep.ExpertParallelMoE(H, I, E, K, scoring="sigmoid",
                                      routing="topk_then_softmax")
        with pytest.raises(ValueError, match="'num_groups' and 'topk_groups'"):
            moec.ep.ExpertParallelMoE(H, I, E, K, num_groups=2)
        with pytest.raises(ValueError, match="'num_groups' \\(3\\) must "
                                             "divide"):
            moec.ep.ExpertParallelMoE(H, I, E, K, num_groups=3,
                                      topk_groups=1)
        with pytest.raises(ValueError, match="'scaling_factor'"):
            moec.ep.ExpertParallelMoE(H, I, E, K, scaling_factor="2")
        for chunks in (0, 1.5, True):
            with pytest.raises(ValueError, match="'chunks': expected a "
                                                 "positive int"):
                moec.ep.ExpertParallelMoE(H, I, E, K, chunks=chunks)
        for sm_count in (0, 2.0):
            with pytest.raises(ValueError, match="'sm_count': expected a "
                                                 "positive int"):
                moec.ep.ExpertParallelMoE(H, I, E, K, sm_count=sm_count)
        with pytest.raises(ValueError, match="'transport': expected one of "
                                             "nccl, copy_engine"):
            moec.ep.ExpertParallelMoE(H, I, E, K, transport="nvshmem")
        # The copy engines move CUDA tensors only: named, before any
        # exchange.
        ce = moec.ep.ExpertParallelMoE(H, I, E, K, dtype=torch.float32,
                                       transport="copy_engine")
        with pytest.raises(ValueError, match="'transport': copy_engine needs "
                                             "CUDA tensors, got cpu"):
            ce(torch.randn(3, H))
        for value, message in (
                (0, "'expert_chunks': expected a positive int or a sequence"),
                ((4, 0, 4), "'expert_chunks': expected a positive int or a"),
                (2, "'expert_chunks' needs transport='copy_engine'"),
                ((2, 6), "needs transport")):
            with pytest.raises(ValueError, match=message):
                moec.ep.ExpertParallelMoE(H, I, E, K, expert_chunks=value)
        for value, message in (
                (3, "'expert_chunks' \\(3\\) must divide the 8 experts"),
                ((2, 5), "'expert_chunks' \\[2, 5\\]: the group sizes "
                         "must add up to the 8 experts")):
            with pytest.raises(ValueError, match=message):
                moec.ep.ExpertParallelMoE(H, I, E, K, transport="copy_engine",
                                          expert_chunks=value)
        # One kernel per distinct group size.
        names = [k.name for k in moec.ep.ep_kernels(
            H, I, E, K, 1, expert_chunks=(2, 4, 2))]
        assert names == ["ep_dispatch", "ep_experts", "ep_combine",
                         "ep_experts_2", "ep_experts_4"]
        # A bundle of the plain layer lacks the group kernels: named now,
        # not at the first forward.
        plain = moec.compile(moec.ep.ep_module(H, I, E, K, 1), "host")
        with pytest.raises(ValueError, match="'bundle' has no ep_experts_2, "
                                             "ep_experts_6"):
            moec.ep.ExpertParallelMoE(H, I, E, K, transport="copy_engine",
                                      expert_chunks=(2, 6), bundle=plain)
        # FP8: a known recipe, and a bundle whose experts run it.
        with pytest.raises(ValueError, match="'fp8': expected one of "
                                             "blockwise"):
            moec.ep.ExpertParallelMoE(H, I, E, K, fp8="rowwise")
        fp8 = moec.ep.ExpertParallelMoE(H, I, E, K, fp8="blockwise",
                                        bundle=plain)
        with pytest.raises(ValueError, match=r"'bundle': its ep_experts "
                           r"\[host\] runs the expert matmuls unquantized, "
                           r"the layer has fp8='blockwise': compile "
                           r"ep_module\(..., fp8='blockwise'\)"):
            fp8(torch.randn(3, H, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="'expert_chunks' and 'chunks'"):
            moec.ep.ExpertParallelMoE(H, I, E, K, transport="copy_engine",
                                      expert_chunks=2, chunks=2)
        # dedup: a bool, the layer whole, a bundle with its kernels.
        with pytest.raises(ValueError, match="'dedup': expected a bool"):
            moec.ep.ExpertParallelMoE(H, I, E, K, dedup=1)
        for kwargs in (dict(chunks=2), dict(transport="copy_engine",
                                            expert_chunks=2)):
            with pytest.raises(ValueError, match="'dedup' runs the layer "
                                                 "whole"):
                moec.ep.ExpertParallelMoE(H, I, E, K, dedup=True, **kwargs)
        with pytest.raises(ValueError, match="'bundle' has no ep_experts_"
                                             "received, ep_route, "):
            moec.ep.ExpertParallelMoE(H, I, E, K, dedup=True, bundle=plain)
        names = [k.name for k in moec.ep.ep_kernels(H, I, E, K, 1,
                                                    dedup=True)]
        assert names[3:] == list(moec.ep.DEDUP_KERNELS)
        with pytest.raises(ValueError, match="'dedup': at most 64 ranks, "
                                             "got a world size of 65"):
            moec.ep.ep_kernels(H, I, 130, K, 65, dedup=True)
        # A block cast to bf16 keeps routing with an f32 selection bias.
        ds = moec.ep.ExpertParallelMoE(H, I, E, K, dtype=torch.float32,
                                       scoring="sigmoid",
                                       selection_bias=True).to(torch.bfloat16)
        assert ds(torch.randn(3, H, dtype=torch.bfloat16)).shape == (3, H)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_copy_engine_layout_is_all_to_all(world):
    """The copy-engine transport's puts (moec.ep.peer.copies: which rows go
    to which byte of which receiver's region) rebuild all_to_all_single's
    result on every rank, in both directions (the dispatch and its reverse,
    the backward's), with ranks that send or receive nothing. Each rank's
    region is simulated as a list of rows; on GPUs, gpu_ep_checks.py
    compares the layer's outputs and gradients with NCCL's bitwise."""
    from moec.ep import peer as _peer
    gen = torch.Generator().manual_seed(world)
    for trial in range(20):
        matrix = torch.randint(0, 5, (world, world), generator=gen)
        if trial % 3 == 0:
            matrix[:, 0] = 0  # rank 0 receives nothing
        if trial % 4 == 1:
            matrix[-1] = 0  # the last rank sends nothing
        for m in (matrix.tolist(), _peer.transposed(matrix.tolist())):
            send = [[(i, j, n) for j in range(world) for n in range(m[i][j])]
                    for i in range(world)]
            want = [[row for i in range(world) for row in send[i]
                     if row[1] == j] for j in range(world)]
            size = _peer.region_rows(m)
            regions = [[None] * size for _ in range(world)]
            for i in range(world):
                for dest, first, at, count in _peer.copies(m, i):
                    assert all(r is None for r in regions[dest][at:at + count])
                    regions[dest][at:at + count] = send[i][first:first + count]
            for j in range(world):
                received = sum(row[j] for row in m)
                assert regions[j][:received] == want[j]
                assert all(r is None for r in regions[j][received:])
    assert _peer.aligned(1) == _peer.ALIGN and _peer.aligned(0) == 0


@pytest.mark.parametrize("world,groups", [(1, (2, 2)), (2, (2, 2)),
                                          (2, (2, 2, 2)), (4, (1, 1, 1, 1)),
                                          (2, (1, 3, 2)), (3, (3, 1))])
def test_expert_chunks_layout(world, groups):
    """ExpertParallelMoE(expert_chunks=C)'s exchanges (moec.ep.peer.
    expert_chunks): group p's puts fill each rank's region with, from each
    source in turn, the rows of its experts of group p in expert order
    (what ep_experts_part's ids say), and the results' puts rebuild every
    sender's send buffer exactly (each row back where it left, all groups
    together), with experts and ranks that get no rows. Rows are tags
    (source, dest, expert, index); the GPU run compares the layer's output
    with the plain layer's bitwise."""
    from moec.ep import peer as _peer
    experts = sum(groups)
    gen = torch.Generator().manual_seed(world * 10 + len(groups))
    for trial in range(10):
        counts = torch.randint(0, 4, (world, world, experts), generator=gen)
        if trial % 3 == 0:
            counts[:, :, 0] = 0  # expert 0 of every rank gets nothing
        if trial % 4 == 1:
            counts[:, 0] = 0  # rank 0 receives nothing
        counts = counts.tolist()
        send = [[(s, d, e, j) for d in range(world) for e in range(experts)
                 for j in range(counts[s][d][e])] for s in range(world)]
        phases = [_peer.expert_chunks(counts, r, groups)
                  for r in range(world)]
        back = [[None] * len(send[s]) for s in range(world)]
        for p, size in enumerate(groups):
            lo = sum(groups[:p])
            assert len({ph[p]["region_rows"] for ph in phases}) == 1
            region = [[None] * phases[0][p]["region_rows"]
                      for _ in range(world)]
            for s in range(world):
                for dest, first, at, n in phases[s][p]["out"]:
                    assert all(r is None for r in region[dest][at:at + n])
                    region[dest][at:at + n] = send[s][first:first + n]
            for d in range(world):
                got = phases[d][p]["received"]
                want = [row for s in range(world) for row in send[s]
                        if row[1] == d and lo <= row[2] < lo + size]
                assert region[d][:got] == want
                # The experts' results (the rows themselves) go back.
                for s, first, at, n in phases[d][p]["back"]:
                    assert all(r is None for r in back[s][at:at + n])
                    back[s][at:at + n] = region[d][first:first + n]
        assert back == send


def _counts_rank(payload, rank):
    """_gather_counts on this rank's made-up per-expert offsets: the nested
    counts it returns, or the error when the ranks' modes differ."""
    modes, world = payload
    ep = moec.ep.ExpertParallelMoE(H, I, E, K, dtype=torch.float32)
    counts = torch.arange(E, dtype=torch.int32) % 3 + rank  # rows per expert
    state = dict(offsets=torch.cumsum(counts, 0, dtype=torch.int32))
    try:
        every, nested = ep._gather_counts([state], mode=modes[rank])
    except ValueError as error:
        return str(error)
    return every, nested


def test_gather_counts_checks_the_ranks_agree(tmp_path):
    """Each rank's counts reach every rank (device tensor and nested lists
    alike); ranks that would run a forward differently (here: another
    number of expert groups) all raise the same ValueError before any
    exchange instead of pairing mismatched barriers."""
    world, local = 2, E // 2
    results = spawn(tmp_path, world, _counts_rank, ((0, 0), world))
    for every, nested in results:
        assert every.shape == (world, 1, world, local)
        assert every.tolist() == nested
        for source in range(world):
            want = (torch.arange(E) % 3 + source).view(world, local)
            assert torch.equal(every[source, 0], want.to(every.dtype))
    errors = spawn(tmp_path, world, _counts_rank, ((0, 2), world))
    assert errors[0] == errors[1]
    assert "the ranks of the group would run this forward differently" \
        in errors[0] and "('nccl', 0), ('nccl', 2)" in errors[0]
