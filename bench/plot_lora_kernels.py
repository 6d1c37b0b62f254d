#!/usr/bin/env python3
"""Plots bench/lora_kernels.py's JSON: moec's speed over the torch._grouped_mm
composition (torch time / moec time) for each LoRA kernel kind, model,
projection and rank, with the targets of issue 24 drawn in.

    python3 bench/plot_lora_kernels.py bench/results/lora-kernels-h200.json \
        bench/plots/lora-kernels-h200.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()

TARGETS = {"forward": 1.5, "dx": 1.5, "grad": 2.0}


def panel(ax, rows, kind, tokens):
    """One kind at one token count: a bar per case and rank."""
    cases = list(dict.fromkeys((r["model"], r["projection"]) for r in rows))
    ranks = sorted({r["r"] for r in rows})
    width = 0.8 / len(ranks)
    for i, rank in enumerate(ranks):
        ratio = {(r["model"], r["projection"]): r["ratio"]
                 for r in rows if r["r"] == rank}
        ax.bar([x + (i - (len(ranks) - 1) / 2) * width
                for x in range(len(cases))],
               [ratio.get(c, 0.0) for c in cases], width,
               label=f"r = {rank}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(TARGETS[kind], color="gray", linestyle="--", linewidth=1)
    ax.text(len(cases) - 0.5, TARGETS[kind] * 1.03,
            f"target {TARGETS[kind]}x", ha="right", fontsize=8)
    ax.set_xticks(range(len(cases)), [f"{m}\n{p}" for m, p in cases],
                  fontsize=7)
    ax.set_title(f"LoRA {kind}, T = {tokens}")
    ax.legend(fontsize=8)


def main():
    source, png = sys.argv[1], sys.argv[2]
    data = read_json(source)
    # One row of panels per token count the JSON holds.
    all_rows = data["rows"]
    token_counts = sorted({r["T"] for r in all_rows})
    kinds = [k for k in TARGETS if any(r["kind"] == k for r in all_rows)]
    fig, axes = plt.subplots(len(token_counts), len(kinds),
                             figsize=(5 * len(kinds), 4.5 * len(token_counts)),
                             sharey=True, squeeze=False)
    for axes_row, tokens in zip(axes, token_counts):
        for ax, kind in zip(axes_row, kinds):
            rows = [r for r in all_rows
                    if r["kind"] == kind and r["T"] == tokens]
            panel(ax, rows, kind, tokens)
        axes_row[0].set_ylabel("torch composition time / moec time")
    fig.suptitle(f"{data['device']}, bf16", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
