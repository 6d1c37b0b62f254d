"""Gradient accumulation with moec.torch.MoE(fp8="blockwise") on the GPU:
`keep_fp8_weights=True` (weights that train keep their FP8 copies until the
optimizer changes them) against the default (every call quantizes them)
and against the bf16 block, at three expert shapes.

    # here (the compiler): each layer's bf16 and FP8 bundles
    python3 bench/fp8_accumulation.py --emit-bundles .device/w/acc
    # on the GPU (the runtime-only package)
    python3 bench/fp8_accumulation.py --bundles .device/w/acc --json fp8-accumulation-h200.json

Each optimizer step runs --micro-batches micro-batches of T tokens through
one block (forward and backward, x's gradient included; `.grad`
accumulates), then updates the weights in place (SGD, a new version of
each: the kept copies are made again by the next step's first
micro-batch). CUDA events time each micro-batch over --steps steps after
two warm-up steps: the median of the first micro-batch and of the later
ones (the update is in neither), and their sum per step. The three blocks
of a layer start from the same weights and see the same tokens; their
gradients after the last step are compared (the kept copies must give
bitwise the default's). Peak: torch.cuda.max_memory_allocated over the
timed steps (the weights, their gradients and FP8 copies, the saved
values; the scratch the entries allocate outside torch is the same in
both FP8 blocks and not counted).

`--main-grad`: all three blocks with main_grad=True, the experts'
gradients added to f32 `.main_grad` inside the weight-gradient kernels
(torch's `.grad` accumulation adds a pass over the weights' gradients to
every later micro-batch; this does not).

moec.torch.MoE routes by softmax top-k: the DeepSeek-V3 row has its expert
shape (E 256, top-8, H 7168, I 2048) with that router, not its grouped
sigmoid one.
"""

import argparse
import os
import statistics
import sys

from common import models, write_json

MODEL_KEYS = ("qwen3", "mixtral", "dsv3")
ROUTING = {"softmax": "softmax_then_topk", "mixtral": "topk_then_softmax",
           "deepseek": "softmax_then_topk"}
VARIANTS = ("bf16", "fp8", "fp8_kept")


def block_for(m, variant, main_grad, bundle=None, device=None):
    import moec.torch
    import torch
    return moec.torch.MoE(
        m["H"], m["I"], m["E"], m["k"], dtype=torch.bfloat16,
        routing=ROUTING[m.get("routing", "softmax")], device=device,
        fp8=None if variant == "bf16" else "blockwise",
        keep_fp8_weights=variant == "fp8_kept", main_grad=main_grad,
        bundle=bundle)


def bundle_path(directory, key, variant, main_grad):
    """The bundle a variant runs (fp8_kept runs the fp8 one)."""
    kind = "bf16" if variant == "bf16" else "fp8"
    return os.path.join(directory, f"{key}_{kind}"
                        f"{'_main_grad' if main_grad else ''}.moecb")


def emit_bundles(directory, keys):
    os.makedirs(directory, exist_ok=True)
    for key, m in models(keys).items():
        for variant in ("bf16", "fp8"):
            for main_grad in (False, True):
                path = bundle_path(directory, key, variant, main_grad)
                block_for(m, variant, main_grad, device="meta").save_bundle(
                    path, "sm_90a")
                print(f"wrote {path}", flush=True)


def init_weights(block, seed):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for p, fan_in in ((block.gate.weight, block.hidden_size),
                          (block.w_gate_up, block.hidden_size),
                          (block.w_down, block.intermediate_size)):
            p.copy_(torch.randn(p.shape, device="cuda", dtype=p.dtype,
                                generator=gen) / fan_in ** 0.5)


def weight_grads(params, main_grad) -> list:
    """The weights' gradients: with main_grad the experts' f32 sums."""
    return [params[0].grad] + [p.main_grad if main_grad else p.grad
                               for p in params[1:]]


