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
    # on the GPU (runtime-only moec package and torch):
    PYTHONPATH=/tmp/rt/python_packages python3 bench/training_step.py \\
        .device/step/training_step.moecb --json $OUT/training_step.json

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
import math

LORA_RANKS = (16,)   # the LoRA layers emitted besides full fine-tuning
LORA_SCALING = 2.0   # alpha / r

MODELS = {
    "qwen3": dict(name="Qwen3-30B-A3B", E=128, H=2048, I=768, k=8,
                  routing="softmax"),
    "mixtral": dict(name="Mixtral-8x7B", E=8, H=4096, I=14336, k=2,
                    routing="mixtral"),
    "dsv3": dict(name="DeepSeek-V3", E=256, H=7168, I=2048, k=8,
                 routing="deepseek", groups=8, topk_groups=4, scaling=2.5),
}


def layer_name(key: str, rank: int) -> str:
    """The forward's function name: layer_{key}, or layer_{key}_lora{r}."""
    return f"layer_{key}" + (f"_lora{rank}" if rank else "")


def layer_mlir(key: str, m: dict, rank: int = 0) -> str:
    """The layer's forward in the moe dialect (checked in as
    bench/kernels/training_step.mlir); with `rank`, LoRA adapters on both
    expert projections (arguments 4-7: A [E*r, K] and B [N, E*r] of gate_up,
    then of down; scaling LORA_SCALING)."""
    E, H, I, k = m["E"], m["H"], m["I"], m["k"]
    er = E * rank
    gu_lora = down_lora = ""
    lora_args = ""
    scaling = ""
    if rank:
        lora_args = (f",\n    %gu_a: tensor<{er}x{H}xbf16>, %gu_b: "
                     f"tensor<{2 * I}x{er}xbf16>,\n    %d_a: tensor<{er}x{I}"
                     f"xbf16>, %d_b: tensor<{H}x{er}xbf16>")
        gu_lora = (f"\n      lora(%gu_a, %gu_b : tensor<{er}x{H}xbf16>, "
                   f"tensor<{2 * I}x{er}xbf16>)")
        down_lora = (f"\n      lora(%d_a, %d_b : tensor<{er}x{I}xbf16>, "
                     f"tensor<{H}x{er}xbf16>)")
        scaling = f", lora_scaling = {LORA_SCALING} : f32"
    bias_arg = (f",\n    %bias: tensor<{E}xf32>" if m["routing"] == "deepseek"
                else "")
    if m["routing"] == "softmax":
        router = (f"%weights, %ids = moe.router_topk %logits k = {k} "
                  f"{{renormalize}}")
    elif m["routing"] == "mixtral":
        router = (f"%weights, %ids = moe.router_topk %logits k = {k} "
                  f"{{order = #moe.order<topk_then_softmax>}}")
    else:
        router = (f"%weights, %ids = moe.router_topk %logits "
                  f"bias(%bias : tensor<{E}xf32>) k = {k} "
                  f"{{scoring = #moe.scoring<sigmoid>, renormalize, "
                  f"num_groups = {m['groups']} : i64, topk_groups = "
                  f"{m['topk_groups']} : i64, scaling_factor = "
                  f"{m['scaling']} : f32}}")
    return f"""
// ---- {key}: {m['name']}, E{E} H{H} I{I} k{k}{f", LoRA r = {rank}" if rank else ""} ----
func.func @{layer_name(key, rank)}(%x: tensor<?x{H}xbf16>,
    %gate_w: tensor<{E}x{H}xbf16>, %w_gate_up: tensor<{E}x{2 * I}x{H}xbf16>,
    %w_down: tensor<{E}x{H}x{I}xbf16>{lora_args}{bias_arg}) -> tensor<?x{H}xbf16> {{
  %c0 = arith.constant 0 : index
  %tokens = tensor.dim %x, %c0 : tensor<?x{H}xbf16>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty(%tokens) : tensor<?x{E}xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x{E}xf32>)
      -> tensor<?x{E}xf32>
  %logits = linalg.matmul
      indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                       affine_map<(m, n, k) -> (n, k)>,
                       affine_map<(m, n, k) -> (m, n)>]
      ins(%x, %gate_w : tensor<?x{H}xbf16>, tensor<{E}x{H}xbf16>)
      outs(%acc : tensor<?x{E}xf32>) -> tensor<?x{E}xf32>
  {router}
      : tensor<?x{E}xf32> -> tensor<?x{k}xf32>, tensor<?x{k}xi32>
  %sorted, %slots, %offsets = moe.sort_by_expert %ids experts = {E}
      : tensor<?x{k}xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<{E}xi32>
  %rows = moe.permute %x, %slots, %offsets k = {k}
      : tensor<?x{H}xbf16>, tensor<?xi32>, tensor<{E}xi32> -> tensor<?x{H}xbf16>
  %h = moe.grouped_matmul %rows, %w_gate_up, %offsets{gu_lora} {{transpose_rhs{scaling}}}
      : tensor<?x{H}xbf16>, tensor<{E}x{2 * I}x{H}xbf16>, tensor<{E}xi32>
      -> tensor<?x{2 * I}xbf16>
  %a = moe.swiglu %h : tensor<?x{2 * I}xbf16> -> tensor<?x{I}xbf16>
  %down = moe.grouped_matmul %a, %w_down, %offsets{down_lora} {{transpose_rhs{scaling}}}
      : tensor<?x{I}xbf16>, tensor<{E}x{H}x{I}xbf16>, tensor<{E}xi32>
      -> tensor<?x{H}xbf16>
  %y = moe.unpermute %down, %slots, %offsets k = {k}
      weights(%weights : tensor<?x{k}xf32>)
      : tensor<?x{H}xbf16>, tensor<?xi32>, tensor<{E}xi32> -> tensor<?x{H}xbf16>
  return %y : tensor<?x{H}xbf16>
}}
"""


