"""FP8 grouped matmuls with block scales against torch._scaled_grouped_mm and
moec's own bf16 kernel, on an H200.

Modes (the expert matmuls of an MoE layer's gate_up projection, rows
grouped by expert, weights [E, N, K] = [E, 2I, H]):
  forward     y [R, 2I] = x [R, H] . W_e^T
  input_grad  dx [R, H] = dy [R, 2I] . W_e, read from the second, transposed
              FP8 copy [E, H, 2I] of the weights (FP8 wgmma reads both
              operands K-major only)
  weight_grad dW_e [2I, H] = sum over the expert's rows of dy_i^T x_i, both
              operands quantized by moe.quantize {axis = colwise,
              transpose}: [H, P] and [2I, P], each expert's rows padded to
              128-row blocks, one scale per block and column (torch: per
              expert and column, torchao's per-group column-wise scales)

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
  python3 bench/fp8_kernels.py .device/fp8_kernels.moecb --modes weight_grad --json ...  # one mode
"""

import argparse
import math
import sys

from common import (FP8_MAX, MODELS, fits, free_bytes, ints, make_flush,
                    models, per_group_colwise, quantize_rowwise,
                    random_weights, rel_err, timed, torch, write_json, BF16)

MODEL_KEYS = ("qwen3", "mixtral", "dsv3", "qwen35", "olmoe")
MODES = ("forward", "input_grad", "weight_grad")
FP8 = "f8E4M3FN"
BLOCK = 128


def mode_shape(m, mode):
    """(K, N) of `mode`: the contraction and output widths (weight_grad:
    x's and dy's widths, dW [E, N, K])."""
    H, N2 = m["H"], 2 * m["I"]
    return (N2, H) if mode == "input_grad" else (H, N2)


def emit_weight_grad(key, m):
    """fp8_weight_grad_{key} (FP8 dW [E, 2I, H] from the transposed
    operands), bf16_weight_grad_{key}, and quant_{x,dy}_{key}: the
    transposed quantize of the permuted rows and of the gradient."""
    E = m["E"]
    K, N = mode_shape(m, "weight_grad")
    offs, out = f"tensor<{E}xi32>", f"tensor<{E}x{N}x{K}xbf16>"
    xq, dq = f"tensor<{K}x?x{FP8}>", f"tensor<{N}x?x{FP8}>"
    sx, sd = f"tensor<?x{K}xf32>", f"tensor<?x{N}xf32>"
    lines = [
        f"func.func @fp8_weight_grad_{key}(%xq: {xq}, %dq: {dq}, "
        f"%offsets: {offs}, %sx: {sx} {{moe.sym = \"B\"}}, "
        f"%sd: {sd} {{moe.sym = \"B\"}}) -> {out} {{",
        f"  %g = moe.grouped_weight_grad %xq, %dq, %offsets scales(%sx, %sd "
        f": {sx}, {sd}) {{transpose_rhs}} : {xq}, {dq}, {offs} -> {out}",
        f"  return %g : {out}", "}"]
    xb, db = f"tensor<?x{K}xbf16>", f"tensor<?x{N}xbf16>"
    lines += [
        f"func.func @bf16_weight_grad_{key}(%x: {xb} {{moe.sym = \"R\"}}, "
        f"%dy: {db} {{moe.sym = \"R\"}}, %offsets: {offs}) -> {out} {{",
        f"  %g = moe.grouped_weight_grad %x, %dy, %offsets {{transpose_rhs}} "
        f": {xb}, {db}, {offs} -> {out}",
        f"  return %g : {out}", "}"]
    for name, width in (("x", K), ("dy", N)):
        src, data = f"tensor<?x{width}xbf16>", f"tensor<{width}x?x{FP8}>"
        scales = f"tensor<?x{width}xf32>"
        lines += [
            f"func.func @quant_{name}_{key}(%a: {src} {{moe.sym = \"R\"}}, "
            f"%offsets: {offs}) -> ({data}, {scales}) {{",
            f"  %q, %s = moe.quantize %a offsets(%offsets : {offs}) "
            f"group_size = {BLOCK} {{axis = #moe.axis<colwise>, transpose}} "
            f": {src} -> {data}, {scales}",
            f"  return %q, %s : {data}, {scales}", "}"]
    return lines


def emit_mlir(path, keys):
    """The bench kernels: fp8_{mode}_{key} and bf16_{mode}_{key}."""
    lines = ["// FP8 and bf16 grouped matmuls for bench/fp8_kernels.py "
             "(written by it)."]
    for key in keys:
        m = MODELS[key]
        E = m["E"]
        lines += emit_weight_grad(key, m)
        for mode in ("forward", "input_grad"):
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