def run_variant(m, key, variant, main_grad, bundles, T, micro, steps, seed):
    """({first_ms, later_ms, step_ms, peak_gb, finite}, the gradients on
    the host) of one block."""
    import moec
    import torch
    block = block_for(m, variant, main_grad, moec.load(
        bundle_path(bundles, key, variant, main_grad)), "cuda")
    init_weights(block, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    xs = [torch.randn(T, m["H"], device="cuda", dtype=torch.bfloat16,
                      generator=gen) for _ in range(micro)]
    dys = [torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen)
           for x in xs]
    params = [block.gate.weight, block.w_gate_up, block.w_down]
    times = [[] for _ in range(micro)]
    events = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True)) for _ in range(micro)]
    for step in range(2 + steps):
        if step == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for p in params:
            p.grad = None
        if main_grad:
            block.zero_main_grad()
        for i, (x, dy) in enumerate(zip(xs, dys)):
            start, end = events[i]
            start.record()
            x = x.detach().requires_grad_()
            block(x).backward(dy)
            end.record()
        torch.cuda.synchronize()
        if step >= 2:
            for i, (start, end) in enumerate(events):
                times[i].append(start.elapsed_time(end))
        if step < 1 + steps:  # the last step's gradients are compared
            with torch.no_grad():
                # 1 % of each weight's norm.
                for p, g in zip(params, weight_grads(params, main_grad)):
                    p.sub_(g, alpha=float(1e-2 * torch.linalg.vector_norm(p)
                                          / torch.linalg.vector_norm(g)))
    peak = torch.cuda.max_memory_allocated() / 1e9
    first = statistics.median(times[0])
    later = (statistics.median([t for ts in times[1:] for t in ts])
             if micro > 1 else None)
    row = dict(first_ms=first, later_ms=later,
               step_ms=statistics.median(sum(ts) for ts in zip(*times)),
               peak_gb=peak)
    grads = weight_grads(params, main_grad)
    row["finite"] = all_finite(grads)
    # On the host: a DeepSeek-V3 block's gradients take 22.6 GB.
    host = [g.cpu() for g in grads] if variant != "bf16" else None
    del block, xs, dys, params, grads
    torch.cuda.empty_cache()
    return row, host


def differing_elements(a, b) -> int:
    """How many elements of two tensors of one shape and dtype differ in
    their bits (NaN against the same NaN: equal), in chunks (a DeepSeek-V3
    weight has 7.5 G elements)."""
    import torch
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    a, b = (t.contiguous().view(ints).flatten() for t in (a, b))
    return sum(int((u != v).sum()) for u, v in zip(a.split(1 << 27),
                                                  b.split(1 << 27)))


def all_finite(tensors) -> bool:
    import torch
    return all(bool(torch.isfinite(c).all()) for t in tensors
               for c in t.flatten().split(1 << 27))


def copies_check(m, key, bundles) -> dict:
    """The FP8 block's weight copies from the step quantizer (one read,
    both layouts) against the two entries' own quantizers, and two default
    FP8 micro-batches on the same inputs: {what: elements differing}."""
    import moec
    import torch
    from moec.compiler._grad import (fp8_weights_entry,
                                     quantize_step_weights, quantize_weights)
    bundle = moec.load(bundle_path(bundles, key, "fp8", False))
    block = block_for(m, "fp8", False, bundle, "cuda")
    init_weights(block, 1000)
    weights = dict(gate_w=block.gate.weight.detach(),
                   w_gate_up=block.w_gate_up.detach(),
                   w_down=block.w_down.detach())
    names, args = list(weights), list(weights.values())
    forward = fp8_weights_entry(bundle, "moe_block_fwd", "sm_90a")
    backward = fp8_weights_entry(bundle, "moe_block_grad", "sm_90a")
    step = fp8_weights_entry(bundle, "moe_block_fwd_grad", "sm_90a")
    one_read = quantize_step_weights(step, forward, names, args)
    separate = (quantize_weights(forward, names, args),
                quantize_weights(backward, names, args))
    out = {}
    for layout, got, want in zip(("forward", "backward"), one_read,
                                 separate):
        for i, (g, w) in enumerate(zip(got, want)):
            out[f"{layout}_copy_{i}"] = differing_elements(g, w)
    del one_read, separate
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(4096, m["H"], device="cuda", dtype=torch.bfloat16,
                    generator=gen)
    dy = torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen)
    runs = []
    for _ in range(2):
        block.zero_grad(set_to_none=True)
        xg = x.clone().requires_grad_()
        block(xg).backward(dy)
        runs.append([xg.grad.cpu()] + [p.grad.cpu() for p in (
            block.gate.weight, block.w_gate_up, block.w_down)])
    for name, a, b in zip(("dx", "d_gate", "d_w_gate_up", "d_w_down"),
                          *runs):
        out[f"repeat_{name}"] = differing_elements(a, b)
    del block, runs
    torch.cuda.empty_cache()
    return out


