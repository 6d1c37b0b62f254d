#!/usr/bin/env python3
"""Plots bench/grouped_gemm.py's JSON and writes its results page: TFLOP/s
of moec and the baselines per shape, one panel per kernel, the measured
dense bf16 peak as a line; the page has the targets, the command, the peak
and every row.

    python3 bench/plot_grouped_gemm.py bench/results/grouped-gemm-h200.json \
        [bench/plots/grouped-gemm-h200.png [bench/results/grouped-gemm-h200.md]]
"""
import os
import sys

from common import pyplot, read_json

plt = pyplot()

PNG = "bench/plots/grouped-gemm-h200.png"
MD = "bench/results/grouped-gemm-h200.md"
LABELS = {"moec": "moec",
          "grouped_mm": "torch._grouped_mm (+ gather / silu·mul)",
          "loop_graph": "per-expert cuBLAS, CUDA graph",
          "loop_eager": "per-expert cuBLAS, eager",
          "cublas": "cuBLAS + eager silu·mul",
          "torch": "torch composition"}
PANELS = [("gather", "gather + gate_up matmul [T·k, 2I]"),
          ("gate_up_swiglu", "gather + gate_up matmul + SwiGLU [T·k, I]"),
          ("down", "down matmul [T·k, H]"),
          ("other", "dense SwiGLU MLP (M 8192, d 4096) and Qwen3 layer")]
# (kernel, baseline, ratio, rows it applies to, what it says)
TARGETS = [
    ("gather", "grouped_mm", 1.10, lambda r: r["T"] >= 2048,
     "gather + gate_up ≥ 1.1× torch._grouped_mm + gather, T ≥ 2048"),
    ("gate_up_swiglu", "grouped_mm", 1.15, lambda r: r["T"] >= 2048,
     "gate_up + SwiGLU ≥ 1.15× torch._grouped_mm + gather + silu·mul, "
     "T ≥ 2048"),
    ("dense_swiglu", "cublas", 1.10, lambda r: True,
     "dense SwiGLU ≥ 1.1× cuBLAS + eager silu·mul"),
    # The issue states the layer target at T = 8192; other T are shown.
    ("layer", "torch", 2.5, lambda r: r["T"] == 8192,
     "Qwen3 layer ≥ 2.5× the torch composition, T = 8192"),
]
PEAK_TARGET = 70  # % of the measured peak, Mixtral, T >= 2048


def bar_label(r):
    if r["kernel"] == "dense_swiglu":
        return f"dense\nM={r['T']}"
    if r["kernel"] == "layer":
        return f"layer\nT={r['T']}"
    return f"{r['model']}\nT={r['T']}"


def bar_series(sel):
    """[(label, TFLOP/s per row or None)]: moec, then each baseline; rows
    with a single baseline of their own (dense SwiGLU, the layer) share
    one "baseline" series."""
    names = []
    for r in sel:
        names += [n for n in r["tflops"] if n not in names]
    if all(len(r["tflops"]) == 2 for r in sel) and len(names) > 2:
        labels = "; ".join(LABELS.get(n, n) for n in names[1:])
        other = [next(v for n, v in r["tflops"].items() if n != "moec")
                 for r in sel]
        return [("moec", [r["tflops"]["moec"] for r in sel]),
                (f"baseline ({labels})", other)]
    return [(LABELS.get(n, n), [r["tflops"].get(n) for r in sel])
            for n in names]


