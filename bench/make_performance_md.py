#!/usr/bin/env python3
"""Writes bench/results/README.md (the index of the results) and
docs/performance.md (the numbers, by topic) from bench/results/index.json.

    python3 bench/make_performance_md.py           # rewrite both
    python3 bench/make_performance_md.py --check   # exit 1 if either is stale

Headlines of the entries that name `extract` are computed here from their
JSON files, so they cannot drift from the data; the others are quoted from
their page. python/tests/test_bench_scripts.py runs --check.
"""

import argparse
import pathlib
import sys
from collections import defaultdict

from common import MODELS, read_json

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
INDEX = RESULTS / "index.json"
README = RESULTS / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
PLOT = "../bench/plots/training-step-h200.png"


def span(values, fmt="{:.2f}", unit="x"):
    """"a-b<unit>" of the values' range ("a<unit>" when they agree)."""
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def name(key):
    return MODELS[key]["name"] if key in MODELS else key


# ---------------------------------------------------------------------------
# Headlines computed from the results' JSON
# ---------------------------------------------------------------------------

def grouped_gemm(data):
    rows = data[0]["rows"]
    ratio = defaultdict(list)
    for r in rows:
        for baseline, v in r["ratio"].items():
            ratio[r["kernel"], baseline].append(v)
    peak = max(r["pct_peak"]["moec"] for r in rows)
    return (f"gather + gate_up {span(ratio['gather', 'grouped_mm'])}, "
            f"gate_up + SwiGLU {span(ratio['gate_up_swiglu', 'grouped_mm'])}"
            f", down {span(ratio['down', 'grouped_mm'])} torch._grouped_mm "
            f"(+ gather); dense SwiGLU "
            f"{span(ratio['dense_swiglu', 'cublas'])} cuBLAS; the whole "
            f"Qwen3-30B-A3B layer {span(ratio['layer', 'torch'])} torch; up "
            f"to {peak:.0f} % of the dense peak "
            f"({data[0]['peak_tflops']:.0f} TFLOP/s)")


def memory_bound(data):
    by_kernel = defaultdict(list)
    for r in data[0]["rows"]:
        if r["T"] >= 8192 or r["T"] == 0:  # 0: NF4, one size per model
            by_kernel[r["kernel"]].append(r)
    parts = []
    for kernel, rows in by_kernel.items():
        speed = span([r["speedup"] for r in rows], "{:.1f}")
        if rows[0].get("pct_copy") is None:
            parts.append(f"{kernel} {speed} torch")
            continue
        pct = span([r["pct_copy"] for r in rows], "{:.0f}", " %")
        parts.append(f"{kernel} {pct} of copy ({speed} torch)")
    return "T >= 8192: " + "; ".join(parts)


def training_kernels(data):
    ratio = defaultdict(list)
    for r in data[0]["rows"]:
        ratio[r["kernel"][:2]].append(r["ratio"])
    return (f"dX {span(ratio['dx'])}, dW {span(ratio['dw'])} "
            f"torch._grouped_mm (five models, T = 2048-32768; dense peak "
            f"{data[0]['peak_tflops']:.0f} TFLOP/s)")


def lora_kernels(data):
    ratio = defaultdict(list)
    for r in data[0]["rows"]:
        ratio[r["kind"], r["r"]].append(r["ratio"])
    names = {"forward": "forward", "dx": "dX", "grad": "dA + dB"}
    parts = []
    for rank in sorted({r for _, r in ratio}):
        parts.append(f"r = {rank}: " + ", ".join(
            f"{names[k]} {span(ratio[k, rank])}" for k in names
            if (k, rank) in ratio))
    return "; ".join(parts) + " the torch._grouped_mm composition"


def small_wgrad(data):
    ratio = defaultdict(list)
    for r in data[0]:
        ratio[r["kernel"]].append(r["ratio"])
    return ", ".join(f"{k} {span(v)}" for k, v in ratio.items()) + \
        " torch (uniform and skewed routing)"


