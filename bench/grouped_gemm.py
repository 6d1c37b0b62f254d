#!/usr/bin/env python3
"""Grouped matmul (GEMM) kernels: moec against torch._grouped_mm, a
per-expert cuBLAS loop and torch eager, same inputs, same run.

Runs on the GPU machine with the runtime-only moec package and torch:

    # here (MLIR):
    build/bin/moec compile bench/kernels/grouped_gemm.mlir \
        -o .device/grouped_gemm.moecb --target sm_90a
    build/bin/moec compile examples/qwen3_moe_layer.mlir \
        -o .device/qwen3.moecb --target sm_90a
    # on the H200:
    PYTHONPATH=/tmp/rt/python_packages python3 bench/grouped_gemm.py \
        .device/grouped_gemm.moecb --layer-bundle .device/qwen3.moecb \
        --json $OUT/grouped_gemm.json

Kernels (bf16 in and out, weights in the nn.Linear layout [E, N, K]):
  gather          x [T, H] rows gathered by slot (row r is x[slots[r] // k])
                  times w_gate_up [E, 2I, H] -> [T*k, 2I]
  gate_up_swiglu  the same, then silu(gate) * up -> [T*k, I]
  down            h [T*k, I] times w_down [E, H, I] -> [T*k, H]
  dense_swiglu    a dense SwiGLU MLP (d 4096, I 12288, M = 8192 rows)
  layer           the whole Qwen3-30B-A3B MoE layer (with --layer-bundle)

For every model shape, token count T and kernel it builds one set of random
inputs (routing: random logits, top-k experts per token, the T*k slots
sorted stably by expert; at small T some experts can be empty), checks moec
against torch (||out - ref|| / ||ref|| in float64 < 2e-2), then times
moec and every baseline with CUDA events: the L2 evicted (a 256 MB read) before every run,
a GPU sleep in front so that host launch overhead is hidden (up to ~0.5 ms
of it), median of --iters.

Baselines:
  grouped_mm  torch._grouped_mm(a, w.transpose(-2, -1), offs=offsets), with
              w the contiguous [E, N, K] weights (so mat_b is [E, K, N]
              column-major); for gather / gate_up_swiglu it includes the
              separate gather x.index_select(0, slots // k) (the index
              slots // k is computed once, outside the timing) and, for
              gate_up_swiglu, eager F.silu(g[:, :I]) * g[:, I:].
  loop_graph  torch.mm(a[s:e], w[i].t()) for each non-empty expert (cuBLAS),
              plus the same gather / silu * mul, captured once into a CUDA
              graph and replayed, so that host launch cost is not timed.
  loop_eager  the same loop launched eagerly: host launch overhead beyond
              what the GPU sleep covers is included (E launches per call).
              The group bounds come from the host (read once per shape).
  cublas      (dense_swiglu) torch.mm(x, w1[0].t()), eager silu * mul,
              torch.mm(h, w2[0].t()).
  torch       (layer) the same math composed in torch: f32 router logits,
              softmax, top-8, renormalize, stable argsort, gather,
              torch._grouped_mm gate_up, silu * mul, torch._grouped_mm down,
              weighted index_add_ combine in f32.

FLOPs are 2*R*K*N for each matmul (the SwiGLU elementwise work is not
counted; the layer counts the router, gate_up and down matmuls). TFLOP/s are
also given as % of the dense bf16 peak measured in the same run: the median
of torch.mm on 8192 x 8192 x 8192 bf16. "ratio" is a baseline's time over
moec's (> 1: moec is faster).
"""

import argparse
import sys

import torch

import moec
from common import (BF16, PEAK_SIZE, TOLERANCE, Case, down_case, fits,
                    free_bytes, gathered_case, group_ends, host_groups,
                    make_flush, models, print_kernel_times, random_routing,
                    random_weights, rates, rel_err, report_peak, swiglu,
                    timed, write_json)

# --models' default and the rows' order.
MODEL_KEYS = ("mixtral", "qwen3", "qwen35", "olmoe", "dsv3")
GROUPED_KERNELS = ("gather", "gate_up_swiglu", "down")
DENSE = dict(M=8192, d=4096, I=12288)  # B4 S2048, I = 3d
LAYER = dict(E=128, H=2048, I=768, k=8)  # Qwen3-30B-A3B
# A token's top-k choice is a near tie when its k-th and (k+1)-th router
# logits are closer than this; moec's f32 logits may order those two the
# other way, so the layer check leaves such tokens out (and counts them).
TIE_GAP = 1e-4


def dense_case(bundle, gen):
    M, d, I = DENSE["M"], DENSE["d"], DENSE["I"]
    x = torch.randn(M, d, device="cuda", dtype=BF16, generator=gen)
    offsets = torch.tensor([M], dtype=torch.int32, device="cuda")
    w1 = random_weights((1, 2 * I, d), gen)
    w2 = random_weights((1, d, I), gen)
    entry = bundle.entry("dense_swiglu")
    out = torch.empty(M, d, dtype=BF16, device="cuda")

    def run_moec():
        entry(x, offsets, w1, w2, out=out, check_values=False)
        return out

    def run_cublas():
        h = swiglu(torch.mm(x, w1[0].t()))
        return torch.mm(h, w2[0].t())

    flops = 2 * M * d * 2 * I + 2 * M * I * d
    return Case("dense_swiglu", flops, run_moec, {"cublas": run_cublas},
                reference="cublas")


