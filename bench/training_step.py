#!/usr/bin/env python3
"""The MoE layer's training step, forward + backward: moec's derived
backward (moe-autodiff) against the same math in torch autograd, same
inputs, same run; full fine-tuning and LoRA.

    # here (MLIR): the layers, their derived backward, one bundle
    python3 bench/training_step.py --emit-mlir bench/kernels/training_step.mlir
    build/bin/moec-opt bench/kernels/training_step.mlir \\
        -moe-autodiff=func=layer_qwen3 | build/bin/moec-opt \\
        -moe-autodiff=func=layer_mixtral | build/bin/moec-opt \\
        -moe-autodiff=func=layer_dsv3 | build/bin/moec-opt \\
        '-moe-autodiff=func=layer_qwen3_lora16 wrt=0,4,5,6,7' | \\
        build/bin/moec-opt \\
        '-moe-autodiff=func=layer_mixtral_lora16 wrt=0,4,5,6,7' | \\
        build/bin/moec-opt '-moe-autodiff=func=layer_dsv3_lora16 wrt=0,4,5,6,7' \\
        -o .device/step/training_step.mlir
    build/bin/moec compile .device/step/training_step.mlir \\
        -o .device/step/training_step.moecb --target sm_90a
    # FP8 (--fp8-bundle): the same forwards and backwards after
    # moe-fp8-recipe, one more bundle
    build/bin/moec-opt bench/kernels/training_step.mlir \\
        -moe-autodiff=func=layer_qwen3 | build/bin/moec-opt \\
        -moe-autodiff=func=layer_mixtral | build/bin/moec-opt \\
        -moe-autodiff=func=layer_dsv3 | build/bin/moec-opt \\
        '-moe-autodiff=func=layer_qwen3_lora16 wrt=0,4,5,6,7' | \\
        build/bin/moec-opt \\
        '-moe-autodiff=func=layer_mixtral_lora16 wrt=0,4,5,6,7' | \\
        build/bin/moec-opt '-moe-autodiff=func=layer_dsv3_lora16 wrt=0,4,5,6,7' \\
        -moe-fp8-recipe=weights=arguments \\
        -o .device/step/training_step_fp8.mlir
    build/bin/moec compile .device/step/training_step_fp8.mlir \\
        -o .device/step/training_step_fp8.moecb --target sm_90a
    # on the GPU (runtime-only moec package and torch):
    PYTHONPATH=/tmp/rt/python_packages python3 bench/training_step.py \\
        .device/step/training_step.moecb --json $OUT/training_step.json \\
        [--fp8-bundle .device/step/training_step_fp8.moecb]

Layers (bf16 weights and activations):
  qwen3   Qwen3-30B-A3B: E128 H2048 I768 top-8, softmax, renormalized
  mixtral Mixtral-8x7B: E8 H4096 I14336 top-2 of the logits, then softmax
  dsv3    DeepSeek-V3: E256 H7168 I2048 top-8, sigmoid scores with the
          selection bias, 8 groups (best 4), renormalized, scaled by 2.5
Modes (--ranks): 0 is full fine-tuning (gradients of x, the router and
both expert weights); r is LoRA of rank r on both expert projections
(layer_{key}_lora{r}: adapters A [E*r, K] and B [N, E*r], scaling 2, the
router and base weights frozen: gradients of x and the four adapters).
moec runs layer_{key}[_lora{r}]_fwd (the forward plus what the backward
reads: save=all) then ..._grad. torch runs the same math with autograd:
router logits from a bf16 matmul (as transformers), softmax / sigmoid +
top-k in f32, stable
argsort, index_select gather, torch._grouped_mm gate_up, silu * mul,
torch._grouped_mm down (with LoRA: plus s * _grouped_mm(_grouped_mm(rows,
A_eᵀ), B_eᵀ) on each projection), weighted index_add_ combine in f32, then
backward() from the same output gradient.

With --fp8-bundle, each row whose entries it has also runs them compiled
after moe-fp8-recipe (moec_fp8: DeepSeek-V3's blockwise FP8 on every
expert matmul, the router and the combine in bf16; with LoRA the frozen
base matmuls in FP8, the adapters' products split off in bf16) on the
same inputs: its time, peak memory and gradient error, and fp8_vs_bf16 (moec
bf16 ms / moec FP8 ms). The quantizations are separate kernels there.
With weights=arguments (the entries take the weights' FP8 copies, made by
the _fp8_weights entries) moec_fp8 makes them in the step, with
_fwd_grad_fp8_weights where the bundle has it (both entries' copies from one
read of each weight, before the forward), moec_fp8_separate with the two
entries' own quantizers, each just before its entry (fp8_separate_vs_bf16),
and moec_fp8_cached makes the copies once, before the timing (gradient
accumulation's later micro-batches, frozen weights; fp8_cached_vs_bf16).
Beside it (full fine-tuning) runs torch's FP8 composition (torch_fp8,
common.py's TorchFp8GroupedLinear: torchao's rowwise recipe around
torch._scaled_grouped_mm, quantized by torch ops, each expert's rows
padded to 16) on the same inputs: fp8_vs_torch_fp8 is torch FP8 ms / moec
FP8 ms, err_torch_fp8 its gradient error (against the float64 reference
with moec's routing: torch's own bf16 router may break a near tie the
other way).

Correctness (--check, on by default at the smallest T): moec's gradients
against a float64 reference of the same math (per-expert loops in f64
with autograd) with moec's routing (its ids), as ||g - ref|| / ||ref||
(python/tests/test_bench_scripts.py runs the same check on the host at a
tiny shape).
Timing as bench/grouped_gemm.py: CUDA events, the L2 evicted before every
run, median of --iters; the peak of torch.mm 8192^3 bf16 measured in the
same run. FLOPs: forward F = 2*T*H*E + 2*R*H*2I + 2*R*I*H (R = T*k); full
fine-tuning 3F; LoRA 2(F + L) + 2L with L = 2*R*r*(H + 2I) + 2*R*r*(I + H)
(the forward and input gradient with the adapters' products, then dA and
dB). Peak memory: torch.cuda.max_memory_allocated over one step (inputs,
weights and gradients included), plus for moec the scratch its entries
allocate outside torch (the larger of the two entries').
"""

