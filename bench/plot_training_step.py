#!/usr/bin/env python3
"""Plots bench/training_step.py's JSON: the layer's forward + backward time
of moec and torch autograd per (model, T), and each as % of the dense bf16
peak measured in the same run.

    python3 bench/plot_training_step.py bench/results/training-step-h100.json \
        bench/plots/training-step-h100.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()


def main():
    source, png = sys.argv[1], sys.argv[2]
    data = read_json(source)
    rows = [r for r in data["rows"] if "moec" in r]
    labels = [f"{r['model']}\nT={r['T']}\n{r.get('mode', 'full')}"
              for r in rows]
    xs = range(len(rows))
    fig, (ax_ms, ax_pct) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.38
    moec_ms = [r["moec"]["ms"] for r in rows]
    torch_ms = [r["torch"].get("ms", 0.0) for r in rows]
    ax_ms.bar([x - width / 2 for x in xs], moec_ms, width, label="moec")
    ax_ms.bar([x + width / 2 for x in xs], torch_ms, width,
              label="torch autograd (torch._grouped_mm)")
    for x, r in zip(xs, rows):
        note = (f"{r['ratio']:.2f}x" if "ratio" in r else "torch OOM")
        ax_ms.text(x, max(r["moec"]["ms"], r["torch"].get("ms", 0.0)) * 1.02,
                   note, ha="center", fontsize=8)
    ax_ms.set_yscale("log")
    ax_ms.set_ylabel("ms per forward + backward (log)")
    ax_ms.set_xticks(list(xs), labels, fontsize=8)
    ax_ms.legend(fontsize=8)
    ax_ms.set_title("MoE layer training step, bf16")
    ax_pct.bar([x - width / 2 for x in xs],
               [r["moec"]["pct_peak"] for r in rows], width, label="moec")
    ax_pct.bar([x + width / 2 for x in xs],
               [r["torch"].get("pct_peak", 0.0) for r in rows], width,
               label="torch autograd")
    ax_pct.axhline(65, color="gray", linestyle="--", linewidth=1)
    ax_pct.text(len(rows) - 0.5, 66, "65 % target", ha="right", fontsize=8)
    ax_pct.set_ylabel(f"% of the dense peak ({data['peak_tflops']:.0f} "
                      f"TFLOP/s)")
    ax_pct.set_xticks(list(xs), labels, fontsize=8)
    ax_pct.set_title(data["device"])
    ax_pct.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
