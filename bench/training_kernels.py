#!/usr/bin/env python3
"""The grouped matmuls of an MoE layer's backward: moec against
torch._grouped_mm on the same inputs, in the same run.

Runs on the GPU machine with the runtime-only moec package and torch:

    # here (MLIR):
    build/bin/moec compile bench/kernels/training_kernels.mlir \\
        -o .device/training_kernels.moecb --target sm_90a
    # on the GPU:
    PYTHONPATH=/tmp/rt/python_packages python3 bench/training_kernels.py \\
        .device/training_kernels.moecb --json $OUT/training_kernels.json

Kernels (bf16 in and out, f32 accumulation; forward weights in the
nn.Linear layout [E, N, K]):
  dx_gate_up  dg [R, 2I] times w_gate_up [E, 2I, H] -> [R, H]: the input
              gradient of the gate_up projection (rhs [E, K, N]).
  dx_down     dy [R, H] times w_down [E, H, I] -> [R, I].
  dw_gate_up  the weight gradient x_eᵀ · dg_e per expert: x [R, H] and
              dg [R, 2I] in grouped row order -> [E, H, 2I] (bf16).
  dw_down     h [R, I] and dy [R, H] -> [E, I, H].
  dw_gate_up_gathered
              gate_up's weight gradient with nn.Linear weights [E, 2I, H]
              from the token rows x [T, H] read by slot: moec's grouped_weight_grad
              with transpose_rhs (x gathered in the kernel) against moec
              unfused (moe.permute's copy of x, then dgᵀ · rows) and torch
              (torch._grouped_mm(dg.t(), rows, offs) on the rows that
              autograd saved from the forward's index_select: the copy is
              not timed).
  dw_gate_up_accumulate
              gradient accumulation: dw_gate_up_gathered's gradient added
              to an f32 main gradient [E, 2I, H] (main += dW, as Megatron's
              fused gradient accumulation does). moec fused (`accumulate`:
              the add in the weight gradient's epilogue, main passed as the
              output too, so updated in place) against moec unfused (the
              bf16 gathered gradient, then main.add_) and torch
              (torch._grouped_mm on the saved rows, then main.add_). err
              compares the increments of main. FLOPs are the matmul's.
  dx_down_swiglu
              dx_down into SwiGLU's gradient: from dy [R, H], w_down and the
              saved gate_up output h [R, 2I], the gradient of h [R, 2I].
              moec fused (one matmul whose epilogue reads h: activation =
              swiglu_grad) against moec unfused (the matmul, then
              moe.swiglu_grad) and torch (torch._grouped_mm, then the
              element-wise ops autograd runs for silu(g) * u: mul,
              silu_backward, silu, mul, cat). FLOPs are the matmul's.

R = T*k grouped rows from random top-k routing (bench/grouped_gemm.py's
random_routing: at small T some experts are empty); with --skew Z the
logit of expert e is lowered by Z*ln(1 + e), so that the first experts
take most rows, the imbalance of a router early in training (on the H200
runs Z = 2 put expert 0 in nearly every token's top k: T of the T*k rows).
"max_rows" gives the largest group. Baselines, also the
references (relative error of the float32 difference < 2e-2):
torch._grouped_mm(a, w, offs=offsets) with w the contiguous [E, K, N]
weights for dX, torch._grouped_mm(x.t(), dy, offs=offsets) for dW. Timing as in bench/grouped_gemm.py: CUDA events, the L2
evicted before every run, median of --iters. FLOPs are 2*R*K*N; % of peak
is against torch.mm 8192^3 bf16 measured in the same run. "ratio" is
torch's time over moec's (> 1: moec is faster).
"""

import argparse

import torch

import moec
from common import (BF16, TOLERANCE, fits, free_bytes, make_flush, models,
                    random_weights, rel_err, report_peak, skewed_routing,
                    timed, write_json)

# --models' default and the rows' order.
MODEL_KEYS = ("mixtral", "qwen3", "qwen35", "olmoe", "dsv3")

KERNELS = ("dx_gate_up", "dx_down", "dw_gate_up", "dw_down", "dx_down_swiglu",
           "dw_gate_up_gathered", "dw_gate_up_accumulate")
# (K, N) of each kernel's product for a model m.
SHAPES = {
    "dx_gate_up": lambda m: (2 * m["I"], m["H"]),
    "dx_down": lambda m: (m["H"], m["I"]),
    "dw_gate_up": lambda m: (m["H"], 2 * m["I"]),
    "dw_down": lambda m: (m["I"], m["H"]),
    "dx_down_swiglu": lambda m: (m["H"], m["I"]),
    "dw_gate_up_gathered": lambda m: (m["H"], 2 * m["I"]),
    "dw_gate_up_accumulate": lambda m: (m["H"], 2 * m["I"]),
}