import argparse
import json

from common import (BF16, LORA_SCALING, kernel_profile, layer_mlir,
                    layer_name, layer_weights, make_flush, models,
                    random_weights, rel_err, report_peak, route, timed,
                    torch_step_fn, write_json)

LORA_RANKS = (16,)   # the LoRA layers emitted besides full fine-tuning
# The layers emitted and timed (the default of --models), in this order.
MODEL_KEYS = ("qwen3", "mixtral", "dsv3")


def emit_mlir(path: str) -> None:
    header = (
        "// The MoE layers of bench/training_step.py (generated by\n"
        "// `python3 bench/training_step.py --emit-mlir`): forward only;\n"
        "// moe-autodiff derives layer_{key}_fwd and layer_{key}_grad (see\n"
        "// the script's docstring for the commands).\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "".join(layer_mlir(k, m, rank)
                                 for k, m in models(MODEL_KEYS).items()
                                 for rank in (0,) + LORA_RANKS))


# ---------------------------------------------------------------------------
# GPU side
# ---------------------------------------------------------------------------

def reference_grads(m, x, gate_w, w_gate_up, w_down, bias, dy, ids,
                    adapters=()):
    """float64 gradients of <dy, layer(...)> with the routing fixed to
    `ids` (moec's): per-expert loops with autograd. With `adapters`, of x
    and the adapters (LoRA), else of x, the router and both weights."""
    import torch
    base = [t.double() for t in (x, gate_w, w_gate_up, w_down)]
    lora = [t.double() for t in adapters]
    leaves = [base[0]] + lora if adapters else base
    for t in leaves:
        t.requires_grad_()
    xd, gd, wgu, wd = base
    logits = xd @ gd.t()
    weights, _ = route(logits, m, None if bias is None else bias.double(),
                       ids=ids.long())
    T, H = xd.shape
    E = m["E"]
    y = torch.zeros(T, H, dtype=torch.float64, device=x.device)
    flat = ids.flatten().long()

    def project(rows, w, e, pair):
        out = rows @ w[e].t()
        if pair:
            a, b = pair
            r = a.shape[0] // E
            out = out + LORA_SCALING * (rows @ a[e * r:(e + 1) * r].t()) @ \
                b[:, e * r:(e + 1) * r].t()
        return out

    gu_pair, down_pair = ((lora[0:2], lora[2:4]) if adapters
                          else (None, None))
    for e in range(E):
        sel = (flat == e).nonzero().flatten()
        if sel.numel() == 0:
            continue
        tok = sel // m["k"]
        h = project(xd[tok], wgu, e, gu_pair)
        half = h.shape[1] // 2
        act = torch.nn.functional.silu(h[:, :half]) * h[:, half:]
        out = project(act, wd, e, down_pair) * weights.flatten()[sel][:, None]
        y = y.index_add(0, tok, out)
    (y * dy.double()).sum().backward()
    return [t.grad for t in leaves]


