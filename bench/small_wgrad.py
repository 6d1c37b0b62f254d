#!/usr/bin/env python3
"""f32 weight gradients with few output tiles per expert: the router's
gradient and LoRA's dA / dB in f32 (adapters kept in f32), where one
expert's output tiles cannot cover the SMs. moec against torch, same
inputs, same run; run it on bundles compiled before and after a change to
compare moec with itself.

    # here (MLIR):
    python3 bench/small_wgrad.py --emit-mlir bench/kernels/small_wgrad.mlir
    build/bin/moec compile bench/kernels/small_wgrad.mlir \\
        -o .device/small_wgrad.moecb --target sm_90a
    # on the GPU (runtime-only moec package and torch):
    PYTHONPATH=build-rt/python_packages python3 bench/small_wgrad.py \\
        .device/small_wgrad.moecb --skews 0,2,8 --json $OUT/small_wgrad.json

Kernels per model (bench/common.py's MODELS), bf16 in, f32 out:
  router_grad  dlᵀ·x [E, H], the router's weight gradient (a
               linalg.matmul reading dl transposed; moec splits its T
               rows into chunks); torch.mm(dl.t(), x) (bf16 out, f32
               accumulate).
  lora_db      [E, 2I, r] = Σ dyᵀ·u per expert, r = 16; torch._grouped_mm
               (dy.t(), u, offs).
  lora_da      [E, r, H] = Σ duᵀ·x per expert; torch._grouped_mm(du.t(),
               x, offs).
R = T*k rows in grouped order from top-k routing; with skew Z the logit of
expert e is lowered by Z*ln(1 + e) (bench/training_kernels.py's
skewed_routing; on the H200 runs Z = 2 already put expert 0 in nearly
every token's top k: T of the T*k rows, 12.5 % at k = 8, 48 % for
Mixtral's k = 2). "max_rows" is the largest group. Timing as
bench/grouped_gemm.py (CUDA events, L2 evicted before every run, median of
--iters). "ratio" is torch's time over moec's. "bitwise_repeat": moec's
output identical over two runs on the same inputs.
"""

import argparse

from common import (BF16, TOLERANCE, make_flush, models, rel_err,
                    report_peak, skewed_routing, timed, write_json)

RANK = 16
KERNELS = ("router_grad", "lora_db", "lora_da")
MODELS_USED = ("mixtral", "qwen3", "olmoe", "dsv3")


def emit_mlir(path):
    """Writes the entries: router_grad_{key}, lora_db_{key}, lora_da_{key}."""
    out = ["// Written by bench/small_wgrad.py --emit-mlir: f32 weight "
           "gradients with\n// few output tiles per expert.\n"]
    for key, m in models(MODELS_USED).items():
        E, H, N, r = m["E"], m["H"], 2 * m["I"], RANK
        out.append(f"""
func.func @router_grad_{key}(%dl: tensor<?x{E}xbf16> {{moe.sym = "T"}},
    %x: tensor<?x{H}xbf16> {{moe.sym = "T"}}) -> tensor<{E}x{H}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{E}x{H}xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{E}x{H}xf32>)
      -> tensor<{E}x{H}xf32>
  %g = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>,
                       affine_map<(m, n, k) -> (k, n)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%dl, %x : tensor<?x{E}xbf16>, tensor<?x{H}xbf16>)
      outs(%acc : tensor<{E}x{H}xf32>) -> tensor<{E}x{H}xf32>
  return %g : tensor<{E}x{H}xf32>
}}
func.func @lora_db_{key}(%dy: tensor<?x{N}xbf16> {{moe.sym = "R"}},
    %u: tensor<?x{r}xbf16> {{moe.sym = "R"}}, %offsets: tensor<{E}xi32>)
    -> tensor<{E}x{N}x{r}xf32> {{
  %g = moe.grouped_weight_grad %dy, %u, %offsets
      : tensor<?x{N}xbf16>, tensor<?x{r}xbf16>, tensor<{E}xi32>
      -> tensor<{E}x{N}x{r}xf32>
  return %g : tensor<{E}x{N}x{r}xf32>
}}
func.func @lora_da_{key}(%du: tensor<?x{r}xbf16> {{moe.sym = "R"}},
    %x: tensor<?x{H}xbf16> {{moe.sym = "R"}}, %offsets: tensor<{E}xi32>)
    -> tensor<{E}x{r}x{H}xf32> {{
  %g = moe.grouped_weight_grad %du, %x, %offsets
      : tensor<?x{r}xbf16>, tensor<?x{H}xbf16>, tensor<{E}xi32>
      -> tensor<{E}x{r}x{H}xf32>
  return %g : tensor<{E}x{r}x{H}xf32>
}}
""")
    with open(path, "w") as f:
        f.write("".join(out))


