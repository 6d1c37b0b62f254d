#!/usr/bin/env python3
"""Plots bench/memory_bound.py's JSON: % of the H200 copy bandwidth per
kernel, moec against torch eager, one panel per model.

    python3 bench/plot_memory_bound.py bench/results/memory-bound-h200.json \
        bench/plots/memory-bound-h200.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()

# The targets (% of copy bandwidth, T >= 8192); None: no target (the backward
# of permute / unpermute is measured, not targeted).
TARGETS = {"permute": 90, "unpermute": 92, "permute grad": None,
           "unpermute grad": None, "quantize row": 85, "quantize col": 85,
           "dequantize fp8": 85, "dequantize nf4": 85, "swiglu": 85,
           "swiglu grad": 85}


def main(src, dst):
    rows = [r for r in read_json(src)["rows"] if r.get("bytes")]
    models = sorted({r["model"] for r in rows}, reverse=True)
    kernels = list(TARGETS)
    fig, axes = plt.subplots(len(models), 1, figsize=(14, 5.2 * len(models)))
    for ax, model in zip(axes, models):
        labels, ours, theirs, goals = [], [], [], []
        for kernel in kernels:
            for r in rows:
                if r["model"] == model and r["kernel"] == kernel:
                    labels.append(f"{kernel} T={r['T']}" if r["T"]
                                  else kernel)
                    ours.append(r["pct_copy"])
                    theirs.append(r["torch_pct_copy"])
                    # The targets hold from T = 8192 on (NF4 has no T).
                    goals.append(TARGETS[kernel]
                                 if not 0 < r["T"] < 8192 else None)
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], ours, 0.4, label="moec")
        ax.bar([i + 0.2 for i in x], theirs, 0.4, label="torch eager")
        marked = [(i, g) for i, g in zip(x, goals) if g is not None]
        ax.scatter([i for i, _ in marked], [g for _, g in marked],
                   marker="_", s=200, color="black", label="target",
                   zorder=3)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=7, rotation=60, ha="right")
        ax.set_ylabel("% of copy bandwidth (4.27 TB/s)")
        ax.set_ylim(0, 110)
        ax.set_title(f"{model}: effective bandwidth, H200")
        ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1, 1), ncol=3)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