def saved_order(bundle, name):
    """Which {name}_fwd results {name}_grad takes, in its order (after
    moe-fp8-recipe some are saved quantized, returned last)."""
    from moec.compiler._grad import saved_results_of
    return saved_results_of(bundle.entry(f"{name}_grad"))


def moec_step_fn(bundle, name, args, dy, cached=False, separate=False):
    """{name}_fwd then {name}_grad on the saved values: (the gradients, the
    forward's outputs). A bundle compiled with moe-fp8-recipe
    weights=arguments has {name}_fwd_fp8_weights and _grad_fp8_weights,
    and {name}_fwd_grad_fp8_weights making both sets from one read of each
    weight: the step runs it first (the weights quantized in every step,
    as with one micro-batch per optimizer step), or with `cached` on its
    first call only (the later micro-batches of gradient accumulation, or
    frozen weights). `separate`: the two entries instead, each just before
    its entry (the copies' lifetimes the inline quantizes have)."""
    from moec.compiler._grad import (fp8_weights_entry, quantize_step_weights,
                                     quantize_weights, step_fp8_weights_entry)
    fwd = bundle.entry(f"{name}_fwd")
    grad = bundle.entry(f"{name}_grad")
    saved = saved_order(bundle, name)
    quantizers = [fp8_weights_entry(bundle, e.name, e.target)
                  for e in (fwd, grad)]
    both = None if separate else step_fp8_weights_entry(bundle, name,
                                                         fwd.target)
    # Views without autograd (DLPack exports no tensor that requires grad;
    # torch's step differentiates the same storage).
    args = [t.detach() for t in args]
    names = [b.name for b in fwd.inputs]

    def copies(i):
        """The copies entry i (0: fwd, 1: grad) takes."""
        if made:
            return made[i]
        q = quantizers[i]
        return quantize_weights(q, names, args) if q else ()
    made = []  # cached: both entries' copies, made on the first call

    def both_copies():
        """Both entries' copies: from one call of the step quantizer."""
        return quantize_step_weights(both, quantizers[0], names, args)

    def step():
        if cached and not made:
            made.extend(both_copies() if both else [copies(0), copies(1)])
        if both and not made:
            # Both sets before the forward (the backward's held through it).
            forward_copies, backward_copies = both_copies()
            outs = fwd(*args, *forward_copies, check_values=False)
            del forward_copies
            return grad(*args, *(outs[i] for i in saved), dy,
                        *backward_copies, check_values=False), outs
        # Made per entry, each freed after it: the lifetimes the inline
        # quantizes have in the entries' scratch.
        outs = fwd(*args, *copies(0), check_values=False)
        return grad(*args, *(outs[i] for i in saved), dy, *copies(1),
                    check_values=False), outs
    return step



