#!/usr/bin/env python3
"""Expert parallelism: moec.ep.ExpertParallelMoE against the same layer
composed in torch (same all-to-alls, torch._grouped_mm), and its two
all-to-alls against plain all_to_all_single of the same bytes, same inputs,
same run. One process per GPU (torchrun), NCCL.

    # here (MLIR): the layers' kernels for world size W, one bundle each
    python3 bench/expert_parallel.py --emit-bundles .device/ep --world 2
    # on the GPUs (runtime-only moec package and torch):
    NCCL_NVLS_ENABLE=0 PYTHONPATH=/tmp/rt/python_packages torchrun \\
        --nproc_per_node 2 bench/expert_parallel.py .device/ep \\
        --json $OUT/expert_parallel.json

--transport copy_engine runs moec's layer (stages, plain layer, training)
over the copy engines (ExpertParallelMoE transport; the "a2a" baseline
stays NCCL's all_to_all_single, and the layer's own exchanges are timed
alone too); --variants adds more layers to time whole, e.g. 132:nccl or
131:copy_engine:4 (131 SMs, expert_chunks=4; bundles from --emit-bundles
--sm-counts 131 --expert-chunks 4) or 132:nccl:dedup (dedup=True; bundles
from --expert-chunks dedup, its steps timed too). Every variant's output
is compared with the plain layer's: bitwise (`equal`) and its relative
error (`err`, where dedup rounds differently).

Layers (bf16): Qwen3-30B-A3B (E128 H2048 I768 top-8, softmax top-k
renormalized) and DeepSeek-V3 (E256 H7168 I2048 top-8, sigmoid scores with
a selection bias, 8 groups of which the best 4, renormalized, x 2.5; its
shared expert is not part of the layer). T tokens per rank, random router
and expert weights (0.02 * N(0, 1)), selection bias 0.01 * N(0, 1).

Stages (forward), each timed with CUDA events after a barrier, median of
--iters, the slowest rank's median reported (so the GPU idles while the
host launches the first step, and a collective waits for the slower rank):
  dispatch  route (ep_dispatch: router matmul, top-k, sort, permute into
            the send buffer), plan (all_gather of the per-expert counts,
            the host read of the splits: the forward's one sync, the
            received rows' local experts), send (all_to_all_single of the
            rows)
  compute   the local experts (ep_experts): gate_up + SwiGLU, down (rows
            grouped by local expert inside the kernels, back in received
            order)
  combine   send_back (the reverse all_to_all_single), weigh (ep_combine:
            the weighted combine)
torch runs the same stages: router logits from a bf16 F.linear (as
transformers), then f32 routing (common.route), stable argsort,
index_select into the send buffer, the same two all-to-alls; received rows
sorted by local expert (stable argsort), torch._grouped_mm gate_up,
silu * mul, torch._grouped_mm down, scattered back; the same reverse
all-to-all, the rows put back in slot order and summed with one bf16 bmm
by the weights (cast to bf16, as transformers' MoE blocks do).
a2a: all_to_all_single of the send buffer alone, then of the results
alone, with the same splits: the bandwidth ceiling of dispatch + combine
("a2a %" = a2a time / (dispatch + combine) time, moec's). "fenced": the
same with send_back timed from a barrier after every rank's experts, so
that the wait for the busier rank (uneven expert loads) is not counted as
exchange time; the plain all_to_all_single also starts from a barrier.
Correctness: moec's output against torch's, ||y - ref|| / ||ref||, over
the tokens both routers send to the same experts (err; routed_apart counts
the others, near ties that go either way; err_all_tokens includes them),
root mean square over the ranks. received_rows: each rank's expert load.
Training (where T * H <= --train-max: both layers' weights and gradients
are held at once): forward + backward from the same output gradient, moec
(ExpertParallelMoE: each kernel's derived backward, the all-to-alls
reversed) against torch autograd of the same composition (the
differentiable all_to_all_single of torch.distributed.nn); time, the
peak memory one step adds (torch.cuda.max_memory_allocated over the step
minus what was allocated before it: activations, saved values, gradients;
plus the high-water mark of the CUDA memory pool where moec's kernels take
their scratch, outside torch: an upper bound), and the gradients of x,
the router and both expert weights against torch's, torch run with moec's
experts for that
check (so the difference is bf16 arithmetic, not near ties routed apart).
Zero-receive check (Qwen3, first): a training step where every token picks
rank 0's experts; the other ranks receive no rows and their experts'
gradients must come out zero and finite (PASS / FAIL).
--profile FILE: torch.profiler's table of moec's Qwen3 forward (per T).
"""

import argparse
import json
import os
import statistics
import sys

from common import group_ends, models, rel_err, route, swiglu, write_json

# The layers (the default of --models; --emit-bundles compiles each).
MODEL_KEYS = ("qwen3", "dsv3")


def ep_router(m):
    """ExpertParallelMoE's (and ep_module's) router keywords for a
    MODELS entry."""
    if m.get("routing") != "deepseek":
        return {}
    return dict(scoring="sigmoid", selection_bias=True,
                num_groups=m["groups"], topk_groups=m["topk_groups"],
                scaling_factor=m["scaling"])


def exchange_impl():
    """moec's expert-parallel internals the bench times step by step: the
    dedup layer's steps (a module) and the plain all-to-all of rows."""
    from moec.ep import dedup
    from moec.ep.exchange import exchange
    return dedup, exchange