def router_logits_fn():
    """x, gate_w -> f32 logits [T, E]: a bf16 cuBLAS matmul with f32 output
    where torch has it (torch.mm out_dtype), else an f32 matmul."""
    try:
        a = torch.ones(16, 16, dtype=BF16, device="cuda")
        torch.mm(a, a.t(), out_dtype=torch.float32)
        return (lambda x, g: torch.mm(x, g.t(), out_dtype=torch.float32),
                "torch.mm(x, gate_w.t(), out_dtype=torch.float32)")
    except (TypeError, RuntimeError):
        return (lambda x, g: torch.mm(x.float(), g.float().t()),
                "torch.mm(x.float(), gate_w.float().t())")


def torch_layer(x, gate_w, w_gate_up, w_down, k, logits_fn):
    """The Qwen3 MoE layer composed in torch (same math as the moec entry)."""
    T, H = x.shape
    E = gate_w.shape[0]
    probs = torch.softmax(logits_fn(x, gate_w), dim=-1)
    weights, ids = torch.topk(probs, k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    flat = ids.flatten()
    slots = torch.argsort(flat, stable=True)
    offsets = group_ends(flat, E)
    token = slots // k
    a = x.index_select(0, token)
    g = torch._grouped_mm(a, w_gate_up.transpose(-2, -1), offs=offsets)
    d = torch._grouped_mm(swiglu(g), w_down.transpose(-2, -1), offs=offsets)
    scaled = d.float() * weights.flatten().index_select(0, slots).unsqueeze(1)
    y = torch.zeros(T, H, dtype=torch.float32, device=x.device)
    y.index_add_(0, token, scaled)
    return y.to(BF16)


def layer_case(bundle, T, gen, logits_fn):
    E, H, I, k = LAYER["E"], LAYER["H"], LAYER["I"], LAYER["k"]
    x = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
    gate_w = random_weights((E, H), gen)
    w_gate_up = random_weights((E, 2 * I, H), gen)
    w_down = random_weights((E, H, I), gen)
    entry = bundle.entry("qwen3_moe_layer")
    out = torch.empty(T, H, dtype=BF16, device="cuda")

    def run_moec():
        entry(x, gate_w, w_gate_up, w_down, out=out, check_values=False)
        return out

    def run_torch():
        return torch_layer(x, gate_w, w_gate_up, w_down, k, logits_fn)

    def check(extra):
        # Leave out tokens whose k-th and (k+1)-th logits nearly tie: moec
        # may pick the other expert there (a different, equally valid
        # routing), which would dominate the error.
        top = torch.topk(logits_fn(x, gate_w), k + 1, dim=-1).values
        clear = (top[:, k - 1] - top[:, k]) > TIE_GAP
        ref, got = run_torch(), run_moec()
        extra["near_ties"] = int(T - clear.sum().item())
        return {"moec": rel_err(got[clear], ref[clear]),
                "moec_all_tokens": rel_err(got, ref)}

    R = T * k
    flops = 2 * T * H * E + 2 * R * H * 2 * I + 2 * R * I * H
    return Case("layer", flops, run_moec, {"torch": run_torch},
                reference="torch", check=check)


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="grouped_gemm.moecb")
    parser.add_argument("--layer-bundle", help="a bundle with the entry "
                        "qwen3_moe_layer (examples/qwen3_moe_layer.mlir)")
    parser.add_argument("--tokens", default="512,2048,8192,32768")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--kernels", help="only these (comma-separated: "
                        "gather,gate_up_swiglu,down,dense_swiglu,layer)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--profile", action="store_true",
                        help="also print each moec kernel's GPU time")
    return parser.parse_args()


def record(rows, case, model, T, iters, flush, peak, profile=False):
    """Checks and times one case (moec and each baseline): a row, printed
    and appended to rows."""
    errs = case.check()
    ms = {"moec": timed(case.moec, iters, flush)}
    for name, fn in case.baselines.items():
        ms[name] = timed(fn, iters, flush)
    row = dict(model=model, T=T, kernel=case.kernel, flops=case.flops,
               ms=ms, **rates(case.flops, ms, peak),
               ratio={n: t / ms["moec"] for n, t in ms.items()
                      if n != "moec"},
               err=errs)
    row.update(case.extra)
    rows.append(row)
    bad = [n for n, e in errs.items()
           if n != "moec_all_tokens" and not e < TOLERANCE]
    line = (f"{model:7} T={T:<6} {case.kernel:14} moec {ms['moec']:8.3f} "
            f"ms {row['tflops']['moec']:6.1f} TF/s "
            f"{row['pct_peak']['moec']:5.1f}%")
    for name, ratio in row["ratio"].items():
        line += f" | {name} {ms[name]:8.3f} ms x{ratio:5.2f}"
    line += f" | err {errs['moec']:.1e}"
    if "near_ties" in row:
        line += (f" ({row['near_ties']} near-tie tokens left out; all "
                 f"tokens {errs['moec_all_tokens']:.1e})")
    if bad:
        line += "  MISMATCH " + ",".join(bad)
    print(line, flush=True)
    if profile:
        print_kernel_times(row, case.moec, width=9)