def scratch_bytes(bundle, name, inputs):
    """Bytes of the scratch entry `name` allocates outside torch (one
    allocation; temps not live together share bytes), for these inputs."""
    entry = bundle.entry(name)
    native = bundle._native
    # The weights' FP8 copies an entry may take after `inputs` (static).
    shapes = [list(t.shape) for t in inputs] + [
        [int(d) for d in b.dims] for b in entry.inputs[len(inputs):]]
    symbols = native.bind_symbols(entry._index, shapes)
    return native.scratch_bytes(entry._index, list(symbols))


GRADS = ("dx", "d_gate_w", "d_w_gate_up", "d_w_down")
LORA_GRADS = ("dx", "d_gate_up_A", "d_gate_up_B", "d_down_A", "d_down_B")


def takes_fp8_weights(bundle, name) -> bool:
    """Whether the bundle's {name}_fwd takes its weights' FP8 copies
    (moe-fp8-recipe weights=arguments)."""
    from moec.compiler._grad import fp8_weights_entry
    fwd = bundle.entry(f"{name}_fwd")
    return fp8_weights_entry(bundle, fwd.name, fwd.target) is not None


def fp8_errors(run_fp8, run_torch_fp8, ref, names, leaves) -> dict:
    """err_fp8 and err_torch_fp8: each FP8 step's gradients against the
    float64 reference `ref` (moec's routing). The router runs in bf16 in
    moec's FP8 step as in its bf16 one: the same ids. torch routes by its
    own bf16 logits: a near tie may pick another expert than moec's ids
    (its error includes that)."""
    import torch
    fp8_grads, _ = run_fp8()
    errs = {"err_fp8": {n: rel_err(g, r)
                        for n, g, r in zip(names, fp8_grads, ref)}}
    del fp8_grads
    if run_torch_fp8 is None:
        return errs
    for t in leaves:
        t.requires_grad_()
    try:
        errs["err_torch_fp8"] = {n: rel_err(g, r) for n, g, r in zip(
            names, run_torch_fp8(), ref)}
    except torch.cuda.OutOfMemoryError:
        pass  # its timing reports the OOM
    for t in leaves:
        t.grad = None
        t.requires_grad_(False)
    return errs


def fp8_runs(fp8_bundle, m, name, rank, inputs, dy, bias) -> tuple:
    """(moec FP8, moec FP8 with the weights quantized once, torch's FP8
    composition, moec FP8 with each entry's own weight quantizer) step
    functions, None where they do not run."""
    x, gate_w, w_gate_up, w_down = inputs[:4]
    # FP8: the same entries after moe-fp8-recipe (LoRA: its frozen base in
    # FP8, the adapters' products in bf16), where the bundle has them.
    run_fp8 = (moec_step_fn(fp8_bundle, name, inputs, dy)
               if fp8_bundle is not None and any(
                   e.name == f"{name}_fwd"
                   for e in fp8_bundle.entries) else None)
    # Its weights quantized once, outside the step (where the bundle takes
    # them as arguments): gradient accumulation's later micro-batches.
    run_fp8_cached = (moec_step_fn(fp8_bundle, name, inputs,
                                   dy, cached=True)
                      if run_fp8 and takes_fp8_weights(
                          fp8_bundle, name) else None)
    # The same with the forward's and the backward's copies made by their
    # own quantizers (each weight read twice), where the bundle has both.
    from moec.compiler._grad import step_fp8_weights_entry
    run_fp8_separate = (moec_step_fn(fp8_bundle, name, inputs, dy,
                                     separate=True)
                        if run_fp8_cached and step_fp8_weights_entry(
                            fp8_bundle, name,
                            fp8_bundle.entry(f"{name}_fwd").target)
                        else None)
    # torch's FP8 composition (torchao's rowwise recipe) beside moec FP8
    # (full fine-tuning: it has no LoRA form).
    run_torch_fp8 = (torch_step_fn(m, x, gate_w, w_gate_up, w_down, bias, dy,
                                   fp8=True) if run_fp8 and not rank
                     else None)
    return run_fp8, run_fp8_cached, run_torch_fp8, run_fp8_separate