def expert_chunks_arg(text):
    """ExpertParallelMoE's expert_chunks from "4" (equal groups) or
    "16-48-48-16" (group sizes)."""
    return tuple(int(v) for v in text.split("-")) if "-" in text else int(text)


def expert_chunks_name(expert_chunks):
    return ("-".join(map(str, expert_chunks))
            if isinstance(expert_chunks, tuple) else str(expert_chunks))


def variant_arg(text):
    """A variant's third field: expert_chunks ("4", "16-48-48-16") or
    "dedup" (ExpertParallelMoE dedup=True)."""
    return "dedup" if text == "dedup" else expert_chunks_arg(text)


def bundle_path(folder, key, world, sm_count=None, expert_chunks=1):
    """expert_chunks "dedup": the bundle of ep_module(..., dedup=True)."""
    suffix = f"_sm{sm_count}" if sm_count else ""
    if expert_chunks == "dedup":
        suffix += "_dedup"
    elif expert_chunks != 1:
        suffix += f"_x{expert_chunks_name(expert_chunks)}"
    return os.path.join(folder, f"ep_{key}_w{world}{suffix}.moecb")


def emit_bundles(folder, world, sm_counts=(), expert_chunks=(),
                 keys=MODEL_KEYS):
    """Compiles each layer's ep module (forward kernels and their derived
    backwards) for sm_90a (needs the compiler: run where MLIR is), and a
    variant per SM count in `sm_counts`, each also per expert-chunk count
    in `expert_chunks` (ExpertParallelMoE's, with ep_experts_part)."""
    import moec
    from moec.ep import ep_module, expert_groups
    os.makedirs(folder, exist_ok=True)
    for key, m in models(keys).items():
        for chunks in (1,) + tuple(expert_chunks):
            dedup = chunks == "dedup"
            try:
                expert_groups(m["E"] // world, 1 if dedup else chunks)
            except ValueError as error:  # sizes for another model
                print(f"{key}: skipped expert_chunks {chunks}: {error}")
                continue
            text = ep_module(m["H"], m["I"], m["E"], m["k"], world,
                             expert_chunks=1 if dedup else chunks,
                             dedup=dedup, **ep_router(m))
            for sm_count in (None,) + tuple(sm_counts):
                # sm_count: the persistent matmuls leave the other SMs to
                # the exchanges' kernels.
                path = bundle_path(folder, key, world, sm_count, chunks)
                moec.compile(text, "sm_90a", sm_count=sm_count).save(path)
                print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bundles", help="folder of ep_<model>_w<W>.moecb")
    parser.add_argument("--emit-bundles", action="store_true",
                        help="compile the bundles into the folder and exit")
    parser.add_argument("--world", type=int, default=2,
                        help="world size to compile for (--emit-bundles)")
    parser.add_argument("--models", default=",".join(MODEL_KEYS),
                        help="the layers to time (with --emit-bundles: to "
                             "compile)")
    parser.add_argument("--tokens", default="4096,16384",
                        help="tokens per rank")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--train-max", type=int, default=16384 * 2048,
                        help="time the training step where T * H is at "
                             "most this (memory: both layers' weights and "
                             "gradients are held)")
    parser.add_argument("--profile", help="write a torch.profiler table of "
                        "moec's Qwen3 forward (each T) to this file")
    parser.add_argument("--chunks", default="1",
                        help="also time the layer pipelined in these "
                             "numbers of pieces (ExpertParallelMoE chunks)")
    parser.add_argument("--train-pipelined", metavar="SMS,PIECES[,TRANSPORT]",
                        help="also time the training step of the --sm-counts "
                             "bundle SMS (132: the plain one) in PIECES")
    parser.add_argument("--transport", default="nccl",
                        choices=("nccl", "copy_engine"),
                        help="the moec layer's (ExpertParallelMoE "
                             "transport): its stages, plain layer and "
                             "training step")
    parser.add_argument("--variants", default="",
                        help="more pipelined variants, comma-separated "
                             "SMS:TRANSPORT[:EXPERT_CHUNKS] (SMS 132: the "
                             "plain bundle; EXPERT_CHUNKS: "
                             "ExpertParallelMoE expert_chunks, 4 or "
                             "16-48-48-16, or dedup for dedup=True, timed "
                             "once, not per --chunks)")
    parser.add_argument("--expert-chunks", default="",
                        help="with --emit-bundles: also these "
                             "expert_chunks variants of each bundle "
                             "(dedup: the dedup=True one)")
    parser.add_argument("--sm-counts", default="",
                        help="bundles whose matmuls fill only this many SMs "
                             "(--emit-bundles makes them; the run times "
                             "each pipelined, --chunks)")
    args = parser.parse_args()
    sm_counts = tuple(int(v) for v in args.sm_counts.split(",") if v)
    if args.emit_bundles:
        emit_bundles(args.bundles, args.world, sm_counts,
                     tuple(variant_arg(v) for v in
                           args.expert_chunks.split(",") if v),
                     args.models.split(","))
        return
    run(args, sm_counts)