def training_step(data, mode):
    parts = []
    for r in data[0]["rows"]:
        if r.get("mode", "full") != mode or "moec" not in r:
            continue
        if "ratio" not in r:
            parts.append(f"{name(r['model'])} T={r['T']}: torch out of "
                         f"memory")
            continue
        parts.append(f"{name(r['model'])} T={r['T']} {r['ratio']:.2f}x "
                     f"({r['moec']['peak_gb']:.1f} GB, torch "
                     f"{r['torch']['peak_gb']:.1f} GB)")
    return "; ".join(parts) + " torch autograd"


def main_grad_step(data):
    ratio = defaultdict(list)
    for r in data[0]["rows"]:
        if isinstance(r.get("fused"), float):
            ratio[r["model"]].append(r["moec_add"] / r["fused"])
    return "fused " + ", ".join(f"{name(k)} {span(v)}"
                                for k, v in ratio.items()) + \
        " moec's backward + main.add_(grad)"


def fp8_kernels(data):
    rows, peak = data[0]["rows"], data[0]["peak_tflops"]

    def of(modes, model=None, min_t=0):
        return [r for r in rows if r["mode"] in modes and r["T"] >= min_t
                and (model is None or r["model"] == model)]

    def summary(modes, target):
        mine, big = of(modes), of(modes, "mixtral", 8192)
        return (f"{span([r['vs_moec_bf16'] for r in mine])} moec's bf16 "
                f"kernel and {span([r['vs_torch_fp8'] for r in mine])} "
                f"torch._scaled_grouped_mm, "
                f"{span([r['tflops']['moec_fp8'] for r in big], '{:.0f}', '')}"
                f" TFLOP/s = "
                f"{span([r['pct_peak']['moec_fp8'] for r in big], '{:.0f}', '')}"
                f" % of the {peak:,.0f} TFLOP/s FP8 peak at Mixtral T >= 8192 "
                f"(target {target} %)")

    err = [r["err"]["moec_fp8"] for r in rows]
    torch_err = [r["err"]["torch_fp8"] for r in rows]
    return (f"forward and input gradient "
            f"{summary(('forward', 'input_grad'), 80)}; weight gradient "
            f"{summary(('weight_grad',), 70)}; error "
            f"{span(err, '{:.2e}', '')} against torch's "
            f"{span(torch_err, '{:.2e}', '')}")


def fp8_training_step(data):
    """moec FP8's step against moec bf16 and torch's FP8 composition, per
    model and T; gradient error and peak memory next to bf16's."""
    rows = [r for r in data[0]["rows"] if "moec_fp8" in r]
    parts = []
    for r in rows:
        vs = (f", {r['fp8_vs_torch_fp8']:.1f}x torch FP8"
              if "fp8_vs_torch_fp8" in r else ", torch FP8 out of memory")
        once = (f" ({r['fp8_cached_vs_bf16']:.2f}x with the weights "
                f"quantized once)" if "fp8_cached_vs_bf16" in r else "")
        parts.append(f"{name(r['model'])} T={r['T']} "
                     f"{r['fp8_vs_bf16']:.2f}x bf16{once}{vs}")
    err = [v for r in rows if "err_fp8" in r for v in r["err_fp8"].values()]
    bf16_err = [v for r in rows if "err_fp8" in r
                for v in r["err"].values()]
    memory = [r["moec_fp8"]["peak_gb"] / r["moec"]["peak_gb"] for r in rows]
    return (f"FP8 step {'; '.join(parts)}; gradients "
            f"{span(err, '{:.1e}', '')} from float64 (bf16 "
            f"{span(bf16_err, '{:.1e}', '')}); peak memory "
            f"{span(memory)} bf16's")


EXTRACT = {
    "fp8_kernels": fp8_kernels,
    "fp8_training_step": fp8_training_step,
    "grouped_gemm": grouped_gemm,
    "memory_bound": memory_bound,
    "training_kernels": training_kernels,
    "lora_kernels": lora_kernels,
    "small_wgrad": small_wgrad,
    "training_step_full": lambda data: training_step(data, "full"),
    "training_step_lora": lambda data: training_step(data, "lora16"),
    "main_grad_step": main_grad_step,
}


def headline(entry):
    """The entry's headline (computed where it names `extract`), then its
    `note` (what later changed, say)."""
    if "extract" in entry:
        data = [read_json(RESULTS / f) for f in entry["data"]
                if f.endswith(".json")]
        text = EXTRACT[entry["extract"]](data)
    else:
        text = entry["headline"]
    return text + (f" ({entry['note']})" if "note" in entry else "")