def dx_case(bundle, kernel, key, dy, offsets, w):
    """moec's entry `{kernel}_{key}` and torch._grouped_mm on dy · w[e]
    (w [E, K, N])."""
    entry = bundle.entry(f"{kernel}_{key}")
    out = torch.empty(dy.shape[0], w.shape[2], dtype=BF16, device="cuda")

    def run_moec():
        entry(dy, offsets, w, out=out, check_values=False)
        return out

    def run_torch():
        return torch._grouped_mm(dy, w, offs=offsets)

    flops = 2 * dy.shape[0] * w.shape[1] * w.shape[2]
    return run_moec, run_torch, flops


def swiglu_grad_case(bundle, key, dy, offsets, w, h):
    """dx_down into SwiGLU's gradient: moec fused and unfused, and torch."""
    fused = bundle.entry(f"dx_down_swiglu_{key}")
    unfused = bundle.entry(f"dx_down_swiglu_unfused_{key}")
    R, I = dy.shape[0], w.shape[2]
    out = torch.empty(R, 2 * I, dtype=BF16, device="cuda")
    da = torch.empty(R, I, dtype=BF16, device="cuda")

    def run_moec():
        fused(dy, offsets, w, h, out=out, check_values=False)
        return out

    def run_unfused():
        unfused(dy, offsets, w, h, out=(out, da), check_values=False)
        return out

    def run_torch():
        d = torch._grouped_mm(dy, w, offs=offsets)
        g, u = h[:, :I], h[:, I:]
        # What autograd runs for silu(g) * u: d(silu(g)) = d * u, then
        # silu_backward; du = d * silu(g).
        dg = torch.ops.aten.silu_backward(d * u, g)
        return torch.cat((dg, d * torch.nn.functional.silu(g)), dim=1)

    flops = 2 * R * w.shape[1] * I
    return run_moec, run_unfused, run_torch, flops


def dw_case(bundle, kernel, key, x, dy, offsets, E):
    """moec's weight-gradient entry `{kernel}_{key}` and
    torch._grouped_mm(x.t(), dy, offs=offsets): [E, K, N]."""
    entry = bundle.entry(f"{kernel}_{key}")
    out = torch.empty(E, x.shape[1], dy.shape[1], dtype=BF16, device="cuda")

    def run_moec():
        entry(x, dy, offsets, out=out, check_values=False)
        return out

    def run_torch():
        return torch._grouped_mm(x.t(), dy, offs=offsets)

    flops = 2 * x.shape[0] * x.shape[1] * dy.shape[1]
    return run_moec, run_torch, flops