def timed_stages(stages, iters, fenced=()):
    """{stage: slowest rank's median ms} of a list of (name, fn) run in
    order, each fn taking the previous one's result (CUDA events, two
    warm-ups, a barrier before each run); the stages named in `fenced`
    start after a sync and a barrier (every rank done with the stages
    before)."""
    import torch
    import torch.distributed as dist
    times = {name: [] for name, _ in stages}
    for it in range(iters + 2):
        dist.barrier()
        torch.cuda.synchronize()
        value = None
        events = []
        for name, fn in stages:
            if name in fenced:
                torch.cuda.synchronize()
                dist.barrier()
                torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            value = fn(value)
            end.record()
            events.append((name, start, end))
        torch.cuda.synchronize()
        if it >= 2:  # two warm-ups
            for name, start, end in events:
                times[name].append(start.elapsed_time(end))
    medians = torch.tensor([statistics.median(times[n])
                            for n, _ in stages], device="cuda")
    dist.all_reduce(medians, op=dist.ReduceOp.MAX)
    return dict(zip((n for n, _ in stages), medians.tolist()))


def time_pipelined(x, want, variants, chunk_counts, iters):
    """The layer's forward split in pieces (ExpertParallelMoE.chunks) for
    each (SM count, transport, block) variant and piece count, but the
    plain one (the first variant, one piece): time, and whether the output
    is bitwise the plain layer's on every rank."""
    import torch
    import torch.distributed as dist
    rows = []
    for sm_count, transport, block in variants:
        # An expert_chunks block pipelines by itself (one piece of tokens).
        for chunks in (chunk_counts if len(block.expert_groups) == 1
                       else [1]):
            if block is variants[0][2] and chunks == 1:
                continue
            block.chunks = chunks
            out = block(x)
            # equal: on every rank; err: the root mean square over ranks.
            check = torch.tensor([float(torch.equal(out, want)),
                                  rel_err(out, want) ** 2], device="cuda")
            dist.all_reduce(check[:1], op=dist.ReduceOp.MIN)
            dist.all_reduce(check[1:])
            ms = timed_stages([("layer", lambda _: block(x))], iters)["layer"]
            rows.append(dict(sm_count=sm_count, transport=transport,
                             chunks=chunks, ms=ms, equal=bool(check[0]),
                             err=(check[1].item() /
                                  dist.get_world_size()) ** 0.5))
            block.chunks = 1
    return rows


def time_dedup(block, x, iters):
    """A dedup=True layer's six steps (moec's dedup module) and, on the
    same rows, plain NCCL all_to_all_single each way: {steps, dispatch,
    compute, combine, a2a, a2a_fraction, sent_rows}."""
    dd, exchange = exchange_impl()
    steps = [("route", lambda _: dd.route(block, x))] + [
        (step.__name__, lambda s, step=step: step(block, s))
        for step in (dd.plan, dd.send, dd.compute, dd.send_back, dd.weigh)]
    times = timed_stages(steps, iters)
    state = dd.plan(block, dd.route(block, x))
    sent, received = state["exchange"].send_splits, \
        state["exchange"].recv_splits
    rows = state["rows"].clone()
    a2a = timed_stages(
        [("send", lambda _: exchange(rows, sent, received, None)),
         ("back", lambda r: exchange(r, received, sent, None))], iters)
    dispatch = times["route"] + times["plan"] + times["send"]
    combine = times["send_back"] + times["weigh"]
    return dict(steps=times, dispatch=dispatch, compute=times["compute"],
                combine=combine, a2a=a2a,
                a2a_fraction=(a2a["send"] + a2a["back"]) / (dispatch +
                                                            combine),
                sent_rows=sum(sent))


def scratch_high(reset=False):
    """High-water mark (bytes) of the device's default CUDA memory pool,
    where moec's runtime allocates its scratch; None if cuda-python is
    missing. With reset, restarts it."""
    try:
        import torch
        from cuda.bindings import driver
        err, pool = driver.cuDeviceGetDefaultMemPool(
            torch.cuda.current_device())
        attr = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_HIGH
        if reset:
            driver.cuMemPoolSetAttribute(pool, attr, driver.cuuint64_t(0))
            return None
        err, value = driver.cuMemPoolGetAttribute(pool, attr)
        return int(value) if err == driver.CUresult.CUDA_SUCCESS else None
    except Exception as error:  # noqa: BLE001 - an optional measurement
        print(f"scratch_high: {error!r}", file=sys.stderr)
        return None


def zero_receive_check(block, world, rank):
    """A training step where every token picks rank 0's experts: the other
    ranks receive no rows, and their experts' gradients must be zeros (not
    untouched memory). Returns (ok, this rank's received rows)."""
    import torch
    import torch.distributed as dist
    H, local = block.hidden_size, block.local_experts
    saved = block.gate.weight.detach().clone()
    with torch.no_grad():
        block.gate.weight.abs_()
        block.gate.weight[local:].neg_()
    x = (torch.randn(64, H, device="cuda").abs() + 0.1).to(saved.dtype)
    for p in block.parameters():
        p.grad = None
    state = block.plan(block.route(x, False))
    received = sum(state["splits"][1])
    block(x).float().sum().backward()
    grads = (block.w_gate_up.grad, block.w_down.grad)
    finite = all(torch.isfinite(g).all().item() for g in grads)
    nonzero = any(g.abs().max().item() > 0 for g in grads)
    ok = finite and (nonzero if rank == 0 else not nonzero)
    with torch.no_grad():
        block.gate.weight.copy_(saved)
    for p in block.parameters():
        p.grad = None
    flags = torch.tensor([float(ok)], device="cuda")
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    return bool(flags.item()), received


