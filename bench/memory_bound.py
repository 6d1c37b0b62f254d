#!/usr/bin/env python3
"""Bandwidth-bound MoE kernels (issue 5): moec against torch eager, same run.

Runs on the GPU machine with the runtime-only moec package and torch:

    # here (MLIR):
    build/bin/moec compile bench/kernels/memory_bound.mlir \
        -o .device/memory_bound.moecb --target sm_90a
    # on the H200:
    PYTHONPATH=/tmp/rt/python_packages python3 bench/memory_bound.py \
        .device/memory_bound.moecb --json $OUT/memory_bound.json

For every model shape (Qwen3-30B-A3B, DeepSeek-V3), token count and kernel
it builds one set of random inputs, runs moec and a torch eager version of
the same function on them, checks that they agree, and times both with CUDA
events (the L2 evicted by a 256 MB read before every run, a GPU sleep in
front so that host launch overhead is not timed; median of --iters; torch's
cached memory kept between cases). With --graph-sets, kernels under
400 MB are also timed in steady state: the same kernel on 2 - 8 freshly
generated input sets (enough to move 400 MB), launched back to back in one
CUDA graph, per launch; this is the cost inside a model's stream, where
launch and event costs do not add to every kernel (see graph_timed).
Effective bandwidth is the
minimal bytes read and written (each input and output once) over the time,
compared with the measured copy bandwidth of the H200 (4.27 TB/s).
"""

import argparse
import gc
import math
import sys

import torch
import torch.nn.functional as F

import moec
from common import (COPY_TBPS, GRAPH_BYTES, MODELS, graph_timed, make_flush,
                    models, positions_of, print_kernel_times, rel_err,
                    timed, torch_route, write_json)

# NF4 gate_up weights [E, 2I, H] for a subset of S experts (see the .mlir).
NF4 = {"qwen3": dict(E=128, N=1536, K=2048, S=64),
       "dsv3": dict(E=256, N=4096, K=7168, S=16)}
FP8_MAX = 448.0
# Kernels whose torch version reads sizes back to the host (bincount,
# repeat_interleave by a tensor), so it cannot be captured into a graph.
# Not even tried: with the failed captures, the bench ran out of memory at
# DeepSeek-V3 T=32768 with 130 GB reserved and unallocated, and not since.
HOST_SYNC_IN_TORCH = {"routing", "quantize col", "quantize col T"}


# ---------------------------------------------------------------------------
# torch eager versions of the same functions
# ---------------------------------------------------------------------------