# ---------------------------------------------------------------------------
# The two pages
# ---------------------------------------------------------------------------

def title(path):
    """A results page's first heading (or its first line)."""
    for line in path.read_text(errors="replace").splitlines():
        if line.strip():
            return line.lstrip("# ").strip()
    return path.name


def by_topic(entries):
    topics = defaultdict(list)
    for e in entries:
        topics[e["topic"]].append(e)
    return topics


def results_readme(entries):
    lines = [
        "# bench/results: what each result measures",
        "",
        "Generated by `python3 bench/make_performance_md.py` from "
        "[index.json](index.json) (edit that, then run the script; a test "
        "checks this page is current). Every figure is from one run that "
        "timed moec and its baselines on the same inputs, on the GPU "
        "named; the commands are the bench scripts' (bench/*.py, whose "
        "docstrings say how the bundles were compiled).",
        "",
        "## Current results",
    ]
    for topic, group in by_topic(entries).items():
        lines += ["", f"### {topic}", ""]
        for e in group:
            data = ", ".join(f"[{f}]({f})" for f in e["data"])
            lines += [f"- [{e['page']}]({e['page']}): {e['what']}.",
                      f"  {e['gpu']}, {e['date']}, `bench/{e['bench']}`"
                      if not e["bench"].startswith(("moec", "make", "python/",
                                                    "examples/"))
                      else f"  {e['gpu']}, {e['date']}, `{e['bench']}`",
                      f"  (data: {data})." if data else "  (data: the page).",
                      f"  Command: `{e['command']}`.",
                      f"  Headline: {headline(e)}."]
    indexed = {e["page"] for e in entries} | {
        f for e in entries for f in e["data"]} | {"README.md", "index.json"}
    others = sorted(p for p in RESULTS.iterdir() if p.name not in indexed)
    lines += ["", "## Earlier steps that docs/ links, and their data", "",
              "Investigations and intermediate runs, kept because a page of "
              "docs/ or one of the results above links them (the rest of the "
              "history is in git):", ""]
    for p in others:
        what = title(p) if p.suffix == ".md" else "raw data"
        lines.append(f"- [{p.name}]({p.name}): {what}")
    return "\n".join(lines) + "\n"


def performance_md(entries, not_done):
    lines = [
        "# Performance",
        "",
        "<!-- Generated by bench/make_performance_md.py from "
        "bench/results/index.json: do not edit by hand. -->",
        "",
        "What moec's kernels and layers measure against the baselines users "
        "run today (torch eager and autograd, torch._grouped_mm, cuBLAS), "
        "each timed in the same run on the same inputs (CUDA events, the L2 "
        "evicted before each run, medians). \"Nx\" is the baseline's time "
        "over moec's: above 1, moec is faster. How each was measured, when "
        "and with which command: "
        "[bench/results/README.md](../bench/results/README.md).",
        "",
        f"![the training step, moec against torch autograd]({PLOT})",
    ]
    for topic, group in by_topic(entries).items():
        lines += ["", f"## {topic}", ""]
        for e in group:
            lines.append(f"- **{e['what']}** "
                         f"({e['gpu']}): {headline(e)}. "
                         f"[{e['page']}](../bench/results/{e['page']})")
    lines += ["", "## Not done yet", "",
              "Targets still missed (the pages above say, kernel by kernel, "
              "where and why; see `issues`):", ""]
    lines += [f"- {item}." for item in not_done]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a page differs from what the index "
                             "gives (rewrites nothing)")
    args = parser.parse_args()
    index = read_json(INDEX)
    entries = index["results"]
    missing = sorted(f for e in entries for f in [e["page"], *e["data"]]
                     if not (RESULTS / f).exists())
    if missing:
        sys.exit(f"index.json names files that are not there: {missing}")
    pages = {README: results_readme(entries),
             PERFORMANCE: performance_md(entries, index["not_done"])}
    stale = [p for p, text in pages.items()
             if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: run python3 "
                  f"bench/make_performance_md.py")
        return 1 if stale else 0
    for p in stale:
        p.write_text(pages[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