def profile(fn, path):
    """Appends the CUDA-time table of 3 calls of fn to `path` (every rank
    runs them: they exchange; only one writes)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile
    fn()
    with torch_profile(activities=[ProfilerActivity.CPU,
                                   ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    if path is None:
        return
    with open(path, "a") as f:
        f.write(prof.key_averages().table(sort_by="cuda_time_total",
                                          row_limit=25) + "\n")


# ---------------------------------------------------------------------------
# The layers: moec's and the same composition in torch
# ---------------------------------------------------------------------------

def make_layer(args, key, m, world, sm_count=None, transport=None,
               expert_chunks=1):
    """An ExpertParallelMoE of model m from its bundle in args.bundles."""
    import torch

    import moec
    from moec.ep import ExpertParallelMoE
    dedup = expert_chunks == "dedup"
    bundle = moec.load(bundle_path(args.bundles, key, world, sm_count,
                                   expert_chunks))
    return ExpertParallelMoE(m["H"], m["I"], m["E"], m["k"],
                             dtype=torch.bfloat16, device="cuda",
                             **ep_router(m),
                             transport=transport or args.transport,
                             dedup=dedup,
                             expert_chunks=1 if dedup else expert_chunks,
                             bundle=bundle)


def randomize(block):
    """Random weights 0.02 * N(0, 1), DeepSeek's selection bias 0.01 *
    N(0, 1), from a fixed seed."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(1234)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, device="cuda", dtype=torch.bfloat16,
                                generator=gen) * 0.02)
        for b in block.buffers():  # DeepSeek's selection bias
            b.copy_(torch.randn(b.shape, device="cuda", dtype=b.dtype,
                                generator=gen) * 0.01)
    return gen


def make_variants(args, key, m, world, rank, block, sm_counts, extra):
    """[(SM count, transport name, layer)]: the plain layer first, then
    the same layer (its weights) from the bundles whose matmuls leave SMs
    free, and over the other transports (--variants)."""
    variants = [(132, args.transport, block)]
    for n, t, x in [(n, args.transport, 1) for n in sm_counts] + extra:
        path = bundle_path(args.bundles, key, world,
                           None if n == 132 else n, x)
        if x != 1 and not os.path.exists(path):
            if rank == 0:  # group sizes for another model
                print(f"{key}: no {path}, variant skipped", flush=True)
            continue
        other = make_layer(args, key, m, world, None if n == 132 else n, t,
                           x)
        other.load_state_dict(block.state_dict())
        variants.append((n, t if x == 1 else f"{t}:dedup" if x == "dedup"
                         else f"{t}:x{expert_chunks_name(x)}", other))
    return variants


