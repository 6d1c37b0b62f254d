#!/usr/bin/env python3
"""A full fine-tuning step with gradient accumulation into f32 main
gradients (Megatron-LM's `main_grad`): moec's backward with the add fused
into the expert weights' weight-gradient kernels (moe-autodiff
`accumulate=2,3`, what moec.torch.MoE(main_grad=True) runs) against the
same backward followed by `main.add_(grad)` for both expert weights (what a
caller does without the fusion) and torch autograd + the same `add_`s;
same inputs, same run.

    # here (MLIR): each layer twice, its derived backward without and with
    # accumulate, one bundle
    python3 bench/main_grad_step.py --emit-mlir bench/kernels/main_grad_step.mlir
    build/bin/moec-opt bench/kernels/main_grad_step.mlir \
        -moe-autodiff=func=layer_qwen3 | build/bin/moec-opt \
        '-moe-autodiff=func=layer_qwen3_mg accumulate=2,3' | \
        build/bin/moec-opt -moe-autodiff=func=layer_mixtral | \
        build/bin/moec-opt '-moe-autodiff=func=layer_mixtral_mg accumulate=2,3' | \
        build/bin/moec-opt -moe-autodiff=func=layer_dsv3 | build/bin/moec-opt \
        '-moe-autodiff=func=layer_dsv3_mg accumulate=2,3' -o .device/mg/step.mlir
    build/bin/moec compile .device/mg/step.mlir -o .device/mg/step.moecb \
        --target sm_90a
    # on the GPU (runtime-only moec package and torch):
    PYTHONPATH=/tmp/rt/python_packages python3 bench/main_grad_step.py \\
        .device/mg/step.moecb --json $OUT/main_grad_step.json

Layers: bench/training_step.py's (bf16 weights and activations). Each step
runs layer_{key}_fwd, then the backward; the main gradients ([E, 2I, H]
and [E, H, I], f32) start random and take every step's gradient.
"moec + add_" is layer_{key}_grad, then two `add_`s of the bf16 gradients
into the f32 main gradients; "fused" is layer_{key}_mg_grad with the main
gradients as inputs and as the outputs of their sums (in place). The
difference is the bytes of the bf16 gradients written and read again
(plus the launches): 2 B written + 2 B read per weight element, a floor of
4 * (3 E H I) B / 4.27 TB/s.

Correctness (every row, on the first 8 experts): the fused step's change
of the main gradients against moec's bf16 gradients, as ||g - ref|| /
||ref||, and at T = 1 (most experts without rows) the main gradients of
experts without rows unchanged bit for bit.
Timing as bench/training_step.py: CUDA events, the L2 evicted before every
run, median of --iters.
"""

import argparse
import json

from common import (BF16, COPY_TBPS, layer_mlir, layer_weights, make_flush,
                    models, rel_err, timed, torch_step_fn, write_json)

# The layers emitted and timed (the default of --models), in this order.
MODEL_KEYS = ("qwen3", "mixtral", "dsv3")


def emit_mlir(path: str) -> None:
    header = (
        "// The full fine-tuning layers of bench/main_grad_step.py (generated\n"
        "// by `python3 bench/main_grad_step.py --emit-mlir`): layer_{key}\n"
        "// and layer_{key}_mg, the same forward; moe-autodiff derives the\n"
        "// second's backward with accumulate=2,3 (see the script).\n")
    text = ""
    for key, m in models(MODEL_KEYS).items():
        layer = layer_mlir(key, m)
        text += layer + layer.replace(f"@layer_{key}(", f"@layer_{key}_mg(")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + text)