def measure_layer(m, key, args) -> dict:
    """The three blocks of one layer: their times, peaks and checks."""
    results, grads = {}, {}
    for variant in VARIANTS:
        results[variant], grads[variant] = run_variant(
            m, key, variant, args.main_grad, args.bundles, args.tokens,
            args.micro_batches, args.steps, seed=1000)
    bitwise = all(differing_elements(a, b) == 0 for a, b in
                  zip(grads["fp8"], grads["fp8_kept"]))
    del grads
    checks = copies_check(m, key, args.bundles)
    print(f"{m['name']}: elements differing: {checks}", flush=True)
    row = dict(model=m["name"], T=args.tokens, main_grad=args.main_grad,
               micro_batches=args.micro_batches, **{
                   f"{v}_{f}": results[v][f] for v in VARIANTS
                   for f in ("first_ms", "later_ms", "step_ms", "peak_gb")},
               kept_equals_default_bitwise=bitwise,
               finite={v: results[v]["finite"] for v in VARIANTS},
               differing_elements=checks)
    bf16 = results["bf16"]
    for v in ("fp8", "fp8_kept"):
        row[f"{v}_vs_bf16_step"] = bf16["step_ms"] / results[v]["step_ms"]
        row[f"{v}_vs_bf16_later"] = bf16["later_ms"] / results[v]["later_ms"]
    row["kept_vs_default_step"] = (results["fp8"]["step_ms"]
                                   / results["fp8_kept"]["step_ms"])
    fp8, kept = results["fp8"], results["fp8_kept"]
    print(f"{m['name']}{' main_grad' if args.main_grad else ''}: step ms "
          f"bf16 {bf16['step_ms']:.2f}, fp8 {fp8['step_ms']:.2f} "
          f"({row['fp8_vs_bf16_step']:.2f}x), fp8 kept {kept['step_ms']:.2f}"
          f" ({row['fp8_kept_vs_bf16_step']:.2f}x); later micro-batch ms "
          f"{bf16['later_ms']:.2f} / {fp8['later_ms']:.2f} / "
          f"{kept['later_ms']:.2f}; first {bf16['first_ms']:.2f} / "
          f"{fp8['first_ms']:.2f} / {kept['first_ms']:.2f}; peak GB "
          f"{bf16['peak_gb']:.1f} / {fp8['peak_gb']:.1f} / "
          f"{kept['peak_gb']:.1f}; kept == default bitwise: {bitwise}; "
          f"finite: {row['finite']}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emit-bundles", metavar="DIR")
    parser.add_argument("--bundles", metavar="DIR")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--tokens", type=int, default=8192,
                        help="tokens per micro-batch")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--main-grad", action="store_true",
                        help="the blocks accumulate the experts' gradients "
                             "into f32 main gradients (main_grad=True)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.emit_bundles:
        emit_bundles(args.emit_bundles, args.models)
        return
    if not args.bundles:
        parser.error("--bundles DIR (from --emit-bundles) or --emit-bundles")
    if args.micro_batches < 2:
        parser.error("--micro-batches: at least 2 (the later micro-batches "
                     "are what keep_fp8_weights changes)")
    import torch
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"T = {args.tokens} per micro-batch, {args.micro_batches} "
          f"micro-batches per step, {args.steps} steps"
          f"{', main_grad' if args.main_grad else ''}", flush=True)
    rows = [measure_layer(m, key, args)
            for key, m in models(args.models).items()]
    if args.json:
        write_json(args.json, dict(
            device=torch.cuda.get_device_name(), torch=torch.__version__,
            command=" ".join(["python3", "fp8_accumulation.py"]
                             + sys.argv[1:]),
            rows=rows))


if __name__ == "__main__":
    main()
