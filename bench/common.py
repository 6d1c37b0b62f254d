"""What every bench script shares: the model shapes, random inputs and
routing, timing (CUDA events, L2 flush, medians, CUDA graphs, per-kernel
GPU times, host time), the measured ceilings and the Triton kernels that
measure them, the error measure, the grouped-matmul cases with their
baselines, the whole MoE layer (its moe-dialect forward and torch
references) and the reading and writing of results. Scripts import this
module and no other script.

Importable without torch (the --emit-mlir paths and the plot scripts run
where torch is not): the functions that need it fail with an ImportError
there.
"""

import gc
import json
import math
import statistics
import time

try:
    import torch
    import torch.nn.functional as F
    BF16 = torch.bfloat16
except ImportError:  # --emit-mlir, plots: no GPU work
    torch = F = BF16 = None

# ---------------------------------------------------------------------------
# Model shapes
# ---------------------------------------------------------------------------

# The MoE layers the scripts measure. E experts, H hidden size, I expert
# intermediate size, top-k. routing: how the router picks (the layers a
# script builds whole: "softmax" softmax, top-k, renormalized; "mixtral"
# top-k of the logits, then softmax over them; "deepseek" sigmoid scores
# plus a selection bias, the best topk_groups of `groups` groups, top-k,
# renormalized, times `scaling`). Each script names its own default subset
# and order (its --models), so its results keep their rows.
MODELS = {
    "qwen3": dict(name="Qwen3-30B-A3B", E=128, H=2048, I=768, k=8,
                  routing="softmax"),
    "mixtral": dict(name="Mixtral-8x7B", E=8, H=4096, I=14336, k=2,
                    routing="mixtral"),
    "qwen35": dict(name="Qwen3.5-35B-A3B", E=256, H=2048, I=512, k=8),
    "olmoe": dict(name="OLMoE-1B-7B", E=64, H=2048, I=1024, k=8),
    "dsv3": dict(name="DeepSeek-V3", E=256, H=7168, I=2048, k=8,
                 routing="deepseek", groups=8, topk_groups=4, scaling=2.5),
}


def models(keys):
    """{key: MODELS[key]} in the order of `keys` (a tuple or "a,b")."""
    if isinstance(keys, str):
        keys = keys.split(",")
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model {', '.join(unknown)} (known: "
                         f"{', '.join(MODELS)})")
    return {k: MODELS[k] for k in keys}


def ints(text):
    """[int] of a comma-separated option ("2048,8192")."""
    return [int(v) for v in text.split(",") if v]


# ---------------------------------------------------------------------------
# Ceilings (measured on the H200; ARCHITECTURE.md) and tolerances
# ---------------------------------------------------------------------------

COPY_TBPS = 4.27          # copy bandwidth, bytes read + written
PEAK_SIZE = 8192          # the dense peak: torch.mm PEAK_SIZE^3, bf16
TOLERANCE = 2e-2          # relative error a moec result must stay under
GRAPH_BYTES = 400 << 20   # bytes one graph-timed replay moves, at least


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def random_weights(shape, gen):
    """bf16 weights 0.02 * N(0, 1) on the GPU."""
    w = torch.randn(shape, device="cuda", dtype=BF16, generator=gen)
    return w.mul_(0.02)


def group_ends(flat_ids, E):
    """Cumulative group ends (int32) of the expert ids, without the host
    sync of torch.bincount."""
    counts = torch.zeros(E, dtype=torch.int64, device=flat_ids.device)
    counts.scatter_add_(0, flat_ids, torch.ones_like(flat_ids))
    return torch.cumsum(counts, 0).int()


# ---------------------------------------------------------------------------
# torch's FP8 recipe (torchao's rowwise composition around
# torch._scaled_grouped_mm), the baseline of the FP8 benchmarks
# ---------------------------------------------------------------------------

FP8_MAX = 448.0   # e4m3's largest finite value
TORCH_FP8_ALIGN = 16  # rows per group torch's FP8 grouped GEMM needs


def quantize_rowwise(a, dim):
    """torch's rowwise recipe: e4m3 of a with one scale per slice along
    every dimension but `dim` (amax over `dim`)."""
    amax = a.float().abs().amax(dim=dim, keepdim=True).clamp(min=1e-12)
    scale = amax / FP8_MAX
    return (a.float() / scale).to(torch.float8_e4m3fn), scale