def measure(bundle, key, m, T, weights, bias, gen, flush, iters, check):
    import torch
    E, H, I = m["E"], m["H"], m["I"]
    gate_w, w_gate_up, w_down = weights
    x = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
    dy = torch.randn(T, H, device="cuda", dtype=BF16, generator=gen)
    inputs = [x, gate_w, w_gate_up, w_down] + ([bias] if bias is not None
                                               else [])
    mains = [torch.randn(w.shape, device="cuda", generator=gen)
             for w in (w_gate_up, w_down)]
    fwd, grad = (bundle.entry(f"layer_{key}_fwd"),
                 bundle.entry(f"layer_{key}_grad"))
    fwd_mg, grad_mg = (bundle.entry(f"layer_{key}_mg_fwd"),
                       bundle.entry(f"layer_{key}_mg_grad"))

    def moec_then_add():
        outs = fwd(*inputs, check_values=False)
        grads = grad(*inputs, *outs[1:], dy, check_values=False)
        mains[0].add_(grads[2])
        mains[1].add_(grads[3])
        return grads

    def fused():
        outs = fwd_mg(*inputs, check_values=False)
        return grad_mg(*inputs, *outs[1:], dy, *mains,
                       out=[None, None, *mains], check_values=False)

    torch_step = torch_step_fn(m, x, gate_w, w_gate_up, w_down, bias, dy)

    def torch_then_add():
        grads = torch_step()
        mains[0].add_(grads[2])
        mains[1].add_(grads[3])
        return grads

    row = dict(model=key, T=T)
    if check:
        # The first 8 experts' slices: DeepSeek-V3's whole main gradients
        # take 45 GB a copy.
        part = slice(0, 8)
        start = [t[part].clone() for t in mains]
        grads = fused()
        assert grads[2] is mains[0] and grads[3] is mains[1]
        plain = grad(*inputs, *fwd(*inputs)[1:], dy)
        row["err_fused_vs_add"] = max(
            rel_err(a[part] - b, p[part].float())
            for a, b, p in zip(mains, start, plain[2:]))
        if T == 1:
            # One token: k experts take rows, the others keep main bit for
            # bit.
            empty = [e for e in range(min(E, 8)) if not plain[3][e].any()]
            row["empty_experts"] = len(empty)
            row["empty_unchanged"] = all(
                torch.equal(a[empty], b[empty]) for a, b in zip(mains, start))
        del start, plain, grads
    if T == 1:
        return row
    leaves = [t.requires_grad_() for t in (x, gate_w, w_gate_up, w_down)]
    runs = [("fused", fused), ("moec_add", moec_then_add),
            ("torch_add", torch_then_add)]
    for name, fn in runs:
        for t in leaves:
            t.grad = None
        torch.cuda.empty_cache()
        try:
            row[name] = timed(fn, iters, flush)
        except torch.cuda.OutOfMemoryError as error:
            row[name] = f"out of memory: {str(error)[:120]}"
    for t in leaves:
        t.grad = None
        t.requires_grad_(False)
    floor_ms = 4 * 3 * E * H * I / (COPY_TBPS * 1e12) * 1e3
    row["add_floor_ms"] = floor_ms
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?")
    parser.add_argument("--emit-mlir")
    parser.add_argument("--models", default=",".join(MODEL_KEYS))
    parser.add_argument("--tokens", default="1,8192")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.emit_mlir:
        emit_mlir(args.emit_mlir)
        return
    import torch
    import moec

    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush()
    device = torch.cuda.get_device_name()
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = []
    for key, m in models(args.models).items():
        weights, bias = layer_weights(m, gen)
        for T in tokens:
            try:
                row = measure(bundle, key, m, T, weights, bias, gen, flush,
                              args.iters, check=True)
            except torch.cuda.OutOfMemoryError as error:
                row = dict(model=key, T=T,
                           error=f"out of memory: {str(error)[:160]}")
            torch.cuda.empty_cache()
            rows.append(row)
            print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()
    print(f"\n{device}: full fine-tuning step into f32 main gradients, ms")
    print(f"{'model':8} {'T':>6} {'fused':>8} {'moec+add':>9} {'torch+add':>10}"
          f" {'vs moec':>8} {'vs torch':>9} {'floor':>6}  err / empty kept")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:8} {r['T']:6d} {r['error']}")
            continue
        check = (f"{r.get('err_fused_vs_add', float('nan')):.1e}"
                 + (f" / {r['empty_experts']} {r['empty_unchanged']}"
                    if "empty_experts" in r else ""))
        if "fused" not in r:
            print(f"{r['model']:8} {r['T']:6d} {'':>46}  {check}")
            continue
        cells = [r[n] if isinstance(r[n], float) else float("nan")
                 for n in ("fused", "moec_add", "torch_add")]
        print(f"{r['model']:8} {r['T']:6d} {cells[0]:8.3f} {cells[1]:9.3f} "
              f"{cells[2]:10.3f} {cells[1] / cells[0]:8.2f} "
              f"{cells[2] / cells[0]:9.2f} {r['add_floor_ms']:6.3f}  {check}")
    if args.json:
        write_json(args.json, dict(device=device, rows=rows))


if __name__ == "__main__":
    main()