class TorchLayer:
    """The same layer composed in torch: router logits from a bf16
    F.linear, f32 routing (common.route), stable argsort, the same two
    all-to-alls, torch._grouped_mm experts; in three stages (dispatch,
    compute, combine) or whole under autograd."""

    def __init__(self, block, m, world):
        self.m, self.world = m, world
        self.E, self.k, self.H = m["E"], m["k"], m["H"]
        self.local = block.local_experts
        self.sel_bias = getattr(block, "e_score_correction_bias", None)
        self.gate_w = block.gate.weight.detach()
        self.w_gate_up = block.w_gate_up.detach()
        self.w_down = block.w_down.detach()
        _, self.exchange = exchange_impl()

    def route(self, logits, ids=None):
        """(weights, ids) of the layer's router; with `ids`, the weights
        of those experts."""
        return route(logits, self.m, self.sel_bias, ids)

    def weighted_sum(self, back, weights, slots):
        """Each token's k rows (back: in expert order, slots[i] the slot
        of row i) times its weights, summed: back in slot order, then one
        bf16 bmm [T, 1, k] x [T, k, H] (the weights in the rows' type, as
        transformers' MoE blocks)."""
        import torch
        T = weights.shape[0]
        order = torch.empty_like(slots)
        order[slots] = torch.arange(slots.numel(), device="cuda")
        rows = back.index_select(0, order).view(T, self.k, self.H)
        return torch.bmm(weights.to(back.dtype).unsqueeze(1),
                         rows).squeeze(1)

    def splits(self, ids):
        """(slots, per-expert counts received, [send splits, receive
        splits] per rank) of the routing `ids`."""
        import torch
        import torch.distributed as dist
        flat = ids.flatten()
        slots = torch.argsort(flat, stable=True)
        ends = group_ends(flat, self.E)
        counts = torch.diff(ends, prepend=ends.new_zeros(1))
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)
        splits = torch.stack([counts.view(self.world, self.local).sum(1),
                              recv_counts.view(self.world, self.local)
                              .sum(1)]).tolist()
        return slots, recv_counts, splits

    def local_order(self, recv_counts, received):
        """The received rows' order by local expert and its group ends."""
        import torch
        ids = torch.repeat_interleave(
            torch.arange(self.local, device="cuda").repeat(self.world),
            recv_counts.long(), output_size=received)
        return torch.argsort(ids, stable=True), group_ends(ids, self.local)

    def dispatch(self, x):
        import torch.nn.functional as F
        weights, ids = self.route(F.linear(x, self.gate_w).float())
        slots, recv_counts, splits = self.splits(ids)
        send = x.index_select(0, slots // self.k)
        rows = self.exchange(send, splits[0], splits[1], None)
        return dict(rows=rows, recv_counts=recv_counts, splits=splits,
                    weights=weights, slots=slots)

    def compute(self, s):
        import torch
        order, offs = self.local_order(s["recv_counts"], s["rows"].shape[0])
        a = s["rows"].index_select(0, order)
        g = torch._grouped_mm(a, self.w_gate_up.transpose(-2, -1), offs=offs)
        d = torch._grouped_mm(swiglu(g), self.w_down.transpose(-2, -1),
                              offs=offs)
        out = torch.empty_like(d)
        out[order] = d
        s["rows"] = out
        return s

    def combine(self, s):
        back = self.exchange(s["rows"], s["splits"][1], s["splits"][0], None)
        return self.weighted_sum(back, s["weights"], s["slots"])

    def forward(self, x):
        return self.combine(self.compute(self.dispatch(x)))

    def autograd(self, xg, g_w, w1, w2, ids=None):
        """The layer under autograd (torch.distributed.nn's
        differentiable all_to_all_single); with `ids`, routed to those
        experts."""
        import torch
        import torch.nn.functional as F
        from torch.distributed.nn.functional import all_to_all_single as a2a
        weights, ids = self.route(F.linear(xg, g_w).float(), ids)
        slots, recv_counts, (sp, rp) = self.splits(ids)
        send = xg.index_select(0, slots // self.k)
        rows = a2a(send.new_empty(sum(rp), self.H), send, rp, sp)
        order, offs = self.local_order(recv_counts, sum(rp))
        g = torch._grouped_mm(rows.index_select(0, order),
                              w1.transpose(-2, -1), offs=offs)
        d = torch._grouped_mm(swiglu(g), w2.transpose(-2, -1), offs=offs)
        out = torch.zeros_like(d).index_copy(0, order, d)
        back = a2a(out.new_empty(sum(sp), self.H), out, sp, rp)
        return self.weighted_sum(back, weights, slots)


# ---------------------------------------------------------------------------
# One (model, T) row
# ---------------------------------------------------------------------------

def forward_check(block, tl, x, world):
    """moec's output against torch's: the root mean square over the ranks
    of the error over the tokens both routers send to the same experts,
    of the error over all tokens, and the count routed apart; and moec's
    expert ids [T, k] (the kernel's own routing)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    T, k = x.shape[0], tl.k
    ref = tl.forward(x)
    got = block(x)
    # Tokens both routers send to the same experts (a near tie may go
    # either way): the error there is arithmetic alone.
    state = block.route(x, False)
    kernel_ids = torch.searchsorted(
        state["offsets"].long(), state["positions"].long(),
        right=True).view(T, k)
    moec_ids = kernel_ids.sort(1).values
    torch_ids = tl.route(F.linear(x, tl.gate_w).float())[1]
    same = (moec_ids == torch_ids.sort(1).values).all(1)
    err = torch.tensor([rel_err(got[same], ref[same]) ** 2,
                        rel_err(got, ref) ** 2,
                        (~same).sum().item()], device="cuda")
    dist.all_reduce(err)  # mean square over the ranks
    err[:2] = (err[:2] / world).sqrt()
    return err, kernel_ids, got, state


def a2a_times(args, state, send, send_splits, recv_splits):
    """The plain all_to_all_single of the layer's rows each way, same
    splits, and (off NCCL) the layer's own exchanges alone, same bytes."""
    _, exchange = exchange_impl()
    a2a = timed_stages([
        ("send", lambda _: exchange(send, send_splits, recv_splits, None)),
        ("back", lambda r: exchange(r, recv_splits, send_splits, None))],
        args.iters)
    if args.transport != "nccl":
        there = state["exchange"]
        a2a.update(timed_stages([
            ("send_own", lambda _: there.start(send, False, keep=False)[0]),
            ("back_own", lambda r: there.reversed().start(
                r, False, keep=False)[0])], args.iters))
    return a2a


def forward_times(args, block, tl, x, state, variants, chunk_counts, got):
    """The forward's times: moec's six steps (plain and with send_back
    fenced), torch's three stages, the plain all-to-alls, both layers
    whole, the pipelined and dedup variants; and each rank's load."""
    import torch
    import torch.distributed as dist
    T, k, H = x.shape[0], tl.k, tl.H
    state = block.send(block.plan(state))
    send_splits, recv_splits = state["splits"]
    load = torch.tensor([float(sum(recv_splits))], device="cuda")
    loads = [torch.zeros_like(load) for _ in range(dist.get_world_size())]
    dist.all_gather(loads, load)
    send = torch.empty(T * k, H, device="cuda", dtype=torch.bfloat16)
    moec_steps = [("route", lambda _: block.route(x, False)),
                  ("plan", block.plan), ("send", block.send),
                  ("compute", block.compute),
                  ("send_back", block.send_back),
                  ("weigh", block.weigh)]
    steps = timed_stages(moec_steps, args.iters)
    moec_t = dict(dispatch=steps["route"] + steps["plan"] + steps["send"],
                  compute=steps["compute"],
                  combine=steps["send_back"] + steps["weigh"], steps=steps)
    # send_back after every rank's experts are done: the exchange without
    # the wait for the busier rank.
    fenced = timed_stages(moec_steps, args.iters, fenced=("send_back",))
    moec_t["fenced"] = dict(
        dispatch=fenced["route"] + fenced["plan"] + fenced["send"],
        combine=fenced["send_back"] + fenced["weigh"], steps=fenced)
    torch_t = timed_stages([("dispatch", lambda _: tl.dispatch(x)),
                            ("compute", tl.compute),
                            ("combine", tl.combine)], args.iters)
    a2a = a2a_times(args, state, send, send_splits, recv_splits)
    moec_layer = timed_stages([("layer", lambda _: block(x))],
                              args.iters)["layer"]
    pipelined = time_pipelined(x, got, variants, chunk_counts, args.iters)
    dedup = {f"{n}:{t}": time_dedup(b, x, args.iters)
             for n, t, b in variants if b.dedup}
    torch_layer = timed_stages([("layer", lambda _: tl.forward(x))],
                               args.iters)["layer"]
    return dict(moec=moec_t, torch=torch_t, a2a=a2a, moec_layer=moec_layer,
                torch_layer=torch_layer, pipelined=pipelined, dedup=dedup,
                send_splits=send_splits, recv_splits=recv_splits,
                loads=loads)


def forward_row(args, key, m, block, tl, x, variants, chunk_counts,
                peak_tflops):
    """The forward's row (errors, times, a2a bandwidth, FLOPs) and moec's
    expert ids."""
    import torch
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    E, H, I, k = m["E"], m["H"], m["I"], m["k"]
    T = x.shape[0]
    with torch.no_grad():
        err, kernel_ids, got, state = forward_check(block, tl, x, world)
        t = forward_times(args, block, tl, x, state, variants, chunk_counts,
                          got)
    send_splits, recv_splits = t["send_splits"], t["recv_splits"]
    moec_t, a2a = t["moec"], t["a2a"]
    # Rows this rank sends to the others (its own stay in place).
    moved = torch.tensor([float(sum(send_splits) - send_splits[rank])],
                         device="cuda")
    dist.all_reduce(moved, op=dist.ReduceOp.MAX)
    a2a_ms = a2a["send"] + a2a["back"]
    row = dict(
        model=m["name"], key=key, world=world, T=T, E=E, H=H, I=I,
        k=k, err=err[0].item(), err_all_tokens=err[1].item(),
        routed_apart=int(err[2].item()),
        received_rows=[int(v.item()) for v in t["loads"]],
        moec=moec_t, torch=t["torch"], a2a=a2a,
        moec_layer_ms=t["moec_layer"], torch_layer_ms=t["torch_layer"],
        ratio=t["torch_layer"] / t["moec_layer"], pipelined=t["pipelined"],
        dedup=t["dedup"],
        best_ratio=t["torch_layer"] / min(
            [t["moec_layer"]] + [p["ms"] for p in t["pipelined"]]),
        a2a_fraction=a2a_ms / (moec_t["dispatch"] + moec_t["combine"]),
        a2a_fraction_fenced=a2a_ms / (moec_t["fenced"]["dispatch"] +
                                      moec_t["fenced"]["combine"]),
        a2a_GBps=2 * moved.item() * H * 2 / a2a_ms / 1e6,
        flops_per_rank=2 * T * H * E + 2 * T * k * 3 * H * I,
        compute_tflops=(2 * sum(recv_splits) * 3 * H * I /
                        moec_t["compute"] / 1e9),
        peak_tflops=peak_tflops)
    return row, kernel_ids


def grad_errors(got, want):
    """[relative error] of each gradient pair, as rows (a tensor)."""
    import torch
    return torch.tensor([rel_err(a.reshape(-1, a.shape[-1]),
                                 b.reshape(-1, b.shape[-1]))
                         for a, b in zip(got, want)], device="cuda")


def train_fns(block, tl, x, dy, params, t_params):
    """Forward + backward from the same output gradient: moec's layer, and
    torch autograd of the same composition (through the same
    all-to-alls; with `ids`, routed to those experts)."""
    def m_train(_):
        xg = x.detach().requires_grad_()
        block(xg).backward(dy)
        return [xg.grad] + [p.grad for p in params]

    def t_train(_, ids=None):
        xg = x.detach().requires_grad_()
        y = tl.autograd(xg, *t_params, ids=ids)
        y.backward(dy)
        return [xg.grad] + [p.grad for p in t_params]
    return m_train, t_train


def pipelined_train(args, variants, x, dy, got):
    """--train-pipelined: the same step pipelined (a variant in pieces):
    (its step, its parameters, its gradients' errors against moec's plain
    step `got`: pieces sum the experts' gradients apart)."""
    import torch.distributed as dist
    sm_count, chunks, *transport = args.train_pipelined.split(",")
    sm_count, chunks = int(sm_count), int(chunks)
    piped = {(n, t): b for n, t, b in variants}[
        sm_count, (transport or [args.transport])[0]]
    piped_params = [piped.gate.weight, piped.w_gate_up, piped.w_down]

    def p_train(_):
        piped.chunks = chunks
        try:
            xg = x.detach().requires_grad_()
            piped(xg).backward(dy)
        finally:
            piped.chunks = 1
        return [xg.grad] + [p.grad for p in piped_params]

    for p in piped_params:
        p.grad = None
    piped_err = grad_errors(p_train(None), got)
    dist.all_reduce(piped_err, op=dist.ReduceOp.MAX)
    return p_train, piped_params, piped_err


def time_training(args, runs, resident_params):
    """{name: ms, name_peak_GiB, name_pool_GiB} of each (name, step,
    params) in runs: the time, and the peak memory one step adds on top of
    what is resident (both layers' weights, the inputs): activations,
    saved values and gradients, plus moec's scratch pool."""
    import torch
    import torch.distributed as dist
    train = {}
    for name, fn, ps in runs:
        def step(_, fn=fn, ps=ps):
            for p in ps:
                p.grad = None
            return fn(None)
        for p in resident_params:
            p.grad = None
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        scratch_high(reset=True)
        train[name] = timed_stages([(name, step)], args.iters)[name]
        # moec's kernels take their scratch from the CUDA memory pool
        # (cuMemAllocAsync), outside torch's allocator: its high-water
        # mark is added (an upper bound: the two peaks need not coincide).
        pool = scratch_high()
        peak = torch.tensor([
            (torch.cuda.max_memory_allocated() - resident) / 2**30,
            -1.0 if pool is None else pool / 2**30], device="cuda")
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        train[name + "_peak_GiB"] = (peak[0] + max(peak[1], 0)).item()
        train[name + "_pool_GiB"] = peak[1].item()
    return train


def train_row(args, row, block, tl, x, dy, kernel_ids, variants, t_params):
    """The training step's fields of row: times, peak memory, and the
    gradients against torch's (torch run with moec's experts: the
    gradients then differ by arithmetic alone, not by near ties routed
    apart)."""
    import torch.distributed as dist
    names = ("x", "gate", "w_gate_up", "w_down")
    params = [block.gate.weight, block.w_gate_up, block.w_down]
    m_train, t_train = train_fns(block, tl, x, dy, params, t_params)
    for p in params + t_params:
        p.grad = None
    got, want = m_train(None), t_train(None, kernel_ids)
    grad_err = grad_errors(got, want)
    runs = [("moec", m_train, params), ("torch", t_train, t_params)]
    if args.train_pipelined:
        got = [g.clone() for g in got]
        p_train, piped_params, piped_err = pipelined_train(
            args, variants, x, dy, got)
        runs.append(("moec_pipelined", p_train, piped_params))
    del got, want
    dist.all_reduce(grad_err, op=dist.ReduceOp.MAX)
    every = params + t_params + [q for _, _, qs in runs for q in qs]
    train = time_training(args, runs, every)
    row.update(train=train, train_ratio=train["torch"] / train["moec"],
               grad_err=dict(zip(names, grad_err.tolist())))
    if args.train_pipelined:
        row.update(train_pipelined=args.train_pipelined,
                   train_pipelined_ratio=(train["torch"] /
                                          train["moec_pipelined"]),
                   pipelined_grad_err=dict(zip(names, piped_err.tolist())))
    # Every run's gradients go (a pipelined variant's too): the next T's
    # layers need the memory.
    for p in every:
        p.grad = None


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------

def dense_peak(iters):
    """The dense bf16 ceiling of this GPU, same run: torch.mm 8192^3,
    TFLOP/s (the slowest rank's)."""
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = timed_stages([("mm", lambda _: torch.mm(a, b))], iters)["mm"]
    return 2 * 8192 ** 3 / mm_ms / 1e9


def model_rows(args, key, m, sm_counts, extra, peak_tflops, results):
    """Every T's row of one model, appended to results (and printed by
    rank 0); the zero-receive check's result where it ran (Qwen3)."""
    import torch
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    chunk_counts = [int(c) for c in args.chunks.split(",")]
    H = m["H"]
    block = make_layer(args, key, m, world)
    gen = randomize(block)
    tl = TorchLayer(block, m, world)
    variants = make_variants(args, key, m, world, rank, block, sm_counts,
                             extra)
    zero_receive = None
    if key == "qwen3":
        ok, _ = zero_receive_check(block, world, rank)
        if rank == 0:
            print(f"zero-receive check (ranks > 0 get no rows, their "
                  f"experts' gradients zero): {'PASS' if ok else 'FAIL'}",
                  flush=True)
        zero_receive = dict(ok=ok)
    for T in (int(t) for t in args.tokens.split(",")):
        gen.manual_seed(1000 * rank + T)
        x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16,
                        generator=gen)
        dy = torch.randn(T, H, device="cuda", dtype=torch.bfloat16,
                         generator=gen)
        params = [block.gate.weight, block.w_gate_up, block.w_down]
        t_params = ([p.detach().clone().requires_grad_() for p in params]
                    if T * H <= args.train_max else [])
        row, kernel_ids = forward_row(args, key, m, block, tl, x, variants,
                                      chunk_counts, peak_tflops)
        if T * H <= args.train_max:
            train_row(args, row, block, tl, x, dy, kernel_ids, variants,
                      t_params)
            if args.profile and key == "qwen3":
                with torch.no_grad():
                    profile(lambda: block(x), args.profile if rank == 0
                            else None)
        results.append(row)
        if rank == 0:
            print(json.dumps(row), flush=True)
    block = variants = tl = None  # free them before the next model
    torch.cuda.empty_cache()
    return zero_receive


def run(args, sm_counts):
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda",
                                                           local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    extra = [(int(v.split(":")[0]), v.split(":")[1],
              variant_arg((v.split(":")[2:] or ["1"])[0]))
             for v in args.variants.split(",") if v]
    results = []
    peak_tflops = dense_peak(args.iters)
    zero_receive = None
    for key, m in models(args.models).items():
        checked = model_rows(args, key, m, sm_counts, extra, peak_tflops,
                             results)
        zero_receive = checked or zero_receive
    if rank == 0:
        print_summary(results)
        if args.json:
            write_json(args.json, dict(
                device=torch.cuda.get_device_name(), world=world,
                transport=args.transport, zero_receive=zero_receive,
                results=results))
    dist.destroy_process_group()


def print_summary(results):
    """The tables of the run: the layer forward, the pipelined and dedup
    variants, the training step."""
    print(f"\n{'model':<14} {'T/rank':>6} {'moec ms':>8} "
          f"{'torch ms':>8} {'ratio':>5} | {'disp':>6} {'comp':>6} "
          f"{'comb':>6} | {'a2a ms':>6} {'a2a%':>5} {'fenced':>6} "
          f"{'err':>8} "
          f"{'apart':>5} rows/rank")
    for r in results:
        mt = r["moec"]
        print(f"{r['model']:<14} {r['T']:>6} {r['moec_layer_ms']:>8.3f} "
              f"{r['torch_layer_ms']:>8.3f} {r['ratio']:>5.2f} | "
              f"{mt['dispatch']:>6.3f} {mt['compute']:>6.3f} "
              f"{mt['combine']:>6.3f} | "
              f"{r['a2a']['send'] + r['a2a']['back']:>6.3f} "
              f"{100 * r['a2a_fraction']:>5.1f} "
              f"{100 * r['a2a_fraction_fenced']:>6.1f} {r['err']:>8.2e} "
              f"{r['routed_apart']:>5} {r['received_rows']}")
        if "send_own" in r["a2a"]:
            print(f"{'':<14} {'':>6} the layer's own exchanges alone: "
                  f"{r['a2a']['send_own']:.3f} + "
                  f"{r['a2a']['back_own']:.3f} ms")
    print_variants(results)
    print(f"dense bf16 peak (torch.mm 8192^3, same run): "
          f"{results[0]['peak_tflops']:.0f} TFLOP/s; moec compute: "
          + ", ".join(f"{r['compute_tflops']:.0f}" for r in results))
    print_training(results)


def print_variants(results):
    if any(r["pipelined"] for r in results):
        print(f"\n{'pipelined':<14} {'T/rank':>6} {'transport':>11} "
              f"{'SMs':>4} {'pieces':>6} {'ms':>8} {'ratio':>5} "
              f"same-output")
        for r in results:
            for p in r["pipelined"]:
                print(f"{r['model']:<14} {r['T']:>6} "
                      f"{p['transport']:>11} {p['sm_count']:>4} "
                      f"{p['chunks']:>6} {p['ms']:>8.3f} "
                      f"{r['torch_layer_ms'] / p['ms']:>5.2f} "
                      f"{p['equal']} (err {p['err']:.1e})")
    if any(r["dedup"] for r in results):
        print(f"\n{'dedup steps':<14} {'T/rank':>6} {'variant':>20} "
              f"{'disp':>6} {'comp':>6} {'comb':>6} | {'a2a ms':>6} "
              f"{'a2a%':>5} sent rows (plain layer's)")
        for r in results:
            for name, d in r["dedup"].items():
                print(f"{r['model']:<14} {r['T']:>6} {name:>20} "
                      f"{d['dispatch']:>6.3f} {d['compute']:>6.3f} "
                      f"{d['combine']:>6.3f} | "
                      f"{d['a2a']['send'] + d['a2a']['back']:>6.3f} "
                      f"{100 * d['a2a_fraction']:>5.1f} "
                      f"{d['sent_rows']} ({r['T'] * r['k']})")


def print_training(results):
    print(f"\n{'training':<14} {'T/rank':>6} {'moec ms':>8} "
          f"{'torch ms':>8} {'ratio':>5} | {'moec GiB':>8} "
          f"{'torch GiB':>9} | grad err x, gate, w_gate_up, w_down")
    for r in (r for r in results if "train" in r):
        t = r["train"]
        print(f"{r['model']:<14} {r['T']:>6} {t['moec']:>8.3f} "
              f"{t['torch']:>8.3f} {r['train_ratio']:>5.2f} | "
              f"{t['moec_peak_GiB']:>8.2f} {t['torch_peak_GiB']:>9.2f} "
              f"(moec pool {t['moec_pool_GiB']:.2f}) | "
              + " ".join(f"{v:.1e}" for v in r["grad_err"].values()))
        if "train_pipelined" in r:
            print(f"{'  pipelined':<14} {r['T']:>6} "
                  f"{t['moec_pipelined']:>8.3f} {t['torch']:>8.3f} "
                  f"{r['train_pipelined_ratio']:>5.2f} | "
                  f"{t['moec_pipelined_peak_GiB']:>8.2f} "
                  f"(SMs, pieces {r['train_pipelined']}) | vs plain "
                  + " ".join(f"{v:.1e}" for v in
                             r["pipelined_grad_err"].values()))


if __name__ == "__main__":
    main()