def dw_gathered_case(bundle, key, x, dg, offsets, slots, k, E):
    """[E, 2I, H] = Σ dgᵀ · x[slot // k]: moec's gathered entry, its
    permute-first form, and torch._grouped_mm on the gathered rows."""
    gathered = bundle.entry(f"dwg_gate_up_{key}")
    permuted = bundle.entry(f"dwp_gate_up_{key}")
    out = torch.empty(E, dg.shape[1], x.shape[1], dtype=BF16, device="cuda")
    rows = x.index_select(0, (slots // k).long())

    def run_moec():
        gathered(x, dg, offsets, slots, out=out, check_values=False)
        return out

    def run_unfused():
        permuted(x, dg, offsets, slots, out=out, check_values=False)
        return out

    def run_torch():
        return torch._grouped_mm(dg.t(), rows, offs=offsets)

    flops = 2 * dg.shape[0] * dg.shape[1] * x.shape[1]
    return run_moec, run_unfused, run_torch, flops


def dw_accumulate_case(bundle, key, x, dg, offsets, slots, k, E, gen):
    """main += Σ dgᵀ · x[slot // k] into an f32 main gradient [E, 2I, H]:
    moec fused (in place), moec unfused and torch, each then main.add_.
    Also returns the error of moec's increment of main against torch's
    gradient."""
    fused = bundle.entry(f"dwa_gate_up_{key}")
    gathered = bundle.entry(f"dwg_gate_up_{key}")
    shape = (E, dg.shape[1], x.shape[1])
    main = torch.randn(shape, device="cuda", generator=gen)
    grad = torch.empty(shape, dtype=BF16, device="cuda")
    rows = x.index_select(0, (slots // k).long())

    def run_moec():
        fused(x, dg, offsets, slots, main, out=main, check_values=False)
        return main

    def run_unfused():
        gathered(x, dg, offsets, slots, out=grad, check_values=False)
        return main.add_(grad)

    def run_torch():
        return main.add_(torch._grouped_mm(dg.t(), rows, offs=offsets))

    start = main.clone()
    run_moec()
    main.sub_(start)  # moec's increment
    err = rel_err(main.reshape(-1, shape[2]),
                  torch._grouped_mm(dg.t(), rows, offs=offsets)
                  .reshape(-1, shape[2]))
    main.copy_(start)
    del start
    flops = 2 * dg.shape[0] * dg.shape[1] * x.shape[1]
    return run_moec, run_unfused, run_torch, flops, err


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="training_kernels.moecb")
    parser.add_argument("--tokens", default="2048,8192,32768")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--skew", type=float, default=0.0,
                        help="routing imbalance Z (0: uniform random)")
    args = parser.parse_args()

    tokens = [int(t) for t in args.tokens.split(",")]
    kernels = args.kernels.split(",")
    for kernel in kernels:
        if kernel not in KERNELS:
            parser.error(f"unknown kernel {kernel!r} (known: "
                         f"{', '.join(KERNELS)})")
    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush("read")
    device, peak_ms, peak = report_peak(args.iters, flush, gen)

    rows = []
    for key, m in models(args.models).items():
        E, H, I, k = m["E"], m["H"], m["I"], m["k"]
        if not fits(2 * E * 2 * I * H * 2, f"{key} weights"):
            continue
        weights = {"dx_gate_up": random_weights((E, 2 * I, H), gen),
                   "dx_down": random_weights((E, H, I), gen)}  # dW: none
        for T in tokens:
            R = T * k
            if not fits(R * (2 * I + H) * 2 * 3, f"{key} T={T}"):
                continue
            slots, offsets = skewed_routing(T, E, k, gen, args.skew)
            max_rows = int(torch.diff(offsets, prepend=offsets.new_zeros(1))
                           .max())
            for kernel in kernels:
                K, N = SHAPES[kernel](m)
                dy = torch.randn(R, N if kernel.startswith("dw") else K,
                                 device="cuda", dtype=BF16, generator=gen)
                run_unfused = err = None
                if kernel == "dw_gate_up_accumulate":
                    if not fits(E * N * K * (4 * 2 + 2 * 2),
                                f"{key} main gradient"):
                        continue
                    x = torch.randn(T, K, device="cuda", dtype=BF16,
                                    generator=gen)
                    run_moec, run_unfused, run_torch, flops, err = \
                        dw_accumulate_case(bundle, key, x, dy, offsets, slots,
                                           k, E, gen)
                elif kernel == "dw_gate_up_gathered":
                    x = torch.randn(T, K, device="cuda", dtype=BF16,
                                    generator=gen)
                    run_moec, run_unfused, run_torch, flops = \
                        dw_gathered_case(bundle, key, x, dy, offsets, slots,
                                         k, E)
                elif kernel.startswith("dw"):
                    x = torch.randn(R, K, device="cuda", dtype=BF16,
                                    generator=gen)
                    run_moec, run_torch, flops = dw_case(
                        bundle, kernel, key, x, dy, offsets, E)
                elif kernel == "dx_down_swiglu":
                    x = torch.randn(R, 2 * N, device="cuda", dtype=BF16,
                                    generator=gen)  # the saved gate_up h
                    run_moec, run_unfused, run_torch, flops = \
                        swiglu_grad_case(bundle, key, dy, offsets,
                                         weights["dx_down"], x)
                else:
                    run_moec, run_torch, flops = dx_case(
                        bundle, kernel, key, dy, offsets, weights[kernel])
                # [E, K, N] weight gradients as [E*K, N]: rel_err goes a
                # slab of rows at a time.
                if err is None:
                    err = rel_err(run_moec().reshape(-1, N),
                                  run_torch().reshape(-1, N))
                ms = {"moec": timed(run_moec, args.iters, flush),
                      "grouped_mm": timed(run_torch, args.iters, flush)}
                if run_unfused:
                    ms["moec_unfused"] = timed(run_unfused, args.iters, flush)
                tflops = {n: flops / t / 1e9 for n, t in ms.items()}
                row = dict(model=key, T=T, kernel=kernel, skew=args.skew,
                           max_rows=max_rows, flops=flops, ms=ms,
                           tflops=tflops,
                           pct_peak={n: 100 * v / peak
                                     for n, v in tflops.items()},
                           ratio=ms["grouped_mm"] / ms["moec"], err=err)
                rows.append(row)
                print(f"{key:7} T={T:<6} {kernel:11} moec {ms['moec']:8.3f} "
                      f"ms {tflops['moec']:6.1f} TF/s "
                      f"{row['pct_peak']['moec']:5.1f}% | grouped_mm "
                      f"{ms['grouped_mm']:8.3f} ms "
                      f"{row['pct_peak']['grouped_mm']:5.1f}% "
                      f"x{row['ratio']:5.2f} | err {err:.1e} | max_rows "
                      f"{max_rows}"
                      + (f" | unfused {ms['moec_unfused']:8.3f} ms"
                         if run_unfused else "")
                      + ("" if err < TOLERANCE else "  MISMATCH"),
                      flush=True)
                del dy, run_moec, run_torch, run_unfused
                x = None
            del slots, offsets
            free_bytes()
        del weights
        free_bytes()
    if args.json:
        write_json(args.json, dict(device=device, torch=torch.__version__,
                                   peak_tflops=peak, peak_ms=peak_ms,
                                   rows=rows))


if __name__ == "__main__":
    main()