def per_group_colwise(a, ends):
    """torch's recipe for the weight gradient (torchao's per-group
    column-wise scales): e4m3 of a [R, C] with one scale per expert and
    column, and the scales [E * C] (expert-major). Rows past the last
    group end (a padded buffer's tail, which torch._scaled_grouped_mm
    leaves unwritten) count as zeros of the last expert."""
    E = ends.numel()
    rows = torch.arange(a.shape[0], device=a.device)
    group = torch.searchsorted(ends.long(), rows, right=True).clamp(max=E - 1)
    a = torch.where((rows < ends[-1])[:, None], a, 0)
    # The rows are sorted by group: one segmented max (no atomics).
    offsets = torch.cat([ends.new_zeros(1), ends]).long()
    amax = torch.segment_reduce(a.float().abs(), "max", offsets=offsets,
                                axis=0, initial=0)
    scale = (amax / FP8_MAX).clamp(min=1e-12)
    q = (a.float() / scale[group]).to(torch.float8_e4m3fn)
    return q, scale.reshape(-1).contiguous()


def aligned_rows(flat_sorted, E, align=TORCH_FP8_ALIGN):
    """Where each expert-sorted row goes when every expert's group is
    padded to `align` rows: (index [R], group ends [E] int32, rows of the
    padded buffer). The buffer is sized for the worst case, R + E *
    (align - 1), so that nothing waits for the counts on the host, and
    rounded up to `align` (FP8 rows of it are a stride of the weight
    gradient's operands, which must be a multiple of 16 bytes)."""
    R = flat_sorted.numel()
    counts = torch.zeros(E, dtype=torch.int64, device=flat_sorted.device)
    counts.scatter_add_(0, flat_sorted, torch.ones_like(flat_sorted))
    padded = (counts + align - 1) // align * align
    starts = torch.cumsum(counts, 0) - counts
    padded_starts = torch.cumsum(padded, 0) - padded
    rank = torch.arange(R, device=flat_sorted.device) - starts[flat_sorted]
    index = padded_starts[flat_sorted] + rank
    rows = -(-(R + E * (align - 1)) // align) * align
    return index, torch.cumsum(padded, 0).int(), rows


class TorchFp8GroupedLinear(torch.autograd.Function if torch is not None
                            else object):
    """y [R, N] = rows [R, K] . W_e^T per group (W [E, N, K]) in e4m3 as
    torchao's rowwise recipe composes it: the forward's rows and weights
    rowwise, the input gradient's dy rowwise and W along N, the weight
    gradient's dy and rows with per-group column-wise scales; every
    quantization a few torch ops, every matmul torch._scaled_grouped_mm
    (groups `ends`, each a multiple of 16 rows)."""

    @staticmethod
    def forward(ctx, rows, w, ends):
        E, N, _ = w.shape
        xq, sx = quantize_rowwise(rows, 1)
        wq, sw = quantize_rowwise(w, 2)
        ctx.save_for_backward(rows, w, ends)
        return torch._scaled_grouped_mm(
            xq, wq.transpose(-2, -1), sx.view(-1), sw.view(E, N), offs=ends,
            out_dtype=BF16)

    @staticmethod
    def backward(ctx, dy):
        rows, w, ends = ctx.saved_tensors
        E, _, K = w.shape
        dy = dy.contiguous()
        dq, sd = quantize_rowwise(dy, 1)
        # dx = dy . W_e: W quantized along N, read as [E, N, K] column-major.
        wq, sw = quantize_rowwise(w.transpose(1, 2), 2)
        dx = torch._scaled_grouped_mm(
            dq, wq.contiguous().transpose(-2, -1), sd.view(-1),
            sw.view(E, K), offs=ends, out_dtype=BF16)
        # dW_e = dy_e^T . rows_e: 2d x 2d, the groups along the rows.
        dgq, sdg = per_group_colwise(dy, ends)
        xgq, sxg = per_group_colwise(rows, ends)
        dw = torch._scaled_grouped_mm(
            dgq.t().contiguous(), xgq.t().contiguous().t(), sdg, sxg,
            offs=ends, out_dtype=BF16)
        return dx, dw, None


def random_routing(T, E, k, gen):
    """slots [T*k] (slot = t*k + j, stably sorted by expert) and offsets
    [E] (cumulative group ends), from the top-k of random logits."""
    logits = torch.randn(T, E, device="cuda", generator=gen)
    flat = torch.topk(logits, k, dim=-1).indices.flatten()
    slots = torch.argsort(flat, stable=True).int()
    return slots, group_ends(flat, E)


def skewed_routing(T, E, k, gen, skew):
    """random_routing with expert e's logit lowered by skew * ln(1 + e)."""
    if skew == 0:
        return random_routing(T, E, k, gen)
    logits = torch.randn(T, E, device="cuda", generator=gen)
    logits -= skew * torch.log1p(torch.arange(E, device="cuda",
                                              dtype=torch.float32))
    flat = torch.topk(logits, k, dim=-1).indices.flatten()
    return torch.argsort(flat, stable=True).int(), group_ends(flat, E)


def host_groups(offsets):
    """(expert, start, end) of each non-empty group, read once."""
    groups, start = [], 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            groups.append((e, start, end))
        start = end
    return groups


def swiglu(g):
    """silu(gate) * up of [R, 2I] rows (gate first)."""
    half = g.shape[1] // 2
    return F.silu(g[:, :half]) * g[:, half:]


def positions_of(slots):
    """The row of each slot (the inverse of unaligned `slots`), which
    sort_by_expert returns as `positions` and the token-order kernels take
    instead of rebuilding it."""
    positions = torch.empty_like(slots)
    positions[slots.long()] = torch.arange(slots.numel(), dtype=slots.dtype,
                                           device=slots.device)
    return positions


def torch_route(logits, m, bias=None):
    """(weights, ids, slots, offsets) of Qwen3's routing (bias None:
    softmax, top-k, renormalize) or DeepSeek-V3's (sigmoid, group-limited
    top-k on the biased scores, x 2.5), in torch eager."""
    E, k = m["E"], m["k"]
    if bias is None:
        probs = torch.softmax(logits, dim=-1)
        w, ids = torch.topk(probs, k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
    else:
        scores = torch.sigmoid(logits)
        sel = scores + bias
        T = logits.shape[0]
        groups = sel.view(T, 8, E // 8).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(groups).scatter_(
            1, groups.topk(4, dim=-1).indices, 1.0)
        mask = keep.repeat_interleave(E // 8, dim=1).bool()
        ids = sel.masked_fill(~mask, float("-inf")).topk(k, dim=-1).indices
        w = scores.gather(1, ids)
        w = w / w.sum(-1, keepdim=True) * 2.5
    flat = ids.flatten()
    slots = torch.argsort(flat, stable=True).int()
    offsets = torch.cumsum(torch.bincount(flat, minlength=E), 0).int()
    return w, ids.int(), slots, offsets


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------

def free_bytes():
    """Free GPU memory after returning torch's cached blocks."""
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def fits(need, what):
    """Whether `need` bytes fit in 90 % of what is free; prints a skip
    line when not."""
    free = free_bytes()
    if need > 0.9 * free:
        print(f"skip {what}: needs ~{need / 2**30:.1f} GiB, "
              f"{free / 2**30:.1f} GiB free", flush=True)
        return False
    return True


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def make_flush(mode="read"):
    """A callable that evicts the L2 (50 MB) before a timed run: a 256 MB
    buffer read ("read": leaves clean lines behind) or written ("write":
    leaves 50 MB of dirty lines, whose write-back then runs during the timed
    kernel and costs a 50 MB kernel up to half its speed)."""
    buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    if mode == "read":
        return lambda: buf.max()
    if mode == "write":
        return buf.zero_
    raise ValueError(f"flush mode must be 'read' or 'write', not {mode!r}")


def timed(fn, iters, flush):
    """Median ms of fn() over iters runs, flush() (L2 eviction, see
    make_flush) before each: the autotuner's timing (CUDA events), with 3
    warm-up runs and a 1M-cycle sleep (up to ~0.5 ms of host launch cost
    hidden)."""
    from moec.compiler.tune import median_ms
    return median_ms(fn, iters, flush, warmup=3, sleep_cycles=1_000_000)


def host_seconds(fn, calls=1):
    """Mean wall-clock seconds of a call of fn() over `calls` calls, on the
    host (no GPU sync: what the host spends launching)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def capture(fns):
    """The callables fns captured, in order, into one CUDA graph: (graph,
    their outputs), the outputs rewritten by every graph.replay(). Each
    runs once first on the capture's side stream (cuBLAS handles, lazy
    module loads). Raises when one cannot be captured (a host sync)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn() for fn in fns]
    torch.cuda.synchronize()
    return graph, outs


def graphed(fn):
    """fn captured once into a CUDA graph: (graph, fn's output), the output
    rewritten by every graph.replay()."""
    graph, (out,) = capture([fn])
    return graph, out


def graph_timed(fns, iters, flush):
    """Steady-state ms per launch: fns (the same kernel on len(fns)
    different input sets) captured back to back into one CUDA graph, its
    replays timed like timed() (L2 evicted and a GPU sleep before each),
    median / len(fns). What a kernel costs inside a model's stream: the
    launch and the events are paid once per graph, and each launch still
    pays its own ramp-up and drain and the write-back of its
    predecessor's output. (None, why) when a function cannot be
    captured."""
    try:
        graph, _ = capture(fns)
    except Exception as error:  # noqa: BLE001 - torch's and moec's errors
        torch.cuda.synchronize()
        return None, str(error).strip().splitlines()[0][:120]
    ms = timed(graph.replay, iters, flush) / len(fns)
    del graph
    return ms, None


def kernel_times(fn, iters=5):
    """Mean GPU time per call of each kernel fn() launches, in us (CUPTI
    through torch.profiler), and the span of a call from the first
    kernel's start to the last one's end (kernels plus the gaps between
    them)."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    spans = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            torch.cuda._sleep(400_000)
            fn()
            torch.cuda.synchronize()
    kernels = [e for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA
               and "spin_kernel" not in e.name]
    per_kernel = {}
    for e in kernels:
        per_kernel[e.name] = per_kernel.get(e.name, 0.0) + \
            e.time_range.elapsed_us() / iters
    kernels.sort(key=lambda e: e.time_range.start)
    per_call = max(1, len(kernels) // iters)
    for i in range(0, len(kernels) - per_call + 1, per_call):
        call = kernels[i:i + per_call]
        spans.append(call[-1].time_range.end - call[0].time_range.start)
    return per_kernel, statistics.median(spans) if spans else 0.0


def print_kernel_times(row, fn, width=8):
    """kernel_times(fn) into row (kernels_us, span_us), printed."""
    per_kernel, span = kernel_times(fn)
    row["kernels_us"], row["span_us"] = per_kernel, span
    for name, us in per_kernel.items():
        print(f"    {us:{width}.1f} us  {name}")
    print(f"    {span:{width}.1f} us  first kernel start to last end",
          flush=True)


def kernel_profile(fn, top=14):
    """GPU time per kernel of one fn() (torch.profiler: CUPTI sees the
    driver-API launches too): [(name, ms)], largest first."""
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


def measure_peak(iters, flush, gen):
    """(ms, TFLOP/s) of torch.mm on PEAK_SIZE^3 bf16: the dense peak."""
    n = PEAK_SIZE
    a = torch.randn(n, n, device="cuda", dtype=BF16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=BF16, generator=gen)
    ms = timed(lambda: torch.mm(a, b.t()), iters, flush)
    return ms, 2 * n ** 3 / ms / 1e9


def report_peak(iters, flush, gen):
    """Measures the dense bf16 peak and prints it with the device: (device
    name, milliseconds of the peak's matmul, peak TFLOP/s)."""
    device = torch.cuda.get_device_name()
    peak_ms, peak = measure_peak(iters, flush, gen)
    print(f"{device}, torch {torch.__version__}: dense bf16 peak "
          f"{peak:.0f} TFLOP/s (torch.mm {PEAK_SIZE}^3, {peak_ms:.3f} ms)",
          flush=True)
    return device, peak_ms, peak


def rates(flops, ms, peak):
    """{tflops, pct_peak} of each timing in `ms` ({name: ms})."""
    tflops = {n: flops / t / 1e9 for n, t in ms.items()}
    return dict(tflops=tflops,
                pct_peak={n: 100 * v / peak for n, v in tflops.items()})


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

def rel_err(out, ref, rows=8192):
    """||out - ref|| / ||ref|| in float64, a slab of `rows` rows at a time
    (so that a large result needs no full float64 copy)."""
    num = den = 0.0
    for o, r in zip(out.split(rows), ref.split(rows)):
        r = r.double()
        num += torch.linalg.vector_norm(o.double() - r).item() ** 2
        den += torch.linalg.vector_norm(r).item() ** 2
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


# ---------------------------------------------------------------------------
# Grouped matmul cases: one kernel at one shape (grouped_gemm, power_probe)
# ---------------------------------------------------------------------------

class Case:
    """moec and its baselines on one set of inputs.

    moec() and each baseline return the output; check() compares moec and
    the other baselines with the reference baseline and returns
    {name: relative error}."""

    def __init__(self, kernel, flops, moec_fn, baselines, reference,
                 check=None):
        self.kernel = kernel
        self.flops = flops
        self.moec = moec_fn
        self.baselines = baselines  # name -> fn
        self.reference = reference  # name of the baseline that is the ref
        self.extra = {}  # more fields for the row
        self._check = check  # replaces the default check: extra -> errors

    def check(self):
        if self._check:
            return self._check(self.extra)
        ref = self.baselines[self.reference]()
        errs = {"moec": rel_err(self.moec(), ref)}
        for name, fn in self.baselines.items():
            if name != self.reference:
                errs[name] = rel_err(fn(), ref)
        torch.cuda.synchronize()
        return errs


def expert_loop(a, w, groups, N):
    """Each non-empty expert's rows of a times that expert's w[e]^T, into
    one [R, N] output (cuBLAS, one launch per expert)."""
    out = torch.empty(a.shape[0], N, dtype=BF16, device=a.device)
    for e, start, end in groups:
        torch.mm(a[start:end], w[e].t(), out=out[start:end])
    return out


def gathered_case(bundle, key, m, x, slots, offsets, groups, w_gate_up,
                  activation):
    """gather_{key} (activation False) or gate_up_swiglu_{key}."""
    H, I, k = m["H"], m["I"], m["k"]
    R = slots.numel()
    name = "gate_up_swiglu" if activation else "gather"
    entry = bundle.entry(f"{name}_{key}")
    out = torch.empty(R, I if activation else 2 * I, dtype=BF16,
                      device="cuda")
    token = (slots // k).long()  # the gather index, outside the timing
    w_t = w_gate_up.transpose(-2, -1)  # [E, H, 2I], column-major
    finish = swiglu if activation else (lambda g: g)

    def run_moec():
        entry(x, slots, offsets, w_gate_up, out=out, check_values=False)
        return out

    def run_grouped_mm():
        a = x.index_select(0, token)
        return finish(torch._grouped_mm(a, w_t, offs=offsets))

    def run_loop():
        a = x.index_select(0, token)
        return finish(expert_loop(a, w_gate_up, groups, 2 * I))

    case = Case(name, 2 * R * H * 2 * I, run_moec,
                {"grouped_mm": run_grouped_mm, "loop_eager": run_loop},
                reference="loop_eager")
    add_graph(case, run_loop)
    return case


def down_case(bundle, key, m, h, offsets, groups, w_down):
    H, I = m["H"], m["I"]
    R = h.shape[0]
    entry = bundle.entry(f"down_{key}")
    out = torch.empty(R, H, dtype=BF16, device="cuda")
    w_t = w_down.transpose(-2, -1)  # [E, I, H], column-major

    def run_moec():
        entry(h, offsets, w_down, out=out, check_values=False)
        return out

    def run_loop():
        return expert_loop(h, w_down, groups, H)

    case = Case("down", 2 * R * I * H, run_moec,
                {"grouped_mm": lambda: torch._grouped_mm(h, w_t, offs=offsets),
                 "loop_eager": run_loop},
                reference="loop_eager")
    add_graph(case, run_loop)
    return case


def add_graph(case, loop_fn):
    """The per-expert loop as a CUDA graph: the baseline loop_graph."""
    graph, graph_out = graphed(loop_fn)

    def replay():
        graph.replay()
        return graph_out
    # Keep the listing order grouped_mm, loop_graph, loop_eager.
    eager = case.baselines.pop("loop_eager")
    case.baselines["loop_graph"] = replay
    case.baselines["loop_eager"] = eager


# ---------------------------------------------------------------------------
# Memory ceilings: plain Triton kernels (ceilings, permute_ncu)
# ---------------------------------------------------------------------------

BLOCK = 4096
ROW_BYTES = 4096  # a Qwen3 token in bf16 (H = 2048)
FANOUT = 8        # rows written per row read (top-8)


def triton_cases(src, dst):
    """A Triton copy(src, dst) and the read-only, write-only, copy and
    row-scatter Triton cases over int32 views ((None, {}) without
    Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None, {}

    @triton.jit
    def read_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0)
        tl.store(part_ptr + tl.program_id(0), tl.sum(x, axis=0))

    @triton.jit
    def write_kernel(y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.full((BLOCK,), 7, tl.int32), mask=offs < n)

    @triton.jit
    def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def scatter_kernel(x_ptr, rows_ptr, y_ptr, ROW: tl.constexpr,
                       FANOUT: tl.constexpr):
        t = tl.program_id(0)
        offs = tl.arange(0, ROW)
        x = tl.load(x_ptr + t * ROW + offs)
        for j in tl.static_range(FANOUT):
            r = tl.load(rows_ptr + t * FANOUT + j).to(tl.int64)
            tl.store(y_ptr + r * ROW + offs, x)

    x, y = src.view(torch.int32), dst.view(torch.int32)
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK),)
    parts = torch.empty(grid[0], dtype=torch.int32, device=x.device)
    # Row scatter: dst's rows are the targets, 1/FANOUT of src the tokens.
    row = ROW_BYTES // 4
    out_rows = dst.numel() // ROW_BYTES
    tokens = out_rows // FANOUT
    targets = torch.randperm(out_rows, device=x.device, dtype=torch.int32)
    def copy(src, dst):
        copy_kernel[grid](src.view(torch.int32), dst.view(torch.int32), n,
                          BLOCK=BLOCK)

    return copy, {
        "triton copy": (lambda: copy(src, dst), 2 * src.numel()),
        "triton read": (lambda: read_kernel[grid](x, parts, n, BLOCK=BLOCK),
                        src.numel()),
        "triton write": (lambda: write_kernel[grid](y, n, BLOCK=BLOCK),
                         dst.numel()),
        "triton scatter 1:8": (
            lambda: scatter_kernel[(tokens,)](x, targets, y, ROW=row,
                                              FANOUT=FANOUT),
            tokens * ROW_BYTES * (FANOUT + 1)),
    }


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

def write_json(path, data):
    """The results file: `data` as JSON, one-space indent (as every result
    under bench/results)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


# ---------------------------------------------------------------------------
# The MoE layer whole (training_step, main_grad_step, expert_parallel)
# ---------------------------------------------------------------------------

LORA_SCALING = 2.0   # alpha / r of the LoRA layers


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


def route(logits, m, bias=None, ids=None):
    """(weights [T, k] f32, ids [T, k]) of the model's routing on f32 (or
    f64) logits; with `ids`, the weights of those experts (the gradient
    then flows through them exactly as moe.router_topk_grad's)."""
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


def torch_step_fn(m, x, gate_w, w_gate_up, w_down, bias, dy, adapters=(),
                  fp8=False):
    """One forward + backward of the layer in torch autograd (bf16); with
    `adapters`, LoRA on both expert projections (the base weights frozen:
    the gradients of x and the adapters). `fp8` (full fine-tuning): the
    expert matmuls in torch's FP8 composition (TorchFp8GroupedLinear), each
    expert's rows padded to 16 in a buffer as torchao pads them."""
    if fp8 and adapters:
        raise ValueError("torch_step_fn: fp8 is full fine-tuning only")
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
        if fp8:
            index, ends, padded_rows = aligned_rows(flat[slots], E)
            a = a.new_zeros(padded_rows, H).index_copy(0, index, a)
            g = TorchFp8GroupedLinear.apply(a, w_gate_up, ends)
        else:
            g = project(a, w_gate_up, gu_lora, offsets)
        half = g.shape[1] // 2
        act = F.silu(g[:, :half]) * g[:, half:]
        if fp8:
            d = TorchFp8GroupedLinear.apply(act, w_down, ends).index_select(
                0, index)
        else:
            d = project(act, w_down, down_lora, offsets)
        scaled = d.float() * weights.flatten().index_select(0, slots)[:, None]
        y = torch.zeros(T, H, dtype=torch.float32, device=x.device)
        y = y.index_add(0, token, scaled).to(torch.bfloat16)
        y.backward(dy)
        return [p.grad for p in params]

    return step


def layer_weights(m, gen):
    """Random bf16 weights of a layer, (gate_w, w_gate_up, w_down), and
    DeepSeek-V3's selection bias (else None)."""
    E, H, I = m["E"], m["H"], m["I"]
    weights = (random_weights((E, H), gen), random_weights((E, 2 * I, H), gen),
               random_weights((E, H, I), gen))
    bias = (torch.randn(E, device="cuda", generator=gen) * 0.01
            if m["routing"] == "deepseek" else None)
    return weights, bias
