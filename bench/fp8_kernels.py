"""FP8 grouped matmuls with block scales against torch._scaled_grouped_mm and
moec's own bf16 kernel, on an H200.

Modes (the expert matmuls of an MoE layer's gate_up projection, rows
grouped by expert, weights [E, N, K] = [E, 2I, H]):
  forward     y [R, 2I] = x [R, H] . W_e^T
  input_grad  dx [R, H] = dy [R, 2I] . W_e, read from the second, transposed
              FP8 copy [E, H, 2I] of the weights (FP8 wgmma reads both
              operands K-major only)
The weight gradient has no FP8 kernel yet (issue 59, left open).

Every case starts from bf16 inputs. moec quantizes them with DeepSeek-V3's
blocks (1x128 for the activations, 128x128 for the weights), torch with its
rowwise recipe (one scale per row of x and per output column of W);
quantization is outside the timings of both. Error: ||out - ref|| / ||ref||
against the float64 product of the bf16 inputs, so that each side's error
includes its own quantization. Groups: random top-k routing, each expert's
rows rounded up to a multiple of 16 (torch's FP8 grouped GEMM needs it;
moec's kernel does not). The dense FP8 peak (torch._scaled_mm 8192^3,
tensorwise scales, fast accumulation) is measured in the same run.

  python3 bench/fp8_kernels.py --emit-mlir .device/fp8_kernels.mlir
  build/bin/moec compile .device/fp8_kernels.mlir -o .device/fp8_kernels.moecb --target sm_90a
  python3 bench/fp8_kernels.py .device/fp8_kernels.moecb --json bench/results/fp8-kernels-h200.json
"""

import argparse
import sys

from common import (MODELS, fits, free_bytes, ints, make_flush, models,
                    random_weights, rel_err, timed, torch, write_json, BF16)

MODEL_KEYS = ("qwen3", "mixtral", "dsv3", "qwen35", "olmoe")
MODES = ("forward", "input_grad")
FP8 = "f8E4M3FN"
BLOCK = 128
FP8_MAX = 448.0


def mode_shape(m, mode):
    """(K, N) of `mode`: the contraction and output widths."""
    H, N2 = m["H"], 2 * m["I"]
    return (H, N2) if mode == "forward" else (N2, H)