def weight_grad_errors(outs, x, dy, ends):
    """||out - ref|| / ||ref|| of each [E, N, K] in `outs` against the
    float64 sum over each group's rows of dy_i^T x_i, one expert at a time
    (DeepSeek-V3's whole float64 reference would take 56 GB)."""
    num = dict.fromkeys(outs, 0.0)
    den, start = 0.0, 0
    for e, end in enumerate(ends.tolist()):
        ref = dy[start:end].double().t() @ x[start:end].double()
        den += torch.linalg.vector_norm(ref).item() ** 2
        for name, out in outs.items():
            num[name] += torch.linalg.vector_norm(
                out[e].double() - ref).item() ** 2
        start = end
    return {n: math.sqrt(v) / max(math.sqrt(den), 1e-30)
            for n, v in num.items()}


def run_weight_grad(bundle, key, m, T, iters, flush, peak, gen):
    E, k = m["E"], m["k"]
    K, N = mode_shape(m, "weight_grad")
    ends, R = aligned_offsets(T, E, k, gen)
    x = torch.randn(R, K, device="cuda", dtype=BF16, generator=gen)
    dy = torch.randn(R, N, device="cuda", dtype=BF16, generator=gen)
    # moec: its own transposed quantize (outside the timing).
    xq, sx = bundle.entry(f"quant_x_{key}")(x, ends, check_values=False)
    dq, sd = bundle.entry(f"quant_dy_{key}")(dy, ends, check_values=False)
    out = torch.empty(E, N, K, dtype=BF16, device="cuda")
    out_bf16 = torch.empty_like(out)
    fp8 = bundle.entry(f"fp8_weight_grad_{key}")
    bf16 = bundle.entry(f"bf16_weight_grad_{key}")
    # torch 2d x 2d: dy^T [N, R] row-major times x [R, K] column-major, the
    # groups along R; scales [E * N] and [E * K].
    dyr, sdr = per_group_colwise(dy, ends)
    xr, sxr = per_group_colwise(x, ends)
    dyr_t = dyr.t().contiguous()
    xr_cm = xr.t().contiguous().t()
    fns = {
        "moec_fp8": lambda: fp8(xq, dq, ends, sx, sd, out=out,
                                check_values=False),
        "torch_fp8": lambda: torch._scaled_grouped_mm(
            dyr_t, xr_cm, sdr, sxr, offs=ends, out_dtype=BF16),
        "moec_bf16": lambda: bf16(x, dy, ends, out=out_bf16,
                                  check_values=False),
    }
    outs = {name: fn() for name, fn in fns.items()}
    errs = weight_grad_errors(outs, x, dy, ends)
    del outs
    ms = {name: timed(fn, iters, flush) for name, fn in fns.items()}
    return summarize(key, "weight_grad", T, R, K, N, ms, errs, peak)


def summarize(key, mode, T, R, K, N, ms, errs, peak):
    """The result row of one case (and its line on stdout)."""
    flops = 2 * R * K * N
    tflops = {n: flops / t / 1e9 for n, t in ms.items()}
    row = dict(model=key, mode=mode, T=T, rows=R, K=K, N=N, flops=flops,
               ms=ms, tflops=tflops,
               pct_peak={n: 100 * v / peak for n, v in tflops.items()},
               vs_torch_fp8=ms["torch_fp8"] / ms["moec_fp8"],
               vs_moec_bf16=ms["moec_bf16"] / ms["moec_fp8"], err=errs)
    print(f"{key:7} {mode:11} T={T:<6} moec fp8 {ms['moec_fp8']:7.3f} ms "
          f"{tflops['moec_fp8']:6.0f} TF/s {row['pct_peak']['moec_fp8']:5.1f}%"
          f" | torch fp8 {ms['torch_fp8']:7.3f} ms x{row['vs_torch_fp8']:.2f}"
          f" | moec bf16 {ms['moec_bf16']:7.3f} ms x{row['vs_moec_bf16']:.2f}"
          f" | err moec {errs['moec_fp8']:.2e} torch {errs['torch_fp8']:.2e}"
          f" bf16 {errs['moec_bf16']:.2e}", flush=True)
    return row


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
    return summarize(key, mode, T, R, K, N, ms, errs, peak)


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
                if mode == "weight_grad":  # three [E, N, K], float temps
                    need = m["E"] * N * K * 2 * 3 + R * (K + N) * 16
                if not fits(need, f"{key} {mode} T={T}"):
                    continue
                if mode == "weight_grad":
                    rows.append(run_weight_grad(bundle, key, m, T, args.iters,
                                                flush, peak, gen))
                else:
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
