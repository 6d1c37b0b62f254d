#!/usr/bin/env python3
"""Plots bench/training_kernels.py's JSON: moec's speed over
torch._grouped_mm (torch time / moec time) for each backward kernel, model
and token count, with issue 24's 1.1x target drawn in.

    python3 bench/plot_training_kernels.py bench/results/training-kernels-h200.json \
        bench/plots/training-kernels-h200.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()

TARGET = 1.1


def main():
    source, png = sys.argv[1], sys.argv[2]
    data = read_json(source)
    rows = data["rows"]
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    tokens = sorted({r["T"] for r in rows})
    fig, axes = plt.subplots(1, len(kernels), figsize=(4.5 * len(kernels), 4.5),
                             sharey=True)
    width = 0.8 / len(tokens)
    for ax, kernel in zip(axes, kernels):
        for i, t in enumerate(tokens):
            ratio = {r["model"]: r["ratio"] for r in rows
                     if r["kernel"] == kernel and r["T"] == t}
            ax.bar([x + (i - (len(tokens) - 1) / 2) * width
                    for x in range(len(models))],
                   [ratio.get(m, 0) for m in models], width, label=f"T={t}")
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.axhline(TARGET, color="red", linestyle="--", linewidth=0.8,
                   label=f"target {TARGET}x")
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models, rotation=30)
        ax.set_title(kernel)
    axes[0].set_ylabel("torch._grouped_mm time / moec time")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{data['device']}: backward grouped matmuls, bf16 "
                 f"(peak {data['peak_tflops']:.0f} TFLOP/s)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