def plot(data, dst):
    rows = data["rows"]
    panels = []
    for kernel, title in PANELS:
        if kernel == "other":
            sel = [r for r in rows if r["kernel"] in ("dense_swiglu", "layer")]
        else:
            sel = [r for r in rows if r["kernel"] == kernel]
        if sel:
            panels.append((title, sel))
    fig, axes = plt.subplots(len(panels), 1,
                             figsize=(13, 4.2 * len(panels)), squeeze=False)
    peak = data["peak_tflops"]
    for ax, (title, sel) in zip(axes[:, 0], panels):
        series = bar_series(sel)
        width = 0.8 / len(series)
        top = peak
        for j, (label, values) in enumerate(series):
            xs = [i + (j - (len(series) - 1) / 2) * width
                  for i, v in enumerate(values) if v is not None]
            ys = [v for v in values if v is not None]
            ax.bar(xs, ys, width, label=label)
            top = max([top] + ys)
        ax.axhline(peak, color="black", linestyle="--", linewidth=1,
                   label=f"measured dense bf16 peak ({peak:.0f} TFLOP/s)")
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([bar_label(r) for r in sel], fontsize=6)
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(0, top * 1.35)  # room for the legend
        ax.set_title(f"{title}, {data['device']}")
        ax.legend(fontsize=7, loc="upper left", ncol=3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    fig.savefig(dst, dpi=110)


def target_lines(rows):
    out = ["| target | rows | moec vs baseline (worst – best) | met |",
           "|--------|------|------------------:|-----|"]
    for kernel, base, goal, applies, text in TARGETS:
        sel = [r for r in rows if r["kernel"] == kernel and applies(r)
               and base in r["ratio"]]
        if not sel:
            out.append(f"| {text} | none measured | - | - |")
            continue
        ratios = [r["ratio"][base] for r in sel]
        worst = min(sel, key=lambda r: r["ratio"][base])
        where = (f"M={worst['T']}" if kernel == "dense_swiglu" else
                 f"{worst['model']} T={worst['T']}")
        met = ("yes" if min(ratios) >= goal else
               f"no: {where} at {worst['ratio'][base]:.2f}×")
        out.append(f"| {text} | {len(sel)} | {min(ratios):.2f}× – "
                   f"{max(ratios):.2f}× | {met} |")
    sel = [r for r in rows if r["model"] == "mixtral" and r["T"] >= 2048]
    text = f"≥ {PEAK_TARGET} % of the measured peak at Mixtral, T ≥ 2048"
    if sel:
        pcts = [r["pct_peak"]["moec"] for r in sel]
        worst = min(sel, key=lambda r: r["pct_peak"]["moec"])
        met = ("yes" if min(pcts) >= PEAK_TARGET else
               f"no: {worst['kernel']} T={worst['T']} at "
               f"{worst['pct_peak']['moec']:.1f} %")
        out.append(f"| {text} | {len(sel)} | {min(pcts):.1f} % – "
                   f"{max(pcts):.1f} % | {met} |")
    else:
        out.append(f"| {text} | none measured | - | - |")
    return out


def table_lines(rows):
    """One table for the grouped kernels (same baselines in every row),
    one for the rest (one baseline each)."""
    grouped = [r for r in rows if r["kernel"] not in ("dense_swiglu", "layer")]
    rest = [r for r in rows if r["kernel"] in ("dense_swiglu", "layer")]
    out = []
    if grouped:
        names = []
        for r in grouped:
            names += [n for n in r["ms"] if n != "moec" and n not in names]
        head = ("| model | T | kernel | moec ms | TFLOP/s | % peak | " +
                " | ".join(f"{n} ms | ×" for n in names) + " | err |")
        out += [head, "|---|--:|---|" + "--:|" * (head.count("|") - 5) +
                "--:|"]
        for r in grouped:
            cells = moec_cells(r)
            for n in names:
                cells += ([f"{r['ms'][n]:.3f}", f"{r['ratio'][n]:.2f}"]
                          if n in r["ms"] else ["-", "-"])
            out.append("| " + " | ".join(cells + [err_cell(r)]) + " |")
    if rest:
        out += ["", "| model | T | kernel | moec ms | TFLOP/s | % peak | "
                "baseline | baseline ms | × | err |",
                "|---|--:|---|--:|--:|--:|---|--:|--:|--:|"]
        for r in rest:
            for n, ratio in r["ratio"].items():
                cells = moec_cells(r) + [n, f"{r['ms'][n]:.3f}",
                                         f"{ratio:.2f}"]
                out.append("| " + " | ".join(cells + [err_cell(r)]) + " |")
    return out


def moec_cells(r):
    return [r["model"], str(r["T"]), r["kernel"], f"{r['ms']['moec']:.3f}",
            f"{r['tflops']['moec']:.1f}", f"{r['pct_peak']['moec']:.1f}"]


def err_cell(r):
    err = f"{r['err']['moec']:.1e}"
    if "near_ties" in r:
        err += (f" ({r['near_ties']} near-tie tokens out; all "
                f"{r['err']['moec_all_tokens']:.1e})")
    return err


def write_page(data, src, png, dst):
    rows = data["rows"]
    rel_png = os.path.relpath(png, os.path.dirname(dst) or ".")
    lines = [
        "# Grouped matmul (GEMM) kernels on the H200",
        "",
        "moec's grouped matmuls (bench/kernels/grouped_gemm.mlir, bf16 in "
        "and out, f32 accumulation, weights in the nn.Linear layout [E, N, K]) "
        f"against torch {data.get('torch', '')} baselines, same inputs, same "
        f"run, on one {data['device']}. Medians of {data.get('iters', 20)} "
        "runs, CUDA events, the L2 evicted by a 256 MB read (clean lines) "
        "before each run and a GPU sleep in front of it so that host launch "
        "cost is hidden (~0.5 ms of it). "
        "TFLOP/s count 2·R·K·N per matmul (SwiGLU not counted; the layer "
        "counts router, gate_up and down). × is a baseline's time over "
        "moec's (> 1: moec faster). `err` is ‖moec − ref‖/‖ref‖ in float32, "
        "ref the per-expert cuBLAS loop (cuBLAS for dense SwiGLU, the torch "
        "composition for the layer, leaving out near-tie routing tokens).",
        "",
        "Baselines: `grouped_mm` = torch._grouped_mm with mat_b the "
        "transposed [E, N, K] weights, after x.index_select (gather) and "
        "followed by eager silu·mul (gate_up_swiglu); `loop_graph` = one "
        "torch.mm per non-empty expert (plus the same gather / silu·mul) "
        "replayed from a CUDA graph; `loop_eager` = the same loop launched "
        "eagerly (host launch overhead included); `cublas` = torch.mm, eager "
        "silu·mul, torch.mm; `torch` = the Qwen3 layer composed in torch "
        "(router logits by " + str(data.get("layer_router")) + ").",
        "",
        f"Measured dense bf16 peak: **{data['peak_tflops']:.0f} TFLOP/s** "
        f"(torch.mm {'x'.join(map(str, data.get('peak_shape', [8192] * 3)))}"
        f", {data['peak_ms']:.3f} ms); % peak is against this.",
        "",
        "Commands:",
        "",
        "```",
        "# here (MLIR):",
        "build/bin/moec compile bench/kernels/grouped_gemm.mlir -o "
        ".device/grouped_gemm.moecb --target sm_90a",
        "build/bin/moec compile examples/qwen3_moe_layer.mlir -o "
        ".device/qwen3.moecb --target sm_90a",
        "# on the H200 (runtime-only build, no MLIR):",
        "cmake -G Ninja -S . -B /tmp/rt -DMOEC_RUNTIME_ONLY=ON "
        "-DMOEC_BUILD_TESTS=OFF && ninja -C /tmp/rt moec-python",
        f"PYTHONPATH=/tmp/rt/python_packages python3 {data['command']}",
        "# plot and this page (here):",
        f"python3 bench/plot_grouped_gemm.py {src}",
        "```",
        "",
        "## Against the targets",
        "",
    ]
    lines += target_lines(rows)
    lines += ["", f"![TFLOP/s]({rel_png})", "", "## All rows", ""]
    lines += table_lines(rows)
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    with open(dst, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(src, png=PNG, dst=MD):
    data = read_json(src)
    plot(data, png)
    write_page(data, src, png, dst)
    print(f"wrote {png} and {dst}")


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