def emit_mlir(path: str) -> None:
    header = (
        "// The MoE layers of bench/training_step.py (generated by\n"
        "// `python3 bench/training_step.py --emit-mlir`): forward only;\n"
        "// moe-autodiff derives layer_{key}_fwd and layer_{key}_grad (see\n"
        "// the script's docstring for the commands).\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "".join(layer_mlir(k, m, rank)
                                 for k, m in MODELS.items()
                                 for rank in (0,) + LORA_RANKS))


# ---------------------------------------------------------------------------
# GPU side
# ---------------------------------------------------------------------------

def route(logits, m, bias=None, ids=None):
    """(weights [T, k] f32, ids [T, k]) of the model's routing on f32 (or
    f64) logits; with `ids`, the weights of those experts (the gradient
    then flows through them exactly as moe.router_topk_grad's)."""
    import torch
    k = m["k"]
    if m["routing"] == "mixtral":
        if ids is None:
            ids = torch.topk(logits, k, dim=-1).indices
        return torch.softmax(logits.gather(1, ids), dim=-1), ids
    if m["routing"] == "softmax":
        scores = torch.softmax(logits, dim=-1)
        select = scores
    else:
        scores = torch.sigmoid(logits)
        select = scores + bias
    if ids is None:
        if m["routing"] == "deepseek":
            T, E = select.shape
            g = select.view(T, m["groups"], E // m["groups"])
            group_score = g.topk(2, dim=-1).values.sum(-1)
            keep = group_score.topk(m["topk_groups"], dim=-1).indices
            mask = torch.zeros_like(group_score).scatter_(1, keep, 1.0)
            mask = mask.repeat_interleave(E // m["groups"], dim=1)
            select = select.masked_fill(mask == 0, float("-inf"))
        ids = torch.topk(select, k, dim=-1).indices
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights * m.get("scaling", 1.0), ids


def expert_views(adapters, E):
    """The LoRA adapters (A [E*r, K], B [N, E*r] of gate_up, then of down)
    as torch._grouped_mm operands: A_eᵀ [E, K, r] and B_eᵀ [E, r, N] (views:
    autograd reaches the stacked tensors)."""
    views = []
    for a, b in zip(adapters[0::2], adapters[1::2]):
        r = a.shape[0] // E
        views.append((a.view(E, r, -1).transpose(1, 2),
                      b.view(b.shape[0], E, r).permute(1, 2, 0)))
    return views


def torch_step_fn(m, x, gate_w, w_gate_up, w_down, bias, dy, adapters=()):
    """One forward + backward of the layer in torch autograd (bf16); with
    `adapters`, LoRA on both expert projections (the base weights frozen:
    the gradients of x and the adapters)."""
    import torch
    import torch.nn.functional as F
    from grouped_gemm import group_ends
    T, H = x.shape
    E, k = m["E"], m["k"]
    params = (x, *adapters) if adapters else (x, gate_w, w_gate_up, w_down)

    def project(rows, w, lora, offsets):
        out = torch._grouped_mm(rows, w.transpose(-2, -1), offs=offsets)
        if lora is None:
            return out
        a_t, b_t = lora
        u = torch._grouped_mm(rows, a_t, offs=offsets)
        return out + LORA_SCALING * torch._grouped_mm(u, b_t, offs=offsets)

    def step():
        for p in params:
            p.grad = None
        gu_lora, down_lora = (expert_views(adapters, E) if adapters
                              else (None, None))
        # As transformers computes it: a bf16 matmul, then f32 (torch.mm's
        # out_dtype=float32 has no derivative).
        logits = F.linear(x, gate_w).float()
        weights, ids = route(logits, m, bias)
        flat = ids.flatten()
        slots = torch.argsort(flat, stable=True)
        offsets = group_ends(flat, E)
        token = slots // k
        a = x.index_select(0, token)
        g = project(a, w_gate_up, gu_lora, offsets)
        half = g.shape[1] // 2
        act = F.silu(g[:, :half]) * g[:, half:]
        d = project(act, w_down, down_lora, offsets)
        scaled = d.float() * weights.flatten().index_select(0, slots)[:, None]
        y = torch.zeros(T, H, dtype=torch.float32, device=x.device)
        y = y.index_add(0, token, scaled).to(torch.bfloat16)
        y.backward(dy)
        return [p.grad for p in params]

    return step


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


def layer_weights(m, gen):
    """Random bf16 weights of a layer, (gate_w, w_gate_up, w_down), and
    DeepSeek-V3's selection bias (else None)."""
    import torch
    from grouped_gemm import random_weights
    E, H, I = m["E"], m["H"], m["I"]
    weights = (random_weights((E, H), gen), random_weights((E, 2 * I, H), gen),
               random_weights((E, H, I), gen))
    bias = (torch.randn(E, device="cuda", generator=gen) * 0.01
            if m["routing"] == "deepseek" else None)
    return weights, bias


def moec_step_fn(bundle, name, args, dy):
    """{name}_fwd then {name}_grad on the saved values: (the gradients, the
    forward's outputs)."""
    fwd = bundle.entry(f"{name}_fwd")
    grad = bundle.entry(f"{name}_grad")
    # Views without autograd (DLPack exports no tensor that requires grad;
    # torch's step differentiates the same storage).
    args = [t.detach() for t in args]

    def step():
        outs = fwd(*args, check_values=False)
        # save=all: every saved value is a result after y (none is y).
        return grad(*args, *outs[1:], dy, check_values=False), outs
    return step


DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "f8E4M3FN": 1,
               "f8E5M2": 1, "ui8": 1}


def scratch_bytes(bundle, name, inputs):
    """Bytes of the buffers entry `name` allocates outside torch (its
    scratch), for these inputs."""
    entry = bundle.entry(name)
    native = bundle._native
    info = native.entry(entry._index)
    symbols = native.bind_symbols(entry._index,
                                  [list(t.shape) for t in inputs])
    shapes = native.buffer_shapes(entry._index, list(symbols))
    return sum(math.prod(shape) * DTYPE_BYTES.get(b["dtype"], 4)
               for shape, b in zip(shapes, info["buffers"])
               if b["role"] not in ("input", "output"))


GRADS = ("dx", "d_gate_w", "d_w_gate_up", "d_w_down")
LORA_GRADS = ("dx", "d_gate_up_A", "d_gate_up_B", "d_down_A", "d_down_B")


def measure(bundle, key, m, T, weights, bias, gen, flush, peak, iters,
            reference, profile=False, rank=0):
    """One (model, T, rank) row: errors, then the time and peak memory of a
    step of moec and of torch. rank 0: full fine-tuning; else LoRA of that
    rank on both expert projections, base weights and router frozen."""
    import torch
    from grouped_gemm import BF16, random_weights, rel_err
    from memory_bound import timed
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
    if reference:
        ref = reference_grads(m, x, gate_w, w_gate_up, w_down, bias, dy,
                              outs[3], adapters)  # y, logits, weights, ids
        row["err"] = {n: rel_err(g, r) for n, g, r in zip(names, grads, ref)}
        del ref
    scratch = max(scratch_bytes(bundle, f"{layer_name(key, rank)}_fwd",
                                inputs),
                  scratch_bytes(bundle, f"{layer_name(key, rank)}_grad",
                                inputs + list(outs[1:]) + [dy]))
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
    try:
        torch_grads = run_torch()
        row["err_torch_vs_moec"] = {
            n: rel_err(g, t[:g.shape[0]]) for n, g, t in zip(
                names, kept, torch_grads)}
        del torch_grads
    except torch.cuda.OutOfMemoryError as error:
        row["torch"] = dict(error=f"out of memory: {str(error)[:160]}")
        runs = runs[:1]
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
        ms = timed(fn, iters, flush)
        for t in leaves:
            t.grad = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        mem = torch.cuda.max_memory_allocated() + (
            scratch if name == "moec" else 0)
        row[name] = dict(ms=ms, tflops=flops / ms / 1e9,
                         pct_peak=100 * flops / ms / 1e9 / peak,
                         peak_gb=mem / 1e9)
    for t in leaves:
        t.grad = None
        t.requires_grad_(False)
    row["moec"]["scratch_gb"] = scratch / 1e9
    if "ms" in row["torch"]:
        row["ratio"] = row["torch"]["ms"] / row["moec"]["ms"]
    if profile:
        row["moec_kernels"] = kernel_profile(run_moec)
    return row


def kernel_profile(fn, top=14):
    """GPU time per kernel of one fn() (torch.profiler: CUPTI sees the
    driver-API launches too): [(name, ms)], largest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    times = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] = times.get(event.name, 0.0) + \
                event.device_time_total / 1e3
    return sorted(times.items(), key=lambda kv: -kv[1])[:top]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?")
    parser.add_argument("--emit-mlir")
    parser.add_argument("--models", default="qwen3,mixtral,dsv3")
    parser.add_argument("--tokens", default="8192,32768")
    parser.add_argument("--ranks", default="0," + ",".join(map(str, LORA_RANKS)),
                        help="0: full fine-tuning; r: LoRA of rank r")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--profile", action="store_true",
                        help="also list moec's kernels by GPU time")
    args = parser.parse_args()
    if args.emit_mlir:
        emit_mlir(args.emit_mlir)
        return
    import torch
    import moec
    from grouped_gemm import report_peak
    from memory_bound import make_flush

    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = make_flush()
    device, _, peak = report_peak(args.iters, flush, gen)
    tokens = [int(t) for t in args.tokens.split(",")]
    rows = []
    for key in args.models.split(","):
        m = MODELS[key]
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
                              rank)
            except torch.cuda.OutOfMemoryError as error:
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
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(device=device, peak_tflops=peak, rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    main()