def grouped_cases(bundle, key, m, tokens, kernels, gen):
    """Yields (T, case) of the grouped kernels at each token count."""
    E, H, I, k = m["E"], m["H"], m["I"], m["k"]
    w_bytes = 2 * E * 2 * I * H * 2  # w_gate_up and w_down
    if not fits(w_bytes, f"{key} weights"):
        return
    w_gate_up = random_weights((E, 2 * I, H), gen)
    w_down = random_weights((E, H, I), gen)
    for T in tokens:
        R = T * k
        widest = max(H, 2 * I)
        # inputs, two gathered copies, ~6 live outputs, swiglu temps
        need = 2 * (T * H + R * I + 2 * R * H + 6 * R * widest +
                    3 * R * 2 * I)
        if not fits(need, f"{key} T={T}"):
            continue
        slots, offsets = random_routing(T, E, k, gen)
        groups = host_groups(offsets)
        x = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
        h = torch.randn(R, I, device="cuda", dtype=BF16, generator=gen)
        for kernel in kernels:
            if kernel == "down":
                case = down_case(bundle, key, m, h, offsets, groups, w_down)
            else:
                case = gathered_case(bundle, key, m, x, slots, offsets,
                                     groups, w_gate_up,
                                     activation=kernel != "gather")
            yield T, case
            del case
            free_bytes()
        del slots, offsets, x, h
        free_bytes()
    del w_gate_up, w_down
    free_bytes()


def layer_rows(args, tokens, gen, measure):
    """The whole Qwen3 layer (--layer-bundle) at T >= 2048 and 8192:
    measure(model, T, case) each; returns how torch's router logits are
    computed."""
    layer_bundle = moec.load(args.layer_bundle)
    logits_fn, router = router_logits_fn()
    print(f"layer: torch router logits by {router}", flush=True)
    E, H, I, k = LAYER["E"], LAYER["H"], LAYER["I"], LAYER["k"]
    for T in sorted({8192} | {t for t in tokens if t >= 2048}):
        R = T * k
        need = 2 * (3 * E * H * I + 3 * T * H + 8 * R * H + 4 * R * I) \
            + 4 * (2 * R * H + T * H)
        if fits(need, f"layer T={T}"):
            measure("qwen3", T, layer_case(layer_bundle, T, gen, logits_fn))
            free_bytes()
    return router


def main():
    args = parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    chosen = models(args.models)
    wanted = set(args.kernels.split(",")) if args.kernels else None

    def want(kernel):
        return wanted is None or kernel in wanted

    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush("read")
    device, peak_ms, peak = report_peak(args.iters, flush, gen)
    free_bytes()
    rows = []

    def measure(model, T, case):
        record(rows, case, model, T, args.iters, flush, peak, args.profile)

    kernels = [kn for kn in GROUPED_KERNELS if want(kn)]
    for key, m in chosen.items() if kernels else ():
        for T, case in grouped_cases(bundle, key, m, tokens, kernels, gen):
            measure(key, T, case)
    if want("dense_swiglu"):
        M, d, I = DENSE["M"], DENSE["d"], DENSE["I"]
        if fits(2 * (3 * d * I + 6 * M * d + 6 * M * 2 * I), "dense_swiglu"):
            measure("dense", M, dense_case(bundle, gen))
            free_bytes()
    router = None
    if args.layer_bundle and want("layer"):
        router = layer_rows(args, tokens, gen, measure)

    print_table(rows)
    if args.json:
        write_json(args.json, dict(
            command=" ".join(sys.argv), device=device,
            torch=torch.__version__, peak_tflops=peak, peak_ms=peak_ms,
            peak_shape=[PEAK_SIZE] * 3, iters=args.iters,
            layer_router=router, rows=rows))
    bad = [r for r in rows for n, e in r["err"].items()
           if n != "moec_all_tokens" and not e < TOLERANCE]
    for r in bad:
        worst = {n: f"{e:.3e}" for n, e in r["err"].items()}
        print(f"MISMATCH {r['model']} T={r['T']} {r['kernel']}: err {worst}")
    return 1 if bad else 0


def print_table(rows):
    print()
    print(f"{'model':7} {'T':>6} {'kernel':14} {'moec ms':>9} {'TF/s':>6} "
          f"{'%peak':>6}  baseline ms (ratio)")
    for r in rows:
        others = "  ".join(f"{n} {r['ms'][n]:.3f} (x{v:.2f})"
                           for n, v in r["ratio"].items())
        print(f"{r['model']:7} {r['T']:6} {r['kernel']:14} "
              f"{r['ms']['moec']:9.3f} {r['tflops']['moec']:6.1f} "
              f"{r['pct_peak']['moec']:6.1f}  {others}")


if __name__ == "__main__":
    sys.exit(main())