def torch_permute(x, slots, w, k):
    rows = x.index_select(0, (slots // k).long())
    return rows, w.flatten().index_select(0, slots.long())


def torch_unpermute(rows, slots, w, k, T):
    slot = slots.long()
    acc = torch.float64 if rows.dtype == torch.float64 else torch.float32
    scaled = rows.to(acc) * w.flatten()[slot].unsqueeze(1).to(acc)
    out = torch.zeros(T, rows.shape[1], dtype=acc, device=rows.device)
    out.index_add_(0, slot // k, scaled)
    return out.to(rows.dtype)


def torch_permute_grad(drows, slots, dprobs, k, T):
    """The backward of torch_permute: row gradients summed back to their
    tokens (f32), probability gradients back to their slots."""
    slot = slots.long()
    acc = torch.float64 if drows.dtype == torch.float64 else torch.float32
    dx = torch.zeros(T, drows.shape[1], dtype=acc, device=drows.device)
    dx.index_add_(0, slot // k, drows.to(acc))
    dw = torch.empty(T * k, dtype=dprobs.dtype, device=dprobs.device)
    dw[slot] = dprobs
    return dx.to(drows.dtype), dw.view(T, k)


def torch_unpermute_grad(dy, slots, w, rows, k):
    """The backward of torch_unpermute: each grouped row's gradient is its
    token's gradient times its weight; the weight gradient is the dot of the
    token's gradient with the row."""
    slot = slots.long()
    acc = torch.float64 if dy.dtype == torch.float64 else torch.float32
    g = dy.index_select(0, slot // k).to(acc)
    drows = (g * w.flatten()[slot].unsqueeze(1).to(acc)).to(dy.dtype)
    dw = torch.empty(w.numel(), dtype=acc, device=dy.device)
    dw[slot] = (g * rows.to(acc)).sum(-1)
    return drows, dw.view_as(w).float()


def torch_quantize_row(x):
    M, H = x.shape
    g = x.float().view(M, H // 128, 128)
    amax = g.abs().amax(-1)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    data = (g / scale.unsqueeze(-1)).view(M, H).to(torch.float8_e4m3fn)
    return data, scale


def colwise_blocks(offsets, rows, g=128):
    """Scale block of every grouped row, and the block count bound."""
    E = offsets.numel()
    counts = torch.diff(offsets.long(), prepend=offsets.new_zeros(1).long())
    expert = torch.repeat_interleave(torch.arange(E, device=offsets.device),
                                     counts)
    start = offsets.long() - counts
    base = torch.cumsum((counts + g - 1) // g, 0) - (counts + g - 1) // g
    local = torch.arange(expert.numel(), device=offsets.device) - start[expert]
    blocks = (rows + min(E, rows) * (g - 1)) // g
    return base[expert] + local // g, blocks


def torch_quantize_col(x, offsets):
    blk, blocks = colwise_blocks(offsets, x.shape[0])
    n = blk.numel()
    mag = x[:n].float().abs()
    amax = torch.zeros(blocks, x.shape[1], device=x.device)
    amax.index_reduce_(0, blk, mag, "amax")
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / FP8_MAX)
    data = torch.zeros(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    data[:n] = (x[:n].float() / scale[blk]).to(torch.float8_e4m3fn)
    return data, scale


def torch_quantize_col_t(x, offsets, g=128):
    """torch_quantize_col written transposed and padded, [H, g * blocks]:
    each expert's rows from a block boundary on (the FP8 weight gradient's
    operand layout, moe.quantize {colwise, transpose})."""
    data, scale = torch_quantize_col(x, offsets)
    blk, blocks = colwise_blocks(offsets, x.shape[0], g)
    n = blk.numel()
    E = offsets.numel()
    counts = torch.diff(offsets.long(), prepend=offsets.new_zeros(1).long())
    start = offsets.long() - counts
    expert = torch.repeat_interleave(torch.arange(E, device=x.device), counts)
    local = torch.arange(n, device=x.device) - start[expert]
    column = blk * g + local % g
    out = torch.zeros(x.shape[1], g * blocks, dtype=data.dtype,
                      device=x.device)
    out[:, column] = data[:n].t()
    return out, scale


def torch_dequantize_row(d, s):
    M, H = d.shape
    return (d.float().view(M, H // 128, 128) * s.unsqueeze(-1)).view(
        M, H).to(torch.bfloat16)


def torch_swiglu(x):
    g, u = x.chunk(2, dim=-1)
    return F.silu(g) * u


def torch_swiglu_grad(x, dy):
    g, u = x.float().chunk(2, dim=-1)
    d = dy.float()
    s = torch.sigmoid(g)
    dg = d * u * s * (1 + g * (1 - s))
    du = d * g * s
    return torch.cat([dg, du], dim=-1).to(x.dtype)


def torch_nf4(packed, absmax, codebook, ids):
    p = packed.index_select(0, ids.long())
    S, N, K2 = p.shape
    nib = torch.stack([p >> 4, p & 15], dim=-1).view(S, N, 2 * K2).long()
    vals = codebook[nib].view(S, -1, 64)
    a = absmax.index_select(0, ids.long()).unsqueeze(-1)
    return (vals * a).view(S, N, 2 * K2).to(torch.bfloat16)


# ---------------------------------------------------------------------------
# One model shape and token count
# ---------------------------------------------------------------------------

def cases(bundle, key, T, gen):
    """Yields (kernel, moec fn, torch fn, check fn, bytes) for one shape."""
    m = MODELS[key]
    E, H, k = m["E"], m["H"], m["k"]
    dev = "cuda"
    R = T * k
    logits = torch.randn(T, E, device=dev, generator=gen)
    bias = (0.1 * torch.randn(E, device=dev, generator=gen)
            if key == "dsv3" else None)
    route = bundle.entry(f"route_{key}")
    route_in = (logits,) if bias is None else (logits, bias)
    w, ids, slots, offsets = torch_route(logits, m, bias)
    positions = positions_of(slots)
    route_out = (torch.empty_like(w), torch.empty_like(ids),
                 torch.empty_like(slots), torch.empty_like(offsets),
                 torch.empty_like(positions))

    def check_route():
        route(*route_in, out=route_out, check_values=False)
        # The ids may differ from torch's where two scores (nearly) tie:
        # moec's sigmoid is approximate. The sort is checked exactly against
        # the kernel's own ids: slots, offsets, and positions that invert
        # the slots.
        same = (route_out[1] == ids).float().mean().item()
        mine = route_out[1].flatten().long()
        sorted_ok = (
            torch.equal(route_out[2],
                        torch.argsort(mine, stable=True).int())
            and torch.equal(route_out[3], torch.cumsum(
                torch.bincount(mine, minlength=E), 0).int())
            and torch.equal(route_out[2][route_out[4].long()],
                            torch.arange(R, dtype=slots.dtype, device=dev)))
        return max(rel_err(route_out[0], w), 1 - same, float(not sorted_ok))
    yield ("routing", lambda: route(*route_in, out=route_out,
                                    check_values=False),
           lambda: torch_route(logits, m, bias), check_route, None)

    x = torch.randn(T, H, device=dev, generator=gen).to(torch.bfloat16)
    perm = bundle.entry(f"permute_{key}")
    p_out = (torch.empty(R, H, dtype=torch.bfloat16, device=dev),
             torch.empty(R, device=dev))

    def check_perm():
        perm(x, slots, offsets, w, positions, out=p_out, check_values=False)
        ref = torch_permute(x, slots, w, k)
        return max(rel_err(p_out[0], ref[0]), rel_err(p_out[1], ref[1]))
    yield ("permute", lambda: perm(x, slots, offsets, w, positions, out=p_out,
                                   check_values=False),
           lambda: torch_permute(x, slots, w, k), check_perm,
           T * H * 2 + R * 4 * 3 + R * H * 2 + E * 4)

    rows = torch.randn(R, H, device=dev, generator=gen).to(torch.bfloat16)
    routed = (w, slots, offsets, positions)
    yield from grad_cases(bundle, key, m, T, gen, rows, routed)
    yield from quantize_cases(bundle, key, T, x, rows, routed)
    yield from swiglu_cases(bundle, key, m, T, gen)


def grad_cases(bundle, key, m, T, gen, rows, routed):
    """unpermute, and the backward of permute and of unpermute."""
    E, H, k = m["E"], m["H"], m["k"]
    dev = "cuda"
    R = T * k
    w, slots, offsets, positions = routed
    unperm = bundle.entry(f"unpermute_{key}")
    u_out = torch.empty(T, H, dtype=torch.bfloat16, device=dev)

    def check_unperm():
        unperm(rows, slots, offsets, w, positions, out=u_out, check_values=False)
        ref = torch_unpermute(rows.double(), slots, w.double(), k, T)
        return rel_err(u_out, ref)
    yield ("unpermute", lambda: unperm(rows, slots, offsets, w, positions, out=u_out,
                                       check_values=False),
           lambda: torch_unpermute(rows, slots, w, k, T), check_unperm,
           R * H * 2 + R * 4 * 2 + T * H * 2 + E * 4)

    drows, dprobs = rows, torch.randn(R, device=dev, generator=gen)
    pgrad = bundle.entry(f"permute_grad_{key}")
    pg_out = (torch.empty(T, H, dtype=torch.bfloat16, device=dev),
              torch.empty(T, k, device=dev))

    def check_pgrad():
        pgrad(drows, slots, offsets, dprobs, w, positions, out=pg_out,
              check_values=False)
        ref = torch_permute_grad(drows.double(), slots, dprobs.double(), k, T)
        return max(rel_err(pg_out[0], ref[0]), rel_err(pg_out[1], ref[1]))
    yield ("permute grad", lambda: pgrad(drows, slots, offsets, dprobs, w,
                                         positions, out=pg_out, check_values=False),
           lambda: torch_permute_grad(drows, slots, dprobs, k, T),
           check_pgrad, R * H * 2 + R * 4 * 2 + T * H * 2 + T * k * 4 + E * 4)

    dtok = torch.randn(T, H, device=dev, generator=gen).to(torch.bfloat16)
    ugrad = bundle.entry(f"unpermute_grad_{key}")
    ug_out = (torch.empty(R, H, dtype=torch.bfloat16, device=dev),
              torch.empty(T, k, device=dev))

    def check_ugrad():
        ugrad(dtok, slots, offsets, w, positions, rows, out=ug_out, check_values=False)
        ref = torch_unpermute_grad(dtok.double(), slots, w.double(),
                                   rows.double(), k)
        return max(rel_err(ug_out[0], ref[0]), rel_err(ug_out[1], ref[1]))
    yield ("unpermute grad", lambda: ugrad(dtok, slots, offsets, w, positions,
                                           rows, out=ug_out, check_values=False),
           lambda: torch_unpermute_grad(dtok, slots, w, rows, k), check_ugrad,
           T * H * 2 + R * H * 2 * 2 + R * 4 + T * k * 4 * 2 + E * 4)


def quantize_cases(bundle, key, T, x, rows, routed):
    """FP8 quantization by row and by column group, and dequantization."""
    _, _, offsets, _ = routed
    H = x.shape[1]
    R = rows.shape[0]
    E = offsets.numel()
    dev = "cuda"
    qrow = bundle.entry(f"quantize_row_{key}")
    q_out = (torch.empty(T, H, dtype=torch.float8_e4m3fn, device=dev),
             torch.empty(T, H // 128, device=dev))

    def check_qrow():
        qrow(x, out=q_out, check_values=False)
        d, s = torch_quantize_row(x)
        return max(rel_err(q_out[1], s), rel_err(q_out[0].float(), d.float()))
    yield ("quantize row", lambda: qrow(x, out=q_out, check_values=False),
           lambda: torch_quantize_row(x), check_qrow,
           T * H * 2 + T * H + T * H // 128 * 4)

    qcol = bundle.entry(f"quantize_col_{key}")
    blk, blocks = colwise_blocks(offsets, R)
    c_out = (torch.empty(R, H, dtype=torch.float8_e4m3fn, device=dev),
             torch.empty(blocks, H, device=dev))

    def check_qcol():
        qcol(rows, offsets, out=c_out, check_values=False)
        d, s = torch_quantize_col(rows, offsets)
        used = int(blk.max().item()) + 1
        return max(rel_err(c_out[1][:used], s[:used]),
                   rel_err(c_out[0].float(), d.float()))
    yield ("quantize col", lambda: qcol(rows, offsets, out=c_out,
                                        check_values=False),
           lambda: torch_quantize_col(rows, offsets), check_qcol,
           R * H * 2 + R * H + blocks * H * 4 + E * 4)

    qcolt = bundle.entry(f"quantize_colt_{key}")
    t_out = (torch.empty(H, 128 * blocks, dtype=torch.float8_e4m3fn,
                         device=dev),
             torch.empty(blocks, H, device=dev))

    def check_qcolt():
        qcolt(rows, offsets, out=t_out, check_values=False)
        d, s = torch_quantize_col_t(rows, offsets)
        used = int(blk.max().item()) + 1
        return max(rel_err(t_out[1][:used], s[:used]),
                   rel_err(t_out[0].float(), d.float()))
    yield ("quantize col T", lambda: qcolt(rows, offsets, out=t_out,
                                           check_values=False),
           lambda: torch_quantize_col_t(rows, offsets), check_qcolt,
           R * H * 2 + 128 * blocks * H + blocks * H * 4 + E * 4)

    dq = bundle.entry(f"dequantize_row_{key}")
    d8, s8 = torch_quantize_row(x)
    dq_out = torch.empty(T, H, dtype=torch.bfloat16, device=dev)

    def check_dq():
        dq(d8, s8, out=dq_out, check_values=False)
        return rel_err(dq_out, d8.double() *
                       s8.double().repeat_interleave(128, 1))
    yield ("dequantize fp8", lambda: dq(d8, s8, out=dq_out,
                                        check_values=False),
           lambda: torch_dequantize_row(d8, s8), check_dq,
           T * H + T * H // 128 * 4 + T * H * 2)


def swiglu_cases(bundle, key, m, T, gen):
    """SwiGLU and its backward on [T*k, 2I] rows."""
    I, k = m["I"], m["k"]
    dev = "cuda"
    R = T * k
    xs = torch.randn(R, 2 * I, device=dev, generator=gen).to(torch.bfloat16)
    dy = torch.randn(R, I, device=dev, generator=gen).to(torch.bfloat16)
    sw = bundle.entry(f"swiglu_{key}")
    sw_out = torch.empty(R, I, dtype=torch.bfloat16, device=dev)

    def check_sw():
        sw(xs, out=sw_out, check_values=False)
        return rel_err(sw_out, torch_swiglu(xs.double()))
    yield ("swiglu", lambda: sw(xs, out=sw_out, check_values=False),
           lambda: torch_swiglu(xs), check_sw, R * 2 * I * 2 + R * I * 2)

    swg = bundle.entry(f"swiglu_grad_{key}")
    swg_out = torch.empty(R, 2 * I, dtype=torch.bfloat16, device=dev)

    def check_swg():
        swg(xs, dy, out=swg_out, check_values=False)
        return rel_err(swg_out, torch_swiglu_grad(xs.double(), dy.double()))
    yield ("swiglu grad", lambda: swg(xs, dy, out=swg_out,
                                      check_values=False),
           lambda: torch_swiglu_grad(xs, dy), check_swg,
           R * 2 * I * 2 + R * I * 2 + R * 2 * I * 2)


def nf4_case(bundle, key, gen):
    n = NF4[key]
    E, N, K, S = n["E"], n["N"], n["K"], n["S"]
    dev = "cuda"
    packed = torch.randint(0, 256, (E, N, K // 2), dtype=torch.uint8,
                           device=dev, generator=gen)
    absmax = torch.rand(E, N * K // 64, device=dev, generator=gen) + 0.1
    codebook = torch.sort(torch.randn(16, device=dev, generator=gen)).values
    ids = torch.randperm(E, device=dev, generator=gen)[:S].int()
    entry = bundle.entry(f"nf4_{key}")
    out = torch.empty(S, N, K, dtype=torch.bfloat16, device=dev)

    def check():
        entry(packed, absmax, codebook, ids, out=out, check_values=False)
        return rel_err(out, torch_nf4(packed, absmax.double(),
                                      codebook.double(), ids))
    return ("dequantize nf4",
            lambda: entry(packed, absmax, codebook, ids, out=out,
                          check_values=False),
            lambda: torch_nf4(packed, absmax, codebook, ids), check,
            S * N * K // 2 + S * N * K // 64 * 4 + S * N * K * 2 + S * 4)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--tokens", default="2048,8192,32768")
    parser.add_argument("--models", default="qwen3,dsv3")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--kernels", help="only these (comma-separated, "
                        "e.g. routing,permute)")
    parser.add_argument("--flush", choices=("read", "write"), default="read",
                        help="how the L2 is evicted before each timed run "
                        "(see make_flush; 'write' was used until 2026-11-21)")
    parser.add_argument("--empty-cache", action="store_true",
                        help="return torch's cached GPU memory to the driver "
                        "after every case, as until 2026-11-21: the later "
                        "cases then get freshly mapped memory and ran up to "
                        "10 %% slower (NF4 at DeepSeek-V3: 94 -> 85 %% of "
                        "copy), moec and torch alike")
    parser.add_argument("--graph-sets", type=int, default=0,
                        help="also time each kernel under 400 MB as up to "
                        "this many launches on as many input sets in one "
                        "CUDA graph, per launch (fewer where memory is "
                        "short; 8 in the results; run it on one shape in "
                        "a fresh process: in a full run the graph times of "
                        "the later shapes strayed by up to 7 %%)")
    parser.add_argument("--profile", action="store_true",
                        help="also print each moec kernel's GPU time")
    return parser.parse_args()


def record(args, flush, results, key, T, sets, graph_sets):
    """sets: one (kernel, moec fn, torch fn, check, bytes) per input
    set; the first is checked and event-timed, the first graph_sets
    also graph-timed. Appends the row to results."""
    kernel, moec_fn, torch_fn, check, nbytes = sets[0]
    if args.kernels and kernel not in args.kernels.split(","):
        return
    err = check()
    t_moec = timed(moec_fn, args.iters, flush)
    t_torch = timed(torch_fn, args.iters, flush)
    row = dict(model=key, T=T, kernel=kernel, moec_ms=t_moec,
               torch_ms=t_torch, speedup=t_torch / t_moec, err=err,
               bytes=nbytes)
    if nbytes:
        row["tbps"] = nbytes / t_moec / 1e9
        row["pct_copy"] = pct_copy(nbytes, t_moec)
        row["torch_pct_copy"] = pct_copy(nbytes, t_torch)
    results.append(row)
    bw = (f"{row['tbps']:5.2f} TB/s {row['pct_copy']:5.1f}%  torch "
          f"{row['torch_pct_copy']:5.1f}%" if nbytes else " " * 33)
    print(f"{key:6} T={T:<6} {kernel:15} moec {t_moec * 1e3:9.1f} us  "
          f"torch {t_torch * 1e3:9.1f} us  x{row['speedup']:6.2f}  {bw}"
          f"  err {err:.2e}", flush=True)
    # Graph timing for the kernels under GRAPH_BYTES (where the launch
    # and events cost a point or more), with enough sets that a replay
    # moves GRAPH_BYTES. Above it, the full bench's graph times ran up
    # to 10 % over the single launch's on the same buffers, which the
    # same kernels in a fresh process did not repeat (see
    # bench/results/memory-bound-h200.md).
    if graph_sets and (not nbytes or nbytes < GRAPH_BYTES):
        graph_record(row, sets, graph_sets, args.iters, flush)
    if args.profile:
        print_kernel_times(row, moec_fn)
    if args.empty_cache:
        torch.cuda.empty_cache()


def pct_copy(nbytes, ms):
    return 100 * nbytes / ms / 1e9 / COPY_TBPS


def graph_record(row, sets, graph_sets, iters, flush):
    """The graph times of moec and torch on up to graph_sets of `sets`
    into row, printed."""
    kernel, nbytes = row["kernel"], row["bytes"]
    want = math.ceil(GRAPH_BYTES / nbytes) if nbytes else graph_sets
    used = sets[:max(2, min(graph_sets, want))]
    row["graph_sets"] = len(used)
    for who, index in (("moec", 1), ("torch", 2)):
        if who == "torch" and kernel in HOST_SYNC_IN_TORCH:
            ms, why = None, "syncs with the host"
        else:
            ms, why = graph_timed([s[index] for s in used], iters, flush)
        row[f"{who}_graph_ms"] = ms
        if why:
            row[f"{who}_graph_error"] = why
        elif nbytes:
            row[f"{who}_graph_pct_copy"] = pct_copy(nbytes, ms)
    g_m, g_t = row["moec_graph_ms"], row["torch_graph_ms"]

    def show(ms, who):
        if ms is None:
            return f"   (not captured: {row[who + '_graph_error'][:60]})"
        return f"{ms * 1e3:9.1f} us" + (
            f" {row[who + '_graph_pct_copy']:5.1f}%" if nbytes else "")
    ratio = f"  x{g_t / g_m:6.2f}" if g_m and g_t else ""
    print(f"{'':6}   graph of {len(used)}: moec {show(g_m, 'moec')}"
          f"  torch {show(g_t, 'torch')}{ratio}", flush=True)


def input_sets(build, graph_sets):
    """build() called once, then again while memory allows, up to
    graph_sets results: the input sets the graph timing rotates
    over (each set is generated anew, so no launch finds its inputs
    in L2 from the one before)."""
    before = torch.cuda.memory_allocated()
    try:
        first = build()
    except torch.cuda.OutOfMemoryError:
        first = None  # retried below, once the failed build is freed
    if first is None:
        # The cache holds the previous shapes' blocks, too fragmented
        # for this one's buffers: hand them back and map anew.
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        first = build()
    sets = [first]
    size = max(1, torch.cuda.memory_allocated() - before)
    free = (torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved()
            - torch.cuda.memory_allocated())
    # A third of what is free: the torch baselines' outputs in the
    # graph's own pool need about as much again.
    count = max(1, min(graph_sets, int(free / 3 // size)))
    try:
        while len(sets) < count:
            sets.append(build())
    except torch.cuda.OutOfMemoryError:
        pass
    return sets


def main():
    args = parse_args()
    models(args.models)  # unknown keys fail here
    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush(args.flush)
    results = []
    for key in args.models.split(","):
        for T in (int(t) for t in args.tokens.split(",")):
            sets = input_sets(lambda: list(cases(bundle, key, T, gen)),
                              args.graph_sets)
            for i in range(len(sets[0])):
                record(args, flush, results, key, T, [s[i] for s in sets],
                       args.graph_sets and len(sets))
            del sets
        sets = input_sets(lambda: [nf4_case(bundle, key, gen)],
                          args.graph_sets)
        record(args, flush, results, key, 0, [s[0] for s in sets],
               args.graph_sets and len(sets))
        del sets
    if args.json:
        write_json(args.json, dict(command=" ".join(sys.argv),
                                   device=torch.cuda.get_device_name(),
                                   rows=results))
    bad = [r for r in results if not (r["err"] < 2e-2)]
    for r in bad:
        print(f"MISMATCH {r['model']} T={r['T']} {r['kernel']}: err "
              f"{r['err']:.3e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
