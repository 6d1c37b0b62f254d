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


def block_for(m, variant, bundle=None, device=None):
    import moec.torch
    import torch
    return moec.torch.MoE(
        m["H"], m["I"], m["E"], m["k"], dtype=torch.bfloat16,
        routing=ROUTING[m.get("routing", "softmax")], device=device,
        fp8=None if variant == "bf16" else "blockwise",
        keep_fp8_weights=variant == "fp8_kept", bundle=bundle)


def bundle_path(directory, key, variant):
    """The bundle a variant runs (fp8_kept runs the fp8 one)."""
    return os.path.join(directory, f"{key}_{'bf16' if variant == 'bf16' else 'fp8'}.moecb")


def emit_bundles(directory, keys):
    os.makedirs(directory, exist_ok=True)
    for key, m in models(keys).items():
        for variant in ("bf16", "fp8"):
            path = bundle_path(directory, key, variant)
            block_for(m, variant, device="meta").save_bundle(path, "sm_90a")
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


def run_variant(m, key, variant, bundles, T, micro, steps, seed):
    """{first_ms, later_ms, step_ms, peak_gb, grads} of one block."""
    import moec
    import torch
    block = block_for(m, variant, moec.load(bundle_path(bundles, key,
                                                        variant)), "cuda")
    init_weights(block, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    xs = [torch.randn(T, m["H"], device="cuda", dtype=torch.bfloat16,
                      generator=gen) for _ in range(micro)]
    dys = [torch.randn_like(x) for x in xs]
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
                for p in params:
                    p.sub_(p.grad, alpha=1e-3)
    peak = torch.cuda.max_memory_allocated() / 1e9
    first = statistics.median(times[0])
    later = (statistics.median([t for ts in times[1:] for t in ts])
             if micro > 1 else None)
    row = dict(first_ms=first, later_ms=later,
               step_ms=statistics.median(sum(ts) for ts in zip(*times)),
               peak_gb=peak)
    grads = [p.grad.clone() for p in params]
    del block, xs, dys, params
    torch.cuda.empty_cache()
    return row, grads


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--emit-bundles", metavar="DIR")
    parser.add_argument("--bundles", metavar="DIR")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--tokens", type=int, default=8192,
                        help="tokens per micro-batch")
    parser.add_argument("--micro-batches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
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
          f"micro-batches per step, {args.steps} steps", flush=True)
    rows = []
    for key, m in models(args.models).items():
        results, grads = {}, {}
        for variant in VARIANTS:
            results[variant], grads[variant] = run_variant(
                m, key, variant, args.bundles, args.tokens,
                args.micro_batches, args.steps, seed=1000)
        bitwise = all(torch.equal(a, b) for a, b in
                      zip(grads["fp8"], grads["fp8_kept"]))
        del grads
        row = dict(model=m["name"], T=args.tokens,
                   micro_batches=args.micro_batches, **{
                       f"{v}_{f}": results[v][f] for v in VARIANTS
                       for f in ("first_ms", "later_ms", "step_ms",
                                 "peak_gb")},
                   kept_equals_default_bitwise=bitwise)
        bf16 = results["bf16"]
        for v in ("fp8", "fp8_kept"):
            row[f"{v}_vs_bf16_step"] = bf16["step_ms"] / results[v]["step_ms"]
            row[f"{v}_vs_bf16_later"] = (bf16["later_ms"]
                                         / results[v]["later_ms"])
        row["kept_vs_default_step"] = (results["fp8"]["step_ms"]
                                       / results["fp8_kept"]["step_ms"])
        rows.append(row)
        print(f"{m['name']}: step ms bf16 {bf16['step_ms']:.2f}, fp8 "
              f"{results['fp8']['step_ms']:.2f} "
              f"({row['fp8_vs_bf16_step']:.2f}x), fp8 kept "
              f"{results['fp8_kept']['step_ms']:.2f} "
              f"({row['fp8_kept_vs_bf16_step']:.2f}x); later micro-batch "
              f"ms {bf16['later_ms']:.2f} / {results['fp8']['later_ms']:.2f}"
              f" / {results['fp8_kept']['later_ms']:.2f}; first "
              f"{bf16['first_ms']:.2f} / {results['fp8']['first_ms']:.2f} /"
              f" {results['fp8_kept']['first_ms']:.2f}; peak GB "
              f"{bf16['peak_gb']:.1f} / {results['fp8']['peak_gb']:.1f} / "
              f"{results['fp8_kept']['peak_gb']:.1f}; kept == default "
              f"bitwise: {bitwise}", flush=True)
    if args.json:
        write_json(args.json, dict(
            device=torch.cuda.get_device_name(), torch=torch.__version__,
            command=" ".join(["python3", "fp8_accumulation.py"]
                             + sys.argv[1:]),
            rows=rows))


if __name__ == "__main__":
    main()