def emit_mlir(path, keys):
    """The bench kernels: fp8_{mode}_{key} and bf16_{mode}_{key}."""
    lines = ["// FP8 and bf16 grouped matmuls for bench/fp8_kernels.py "
             "(written by it)."]
    for key in keys:
        m = MODELS[key]
        E = m["E"]
        for mode in MODES:
            K, N = mode_shape(m, mode)
            kb, nb = -(-K // BLOCK), -(-N // BLOCK)
            x, w = f"tensor<?x{K}x{FP8}>", f"tensor<{E}x{N}x{K}x{FP8}>"
            sx, sw = f"tensor<?x{kb}xf32>", f"tensor<{E}x{nb}x{kb}xf32>"
            out, offs = f"tensor<?x{N}xbf16>", f"tensor<{E}xi32>"
            lines += [
                f"func.func @fp8_{mode}_{key}(%x: {x} {{moe.sym = \"R\"}}, "
                f"%sx: {sx}, %offsets: {offs}, %w: {w}, %sw: {sw}) -> {out} {{",
                f"  %y = moe.grouped_matmul %x, %w, %offsets scales(%sx, %sw : "
                f"{sx}, {sw}) {{transpose_rhs}} : {x}, {w}, {offs} -> {out}",
                f"  return %y : {out}", "}"]
            xb, wb = f"tensor<?x{K}xbf16>", f"tensor<{E}x{N}x{K}xbf16>"
            lines += [
                f"func.func @bf16_{mode}_{key}(%x: {xb} {{moe.sym = \"R\"}}, "
                f"%offsets: {offs}, %w: {wb}) -> {out} {{",
                f"  %y = moe.grouped_matmul %x, %w, %offsets {{transpose_rhs}} "
                f": {xb}, {wb}, {offs} -> {out}",
                f"  return %y : {out}", "}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def quantize_rows(x):
    """x [R, K] bf16 -> (e4m3 [R, K], scales [R, ceil(K/128)]): 1x128."""
    R, K = x.shape
    kb = -(-K // BLOCK)
    xp = torch.nn.functional.pad(x.float(), (0, kb * BLOCK - K))
    blocks = xp.view(R, kb, BLOCK)
    amax = blocks.abs().amax(-1).clamp(min=1e-12)
    scale = amax / FP8_MAX
    q = (blocks / scale[..., None]).view(R, kb * BLOCK)[:, :K]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def quantize_blocks(w):
    """w [E, N, K] bf16 -> (e4m3 [E, N, K], scales [E, ceil(N/128),
    ceil(K/128)]): 128x128."""
    E, N, K = w.shape
    nb, kb = -(-N // BLOCK), -(-K // BLOCK)
    wp = torch.nn.functional.pad(w.float(), (0, kb * BLOCK - K,
                                             0, nb * BLOCK - N))
    blocks = wp.view(E, nb, BLOCK, kb, BLOCK)
    amax = blocks.abs().amax(dim=(2, 4)).clamp(min=1e-12)
    scale = amax / FP8_MAX
    q = (blocks / scale[:, :, None, :, None]).view(E, nb * BLOCK,
                                                   kb * BLOCK)[:, :N, :K]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def quantize_rowwise(a, dim):
    """torch's rowwise recipe: e4m3 of a with one scale per slice along
    every dimension but `dim` (amax over `dim`)."""
    amax = a.float().abs().amax(dim=dim, keepdim=True).clamp(min=1e-12)
    scale = amax / FP8_MAX
    return (a.float() / scale).to(torch.float8_e4m3fn), scale


def aligned_offsets(T, E, k, gen, align=16):
    """Cumulative group ends of random top-k routing, each group rounded
    up to `align` rows (int32, on the GPU), and the total rows."""
    ids = torch.rand(T, E, device="cuda", generator=gen).topk(k, -1).indices
    counts = torch.bincount(ids.flatten(), minlength=E)
    counts = (counts + align - 1) // align * align
    ends = torch.cumsum(counts, 0).to(torch.int32)
    return ends, int(ends[-1].item())


def reference(x, w, ends):
    """float64 x . W_e^T per group (x [R, K], w [E, N, K])."""
    out = torch.empty(x.shape[0], w.shape[1], dtype=torch.float64,
                      device="cuda")
    start = 0
    for e, end in enumerate(ends.tolist()):
        if end > start:
            out[start:end] = x[start:end].double() @ w[e].double().t()
        start = end
    return out


def measure_fp8_peak(iters, flush):
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    ms = timed(lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=BF16,
                                        use_fast_accum=True), iters, flush)
    return ms, 2 * n ** 3 / ms / 1e9


def run_case(bundle, key, m, mode, T, iters, flush, peak, gen):
    E, k = m["E"], m["k"]
    K, N = mode_shape(m, mode)
    ends, R = aligned_offsets(T, E, k, gen)
    x = torch.randn(R, K, device="cuda", dtype=BF16, generator=gen)
    # The weights as the mode reads them: [E, N, K] (input_grad: the
    # transposed copy of the forward's [E, 2I, H]).
    w = random_weights((E, N, K), gen)
    xq, sx = quantize_rows(x)
    wq, sw = quantize_blocks(w)
    out = torch.empty(R, N, dtype=BF16, device="cuda")
    fp8 = bundle.entry(f"fp8_{mode}_{key}")
    bf16 = bundle.entry(f"bf16_{mode}_{key}")
    out_bf16 = torch.empty_like(out)
    # torch rowwise: scale_a [R], scale_b [E, N]; mat_b [E, K, N] column-major.
    xr, sxr = quantize_rowwise(x, dim=1)
    wr, swr = quantize_rowwise(w, dim=2)
    xr, sxr = xr.contiguous(), sxr.view(R).contiguous()
    wr_t, swr = wr.contiguous().transpose(-2, -1), swr.view(E, N).contiguous()

    fns = {
        "moec_fp8": lambda: fp8(xq, sx, ends, wq, sw, out=out,
                                check_values=False),
        "torch_fp8": lambda: torch._scaled_grouped_mm(
            xr, wr_t, sxr, swr, offs=ends, out_dtype=BF16),
        "moec_bf16": lambda: bf16(x, ends, w, out=out_bf16,
                                  check_values=False),
    }
    ref = reference(x, w, ends)
    errs = {name: rel_err(fn(), ref) for name, fn in fns.items()}
    del ref
    ms = {name: timed(fn, iters, flush) for name, fn in fns.items()}
    flops = 2 * R * K * N
    tflops = {n: flops / t / 1e9 for n, t in ms.items()}
    row = dict(model=key, mode=mode, T=T, rows=R, K=K, N=N, flops=flops,
               ms=ms, tflops=tflops,
               pct_peak={n: 100 * v / peak for n, v in tflops.items()},
               vs_torch_fp8=ms["torch_fp8"] / ms["moec_fp8"],
               vs_moec_bf16=ms["moec_bf16"] / ms["moec_fp8"], err=errs)
    print(f"{key:7} {mode:10} T={T:<6} moec fp8 {ms['moec_fp8']:7.3f} ms "
          f"{tflops['moec_fp8']:6.0f} TF/s {row['pct_peak']['moec_fp8']:5.1f}%"
          f" | torch fp8 {ms['torch_fp8']:7.3f} ms x{row['vs_torch_fp8']:.2f}"
          f" | moec bf16 {ms['moec_bf16']:7.3f} ms x{row['vs_moec_bf16']:.2f}"
          f" | err moec {errs['moec_fp8']:.2e} torch {errs['torch_fp8']:.2e}"
          f" bf16 {errs['moec_bf16']:.2e}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?", help="fp8_kernels.moecb")
    parser.add_argument("--emit-mlir", help="write the bench kernels here")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--tokens", default="2048,8192,32768")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    chosen = models(args.models)
    if args.emit_mlir:
        emit_mlir(args.emit_mlir, list(chosen))
        return 0
    if not args.bundle:
        parser.error("the bundle is needed (or --emit-mlir)")
    import moec
    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush("read")
    peak_ms, peak = measure_fp8_peak(args.iters, flush)
    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}: dense FP8 peak {peak:.0f} "
          f"TFLOP/s (torch._scaled_mm 8192^3, {peak_ms:.3f} ms)", flush=True)
    rows = []
    for key, m in chosen.items():
        for mode in args.modes.split(","):
            for T in ints(args.tokens):
                K, N = mode_shape(m, mode)
                R = T * m["k"] + 16 * m["E"]
                need = 2 * m["E"] * N * K * 3 + R * (K + N) * 12
                if not fits(need, f"{key} {mode} T={T}"):
                    continue
                rows.append(run_case(bundle, key, m, mode, T, args.iters,
                                     flush, peak, gen))
                free_bytes()
    if args.json:
        write_json(args.json, dict(command=" ".join(sys.argv), device=device,
                                   torch=torch.__version__, peak_tflops=peak,
                                   peak_ms=peak_ms, rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