def measure(bundle, key, m, T, weights, bias, gen, flush, peak, iters,
            reference, profile=False, rank=0, fp8_bundle=None):
    """One (model, T, rank) row: errors, then the time and peak memory of a
    step of moec and of torch. rank 0: full fine-tuning; else LoRA of that
    rank on both expert projections, base weights and router frozen."""
    import torch
    E, H, I, k = m["E"], m["H"], m["I"], m["k"]
    gate_w, w_gate_up, w_down = weights
    x = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
    dy = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
    # LoRA adapters: random (not B = 0, so every gradient is exercised).
    adapters = [random_weights(shape, gen) for shape in (
        (E * rank, H), (2 * I, E * rank), (E * rank, I), (H, E * rank))
    ] if rank else []
    names = LORA_GRADS if rank else GRADS
    inputs = [x, gate_w, w_gate_up, w_down] + adapters + (
        [bias] if bias is not None else [])
    row = dict(model=key, T=T, mode=f"lora{rank}" if rank else "full")
    run_moec = moec_step_fn(bundle, layer_name(key, rank), inputs, dy)
    grads, outs = run_moec()
    run_fp8, run_fp8_cached, run_torch_fp8, run_fp8_separate = fp8_runs(
        fp8_bundle, m, layer_name(key, rank), rank, inputs, dy, bias)
    if reference:
        ref = reference_grads(m, x, gate_w, w_gate_up, w_down, bias, dy,
                              outs[3], adapters)  # y, logits, weights, ids
        row["err"] = {n: rel_err(g, r) for n, g, r in zip(names, grads, ref)}
        if run_fp8:
            row.update(fp8_errors(run_fp8, run_torch_fp8, ref, names,
                                  (x, gate_w, w_gate_up, w_down)))
        del ref
    scratch = max(scratch_bytes(bundle, f"{layer_name(key, rank)}_fwd",
                                inputs),
                  scratch_bytes(bundle, f"{layer_name(key, rank)}_grad",
                                inputs + [outs[i] for i in saved_order(
                                    bundle, layer_name(key, rank))] + [dy]))
    # Kept for the comparison with torch: the small gradients and the first
    # experts' (DeepSeek-V3's full weight gradients take 22.5 GB a copy).
    kept = (list(grads) if rank else
            [grads[0], grads[1], grads[2][:4].clone(), grads[3][:4].clone()])
    del grads, outs
    # torch differentiates the same tensors (no copies).
    leaves = [t.requires_grad_() for t in (
        [x] + adapters if rank else [x, gate_w, w_gate_up, w_down])]
    run_torch = torch_step_fn(m, x, gate_w, w_gate_up, w_down, bias, dy,
                              adapters)
    runs = [("moec", run_moec), ("torch", run_torch)]
    runs += [(n, f) for n, f in (("moec_fp8", run_fp8),
                                 ("torch_fp8", run_torch_fp8)) if f]
    # The cached copies stay allocated once made: measured last.
    if run_fp8_separate:
        runs.append(("moec_fp8_separate", run_fp8_separate))
    if run_fp8_cached:
        runs.append(("moec_fp8_cached", run_fp8_cached))
    try:
        torch_grads = run_torch()
        row["err_torch_vs_moec"] = {
            n: rel_err(g, t[:g.shape[0]]) for n, g, t in zip(
                names, kept, torch_grads)}
        del torch_grads
    except torch.cuda.OutOfMemoryError as error:
        row["torch"] = dict(error=f"out of memory: {str(error)[:160]}")
        runs = [r for r in runs if r[0] != "torch"]
    del kept
    R = T * k
    forward = 2 * T * H * E + 2 * R * H * 2 * I + 2 * R * I * H
    if rank:
        # LoRA: the forward with the adapters' products, the input
        # gradient of the same size, and dA + dB (no weight gradients).
        lora = 2 * R * rank * (H + 2 * I) + 2 * R * rank * (I + H)
        flops = 2 * (forward + lora) + 2 * lora
    else:
        flops = 3 * forward
    for name, fn in runs:
        for t in leaves:
            t.grad = None
        torch.cuda.empty_cache()
        try:
            ms = timed(fn, iters, flush)
        except torch.cuda.OutOfMemoryError as error:
            if name != "torch_fp8":
                raise
            row[name] = dict(error=f"out of memory: {str(error)[:160]}")
            continue
        for t in leaves:
            t.grad = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        result = fn()
        torch.cuda.synchronize()
        mem = torch.cuda.max_memory_allocated() + (
            scratch if name == "moec" else 0)
        if name.startswith("moec_fp8"):
            fp8_outs = [result[1][i] for i in saved_order(
                fp8_bundle, layer_name(key, rank))]
            mem += max(
                scratch_bytes(fp8_bundle, f"{layer_name(key, rank)}_fwd",
                              inputs),
                scratch_bytes(fp8_bundle, f"{layer_name(key, rank)}_grad",
                              inputs + fp8_outs + [dy]))
            del fp8_outs
        del result
        row[name] = dict(ms=ms, tflops=flops / ms / 1e9,
                         pct_peak=100 * flops / ms / 1e9 / peak,
                         peak_gb=mem / 1e9)
    for t in leaves:
        t.grad = None
        t.requires_grad_(False)
    row["moec"]["scratch_gb"] = scratch / 1e9
    add_ratios(row)
    if profile:
        row.update(profiles(run_moec, run_fp8, run_fp8_separate))
    return row


