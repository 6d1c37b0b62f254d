"""The autotuner's GPU half: time the candidate kernels of `moec tune` and
write the fastest tile per op and row count to a tuning cache.

    # where MLIR is:
    moec tune model.mlir -o tune.moecb --target sm_90a   # + tune.moecb.json
    # on the GPU machine (runtime-only moec and torch are enough):
    python3 -m moec.compiler.tune tune.moecb --rows 4096,16384,65536 \\
        -o cache.json
    # where MLIR is:
    moec compile model.mlir -o model.moecb --target sm_90a \\
        --tuning-cache cache.json

For every op of the manifest (tune.moecb.json) and every row count it makes
one set of random inputs (routing as a top-k of random logits: rows = T*k
for ops that gather or combine tokens, else rows spread over the experts at
random), runs each candidate once and checks its output against the
kernel's own choice (relative error < 1e-2, so that a wrong kernel can never
win), then times each: the L2 evicted by a 256 MB read before every run,
median of --iters CUDA-event timings. The fastest tile of each (op, row
count) goes to the cache (the default one unless the fastest beats it by
--min-gain) (format in
include/moec/Dialect/Moe/Transforms/TuningCache.h), with its time and the
default tile's; entries already in the cache for other ops or row counts
are kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from typing import Callable, Optional, Sequence

__all__ = [
    "CACHE_FORMAT", "CHECK_TOLERANCE", "KNOWN_ROLES", "MANIFEST_FORMAT",
    "TuneError", "load_cache", "load_manifest", "main", "make_inputs",
    "median_ms", "merge_entries", "parse_rows", "prefer_default", "rel_err",
    "routed_ids", "symbol_values", "tune_op", "write_cache",
]

CACHE_FORMAT = 1
MANIFEST_FORMAT = 1
CHECK_TOLERANCE = 1e-2
# Arguments the tuner can fill; the sm_90a kernel takes no others.
KNOWN_ROLES = ("lhs", "rhs", "grad_out", "offsets", "gather_slots", "bias",
               "lora_a",
               "lora_b", "row_scale", "scatter_slots", "scatter_weights",
               "activation_input", "accumulate", "lhs_scales", "rhs_scales")


class TuneError(ValueError):
    """A manifest, bundle or cache the tuner cannot use."""


# ---------------------------------------------------------------------------
# Manifest and cache (no GPU needed)
# ---------------------------------------------------------------------------

def _read_json(path: str, what: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        raise TuneError(f"{what} '{path}': {error}") from None


def load_manifest(path: str) -> dict:
    """The manifest `moec tune` wrote next to its bundle, checked."""
    manifest = _read_json(path, "manifest")
    if not isinstance(manifest, dict) or \
            manifest.get("moec_tuning_manifest") != MANIFEST_FORMAT:
        raise TuneError(f"manifest '{path}': not a version {MANIFEST_FORMAT} "
                        f"tuning manifest")
    ops = manifest.get("ops")
    if not isinstance(manifest.get("target"), str) or not isinstance(ops, list):
        raise TuneError(f"manifest '{path}': needs \"target\" and \"ops\"")
    for i, op in enumerate(ops):
        where = f"manifest '{path}': op {i}"
        for field, kind in (("key", str), ("function", str), ("k", int),
                            ("args", list), ("candidates", list)):
            if not isinstance(op.get(field), kind):
                raise TuneError(f"{where}: \"{field}\" missing or not "
                                f"{kind.__name__}")
        unknown = [r for r in op["args"] if r not in KNOWN_ROLES]
        if unknown:
            raise TuneError(f"{where}: arguments the tuner cannot fill: "
                            f"{', '.join(unknown)}")
        if not op["candidates"] or not op["candidates"][0].get("default"):
            raise TuneError(f"{where}: the first candidate must be the "
                            f"default tile")
    return manifest


def load_cache(path: str) -> list:
    """The entries of an existing cache at `path` ([] when there is none)."""
    if not os.path.exists(path):
        return []
    cache = _read_json(path, "cache")
    if not isinstance(cache, dict) or \
            cache.get("moec_tuning_cache") != CACHE_FORMAT or \
            not isinstance(cache.get("entries"), list):
        raise TuneError(f"cache '{path}': not a version {CACHE_FORMAT} tuning "
                        f"cache")
    return cache["entries"]


def merge_entries(old: Sequence[dict], new: Sequence[dict]) -> list:
    """`old` with every (target, key, max_rows) that `new` measured
    replaced; sorted by target, key and max_rows."""
    ident = lambda e: (e["target"], e["key"], e["max_rows"])
    merged = {ident(e): e for e in old}
    merged.update({ident(e): e for e in new})
    return [merged[k] for k in sorted(merged)]


def write_cache(path: str, entries: Sequence[dict], device: str) -> None:
    cache = {"moec_tuning_cache": CACHE_FORMAT, "device": device,
             "entries": list(entries)}
    with open(path, "w") as f:
        json.dump(cache, f, indent=1)
        f.write("\n")


def parse_rows(text: str) -> list:
    try:
        rows = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise TuneError(f"--rows: expected comma-separated integers, got "
                        f"'{text}'") from None
    if not rows or any(r < 1 for r in rows):
        raise TuneError(f"--rows: expected row counts >= 1, got '{text}'")
    return sorted(set(rows))


def prefer_default(entry: dict, default_tile: str, min_gain: float) -> dict:
    """`entry` with the default tile when the measured best beats it by
    less than `min_gain` (0.01: 1 %): differences that small are timing
    noise, and a cache that keeps the default builds fewer kernels."""
    if entry["ms"] * (1.0 + min_gain) > entry["default_ms"]:
        entry = dict(entry, tile=default_tile, ms=entry["default_ms"])
    return entry


def symbol_values(symbols: Sequence[str], rows: int, k: int) -> dict:
    """M (the op's rows) and T (tokens, M = T*k) for a row count; rows is
    rounded down to a multiple of k (at least k)."""
    tokens = max(1, rows // k)
    values = {"M": tokens * k, "T": tokens}
    missing = [s for s in symbols if s not in values]
    if missing:
        raise TuneError(f"candidate entry has symbols the tuner does not "
                        f"know: {', '.join(missing)} (expected M, T)")
    return values


# ---------------------------------------------------------------------------
# Inputs and timing (GPU)
# ---------------------------------------------------------------------------

def routed_ids(tokens: int, rows: int, experts: int, k: int,
               tokenwise: bool, skew: float, gen, device: str = "cuda"):
    """The expert of each of `rows` rows: each token's top `k` of random
    logits (`tokenwise`: ops that gather or combine tokens, rows = tokens
    * k), else one expert per row. With `skew` Z expert e's logit is
    lowered by Z * ln(1 + e) (as bench/training_kernels.py's skewed
    routing), so that low experts get most rows; 0 routes uniformly."""
    import torch

    if not tokenwise and skew == 0:
        return torch.randint(experts, (rows,), device=device, generator=gen)
    logits = torch.randn(tokens if tokenwise else rows, experts,
                         device=device, generator=gen)
    if skew:
        logits -= skew * torch.log1p(torch.arange(experts, device=device,
                                                  dtype=torch.float32))
    return torch.topk(logits, k if tokenwise else 1, dim=-1).indices.flatten()


def make_inputs(entry, roles: Sequence[str], k: int, rows: int, gen,
                skew: float = 0.0):
    """Random inputs of a candidate entry for `rows` rows, in argument
    order (routing skewed by `skew`: routed_ids)."""
    import torch
    from ..language import _dtypes

    names = entry.symbols
    values = symbol_values(names, rows, k)
    shapes = entry.shapes([values[s] for s in names])[:len(entry.inputs)]
    tokens, m = values["T"], values["M"]
    experts = next(s[0] for r, s in zip(roles, shapes) if r == "offsets")
    tokenwise = "gather_slots" in roles or "scatter_slots" in roles
    ids = routed_ids(tokens, m, experts, k, tokenwise, skew, gen)
    slots = torch.argsort(ids, stable=True).int()
    counts = torch.bincount(ids, minlength=experts)
    offsets = torch.cumsum(counts, 0).int()

    inputs = []
    for role, buffer, shape in zip(roles, entry.inputs, shapes):
        dtype = _dtypes.to_torch(buffer.dtype)
        if role in ("gather_slots", "scatter_slots"):
            x = slots
        elif role == "offsets":
            x = offsets
        elif role in ("row_scale", "lhs_scales", "rhs_scales"):
            # Positive scales (FP8's: one per block of the operand).
            x = torch.rand(shape, device="cuda", generator=gen) + 0.5
        elif role in ("rhs", "lora_a", "lora_b"):
            # (FP8 weights: drawn in f32, torch draws no FP8 directly.)
            wide = torch.float32 if buffer.dtype in _dtypes.FP8 else dtype
            x = torch.randn(shape, device="cuda", dtype=wide,
                            generator=gen).mul_(0.02)
        else:  # lhs, bias, scatter_weights, activation_input, accumulate
            x = torch.randn(shape, device="cuda", dtype=torch.float32,
                            generator=gen)
        inputs.append(x.to(dtype).reshape(shape).contiguous())
    return inputs


def rel_err(out, ref, chunk: int = 1 << 26) -> float:
    """||out - ref|| / ||ref|| in float32, `chunk` elements at a time (a
    weight gradient's float32 copy alone can exceed the GPU's memory)."""
    import torch
    out, ref = out.reshape(-1), ref.reshape(-1)
    num = den = 0.0
    for start in range(0, ref.numel(), chunk):
        o = out[start:start + chunk].float()
        r = ref[start:start + chunk].float()
        num += float(torch.linalg.vector_norm(o - r)) ** 2
        den += float(torch.linalg.vector_norm(r)) ** 2
    return num ** 0.5 / max(den ** 0.5, 1e-30)


def median_ms(fn: Callable[[], None], iters: int, flush, warmup: int = 1,
              sleep_cycles: int = 200_000) -> float:
    """Median ms of fn() over `iters` CUDA-event timed runs after `warmup`
    untimed ones, flush() (L2 eviction) before each. A GPU sleep in front
    of each run covers the host-side launch cost. (bench/ times with it
    too.)"""
    import torch
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        flush()
        torch.cuda._sleep(sleep_cycles)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def tune_op(bundle, op: dict, rows: int, iters: int, flush, gen,
            target: str, min_gain: float, log=print,
            skew: float = 0.0) -> Optional[dict]:
    """Times every candidate of `op` at `rows` rows (routing skewed by
    `skew`); the cache entry of the fastest correct one (None when the
    inputs do not fit in memory)."""
    import torch

    candidates = op["candidates"]
    first = bundle.entry(candidates[0]["entry"])
    try:
        inputs = make_inputs(first, op["args"], op["k"], rows, gen, skew)
        reference = first(*inputs)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        log(f"  rows {rows}: skipped (out of GPU memory)")
        return None
    out = torch.empty_like(reference)
    results = []
    for candidate in candidates:
        entry = bundle.entry(candidate["entry"])
        entry(*inputs, out=out)
        err = rel_err(out, reference)
        if not err < CHECK_TOLERANCE:
            log(f"  rows {rows}: {candidate['tile']} rejected: output "
                f"differs from the default tile's (rel. error {err:.2e})")
            continue
        run = lambda: entry(*inputs, out=out, check_values=False)
        results.append((median_ms(run, iters, flush), candidate))
    default_ms = next(ms for ms, c in results if c.get("default"))
    best_ms, best = min(results, key=lambda r: r[0])
    log(f"  rows {rows:>7}: best {best['tile']} {best_ms:.4f} ms, default "
        f"{default_ms:.4f} ms ({default_ms / best_ms:.3f}x), "
        f"{len(results)} candidates")
    del inputs, reference, out
    entry = {"target": target, "key": op["key"],
             "max_rows": symbol_values(first.symbols, rows, op["k"])["M"],
             "tile": best["tile"], "ms": round(best_ms, 5),
             "default_ms": round(default_ms, 5)}
    return prefer_default(entry, candidates[0]["tile"], min_gain)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m moec.compiler.tune",
        description="Times the candidates of a `moec tune` bundle and writes "
                    "the fastest tiles to a tuning cache.")
    parser.add_argument("bundle", help="the bundle `moec tune` wrote")
    parser.add_argument("--manifest",
                        help="its manifest (default: BUNDLE.json)")
    parser.add_argument("--rows", default="4096,16384,65536",
                        help="row counts to tune at (the op's M; tokens "
                             "times k for gathered ops), comma-separated")
    parser.add_argument("--iters", type=int, default=10,
                        help="timed runs per candidate (median)")
    parser.add_argument("--only", default="",
                        help="tune only ops whose function name contains "
                             "this")
    parser.add_argument("-o", "--cache", required=True,
                        help="tuning cache to write (entries already there "
                             "for other ops or row counts are kept)")
    parser.add_argument("--min-gain", type=float, default=0.01,
                        help="keep the default tile unless the best is "
                             "this much faster (0.01: 1 %%)")
    parser.add_argument("--skew", type=float, default=0.0,
                        help="route unevenly: expert e's logit lowered by "
                             "SKEW * ln(1 + e) (0: uniform; 2 puts expert 0 "
                             "in nearly every token's top k). Weight "
                             "gradients that split their rows (row_splits) "
                             "gain most under skew")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        manifest = load_manifest(args.manifest or args.bundle + ".json")
        rows_list = parse_rows(args.rows)
        old_entries = load_cache(args.cache)
    except TuneError as error:
        print(f"moec.compiler.tune: error: {error}", file=sys.stderr)
        return 2
    if args.iters < 1:
        print("moec.compiler.tune: error: --iters must be >= 1",
              file=sys.stderr)
        return 2
    if not (0 <= args.skew < math.inf):
        print(f"moec.compiler.tune: error: --skew must be a finite number "
              f">= 0, got {args.skew}", file=sys.stderr)
        return 2

    import torch
    from ..runtime import load
    if not torch.cuda.is_available():
        print("moec.compiler.tune: error: no CUDA device", file=sys.stderr)
        return 2
    bundle = load(args.bundle)
    device = torch.cuda.get_device_name()
    flush_buffer = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    flush = lambda: flush_buffer.max()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)

    ops = [op for op in manifest["ops"] if args.only in op["function"]]
    print(f"tuning {len(ops)} ops x {len(rows_list)} row counts on {device} "
          f"({manifest['target']}, routing skew {args.skew:g})", flush=True)
    measured = []
    for i, op in enumerate(ops):
        print(f"[{i + 1}/{len(ops)}] {op['function']}: {op['key']} "
              f"({len(op['candidates'])} candidates)", flush=True)
        for rows in rows_list:
            entry = tune_op(bundle, op, rows, args.iters, flush, gen,
                            manifest["target"], args.min_gain,
                            log=lambda s: print(s, flush=True),
                            skew=args.skew)
            if entry:
                measured.append(entry)
        # Merge and write after every op: an interrupted run keeps its
        # results.
        write_cache(args.cache, merge_entries(old_entries, measured), device)
    gains = [e["default_ms"] / e["ms"] for e in measured]
    if gains:
        geomean = math.exp(sum(map(math.log, gains)) / len(gains))
        print(f"wrote {args.cache}: {len(measured)} entries, speedup over "
              f"the default tile: geomean {geomean:.3f}x, max "
              f"{max(gains):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