def case(bundle, kernel, key, m, T, offsets, gen):
    """(run_moec, run_torch, flops) of one kernel at T tokens."""
    import torch
    E, H, N, k = m["E"], m["H"], 2 * m["I"], m["k"]
    entry = bundle.entry(f"{kernel}_{key}")

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=BF16, generator=gen)

    if kernel == "router_grad":
        a, b = rand(T, E), rand(T, H)
        out = torch.empty(E, H, device="cuda")

        def run_moec():
            entry(a, b, out=out, check_values=False)
            return out

        def run_torch():
            return torch.mm(a.t(), b)
    else:
        R = T * k
        a, b = (rand(R, N), rand(R, RANK)) if kernel == "lora_db" else \
            (rand(R, RANK), rand(R, H))
        out = torch.empty(E, a.shape[1], b.shape[1], device="cuda")

        def run_moec():
            entry(a, b, offsets, out=out, check_values=False)
            return out

        def run_torch():
            return torch._grouped_mm(a.t(), b, offs=offsets)
    return run_moec, run_torch, 2 * a.shape[0] * a.shape[1] * b.shape[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?", help="small_wgrad.moecb")
    parser.add_argument("--emit-mlir", metavar="PATH")
    parser.add_argument("--tokens", default="8192,32768")
    parser.add_argument("--models", default=",".join(MODELS_USED))
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--skews", default="0,2,8")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    if args.emit_mlir:
        emit_mlir(args.emit_mlir)
        return
    if not args.bundle:
        parser.error("a bundle (or --emit-mlir PATH)")

    import torch

    import moec

    for kernel in args.kernels.split(","):
        if kernel not in KERNELS:
            parser.error(f"unknown kernel {kernel!r} (known: "
                         f"{', '.join(KERNELS)})")
    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush("read")
    device, _, peak = report_peak(args.iters, flush, gen)
    rows = []
    for key, m in models(args.models).items():
        for T in [int(t) for t in args.tokens.split(",")]:
            for skew in [float(z) for z in args.skews.split(",")]:
                slots, offsets = skewed_routing(T, m["E"], m["k"], gen, skew)
                max_rows = int(torch.diff(
                    offsets, prepend=offsets.new_zeros(1)).max())
                for kernel in args.kernels.split(","):
                    # One group: the routing does not matter.
                    if kernel == "router_grad" and skew != 0:
                        continue
                    run_moec, run_torch, flops = case(
                        bundle, kernel, key, m, T, offsets, gen)
                    out, ref = run_moec(), run_torch()
                    # Run to run bitwise (a split reduction must add its
                    # partial sums in a fixed order).
                    first = out.clone()
                    bitwise = bool(torch.equal(first, run_moec()))
                    err = rel_err(out.reshape(-1, out.shape[-1]).float(),
                                  ref.reshape(-1, out.shape[-1]).float())
                    ms = {"moec": timed(run_moec, args.iters, flush),
                          "torch": timed(run_torch, args.iters, flush)}
                    row = dict(device=device, model=key, T=T, skew=skew,
                               kernel=kernel, max_rows=max_rows, flops=flops,
                               ms=ms, ratio=ms["torch"] / ms["moec"], err=err,
                               bitwise_repeat=bitwise,
                               pct_peak=100 * flops / ms["moec"] / 1e9 / peak)
                    rows.append(row)
                    print(f"{key:8s} T={T:<6d} skew {skew:g} {kernel:12s} "
                          f"max_rows {max_rows:6d} | moec {ms['moec']:7.3f} ms "
                          f"{row['pct_peak']:5.1f}% | torch "
                          f"{ms['torch']:7.3f} ms | x{row['ratio']:5.2f} | "
                          f"err {err:.1e}"
                          + ("" if err < TOLERANCE else "  MISMATCH")
                          + ("" if bitwise else "  NOT-BITWISE-REPEATABLE"),
                          flush=True)
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