def add_ratios(row: dict) -> None:
    """ratio (torch / moec), fp8_vs_bf16, fp8_cached_vs_bf16,
    fp8_separate_vs_bf16 (moec bf16 / each FP8 step) and fp8_vs_torch_fp8,
    where both sides ran."""
    def ms(name):
        return row.get(name, {}).get("ms")
    for key, num, den in (("ratio", "torch", "moec"),
                          ("fp8_vs_bf16", "moec", "moec_fp8"),
                          ("fp8_cached_vs_bf16", "moec", "moec_fp8_cached"),
                          ("fp8_separate_vs_bf16", "moec",
                           "moec_fp8_separate"),
                          ("fp8_vs_torch_fp8", "torch_fp8", "moec_fp8")):
        if ms(num) and ms(den):
            row[key] = ms(num) / ms(den)


def profiles(run_moec, run_fp8, run_fp8_separate=None) -> dict:
    """moec_kernels (and with FP8, moec_fp8_kernels and
    moec_fp8_separate_kernels): each step's largest kernels by GPU time."""
    import torch
    torch.cuda.empty_cache()  # moec allocates outside torch's cache
    out = {"moec_kernels": kernel_profile(run_moec)}
    for key, fn in (("moec_fp8_kernels", run_fp8),
                    ("moec_fp8_separate_kernels", run_fp8_separate)):
        if fn:
            out[key] = kernel_profile(fn)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?")
    parser.add_argument("--emit-mlir")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--tokens", default="8192,32768")
    parser.add_argument("--ranks", default="0," + ",".join(map(str, LORA_RANKS)),
                        help="0: full fine-tuning; r: LoRA of rank r")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--profile", action="store_true",
                        help="also list moec's kernels by GPU time")
    parser.add_argument("--fp8-bundle",
                        help="the layers compiled after moe-fp8-recipe: "
                             "FP8 rows next to moec bf16 (full fine-tuning)")
    args = parser.parse_args()
    if args.emit_mlir:
        emit_mlir(args.emit_mlir)
        return
    import torch
    import moec

    bundle = moec.load(args.bundle)
    fp8_bundle = moec.load(args.fp8_bundle) if args.fp8_bundle else None
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush()
    device, _, peak = report_peak(args.iters, flush, gen)
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = []
    for key, m in models(args.models).items():
        weights, bias = layer_weights(m, gen)
        for T, rank in ((t, r) for t in tokens
                        for r in (int(v) for v in args.ranks.split(","))):
            # The float64 reference needs the weights and their gradients in
            # f64: DeepSeek-V3's would take 180 GB; it is compared with
            # torch's bf16 gradients only.
            reference = key != "dsv3" and T == tokens[0]
            try:
                row = measure(bundle, key, m, T, weights, bias, gen, flush,
                              peak, args.iters, reference, args.profile,
                              rank, fp8_bundle)
            except (torch.cuda.OutOfMemoryError, moec.MoecError) as error:
                # moec's own allocations fail as a MoecError naming
                # CUDA_ERROR_OUT_OF_MEMORY; other moec errors propagate.
                if (isinstance(error, moec.MoecError)
                        and "OUT_OF_MEMORY" not in str(error)):
                    raise
                row = dict(model=key, T=T, mode=f"lora{rank}" if rank
                           else "full",
                           error=f"out of memory: {str(error)[:160]}")
            for t in weights:
                t.grad = None
                t.requires_grad_(False)
            torch.cuda.empty_cache()
            rows.append(row)
            print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()
    print(f"\n{device}: layer forward + backward, bf16, peak {peak:.0f} "
          f"TFLOP/s")
    print(f"{'model':8} {'T':>6} {'mode':>7} {'moec ms':>8} {'torch ms':>9} "
          f"{'ratio':>6} {'%peak':>6} {'moec GB':>8} {'torch GB':>9}  max err "
          f"vs f64")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:8} {r['T']:6d} {r['mode']:>7} {r['error']}")
            continue
        err = max(r["err"].values()) if "err" in r else float("nan")
        t = r["torch"]
        torch_ms = f"{t['ms']:9.3f}" if "ms" in t else f"{'OOM':>9}"
        torch_gb = f"{t['peak_gb']:9.2f}" if "ms" in t else f"{'OOM':>9}"
        ratio = f"{r['ratio']:6.2f}" if "ratio" in r else f"{'-':>6}"
        print(f"{r['model']:8} {r['T']:6d} {r['mode']:>7} {r['moec']['ms']:8.3f} "
              f"{torch_ms} {ratio} {r['moec']['pct_peak']:6.1f} "
              f"{r['moec']['peak_gb']:8.2f} {torch_gb}  {err:.2e}")
        if "moec_fp8" in r:
            f = r["moec_fp8"]
            fp8_err = (max(r["err_fp8"].values()) if "err_fp8" in r
                       else float("nan"))
            tf = r.get("torch_fp8", {})
            missing = "OOM" if tf else "-"  # not run for LoRA
            tf_ms = f"{tf['ms']:9.3f}" if "ms" in tf else f"{missing:>9}"
            tf_gb = (f"{tf['peak_gb']:9.2f}" if "ms" in tf
                     else f"{missing:>9}")
            tf_err = (max(r["err_torch_fp8"].values())
                      if "err_torch_fp8" in r else float("nan"))
            vs = (f", {r['fp8_vs_torch_fp8']:.2f}x torch FP8"
                  if "fp8_vs_torch_fp8" in r else "")
            print(f"{'':8} {'':6} {'fp8':>7} {f['ms']:8.3f} "
                  f"{tf_ms} {r['fp8_vs_bf16']:6.2f} {f['pct_peak']:6.1f} "
                  f"{f['peak_gb']:8.2f} {tf_gb}  {fp8_err:.2e} (torch FP8 "
                  f"{tf_err:.2e})  (ratio: moec bf16 / moec fp8{vs})")
        if "moec_fp8_separate" in r:
            c = r["moec_fp8_separate"]
            print(f"{'':8} {'':6} {'fp8 sep':>7} {c['ms']:8.3f} {'':9} "
                  f"{r['fp8_separate_vs_bf16']:6.2f} {c['pct_peak']:6.1f} "
                  f"{c['peak_gb']:8.2f} {'':9}  (each entry's weight copies "
                  f"by its own quantizer, each weight read twice)")
        if "moec_fp8_cached" in r:
            c = r["moec_fp8_cached"]
            print(f"{'':8} {'':6} {'fp8 w':>7} {c['ms']:8.3f} {'':9} "
                  f"{r['fp8_cached_vs_bf16']:6.2f} {c['pct_peak']:6.1f} "
                  f"{c['peak_gb']:8.2f} {'':9}  (the weights' FP8 copies "
                  f"made once, outside the step)")
    if args.json:
        write_json(args.json, dict(device=device, peak_tflops=peak, rows=rows))


if __name__ == "__main__":
    main()
