#!/usr/bin/env python3
"""Plots bench/training_step.py's JSON with FP8 rows (--fp8-bundle): the
layer's forward + backward time of moec bf16, moec FP8 (the weights
quantized in the step, and where the JSON has it, quantized once:
moec_fp8_cached), torch bf16 and torch's FP8 composition per (model, T),
and each step's peak memory.

    python3 bench/plot_fp8_training_step.py \
        bench/results/fp8-training-step-h200.json \
        bench/plots/fp8-training-step-h200.png
    python3 bench/plot_fp8_training_step.py \
        bench/results/fp8-lora-step-h200.json \
        bench/plots/fp8-lora-step-h200.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()

SERIES = (("moec", "moec bf16"), ("moec_fp8", "moec FP8 (moe-fp8-recipe)"),
          ("moec_fp8_cached", "moec FP8, weights quantized once"),
          ("torch", "torch bf16 (torch._grouped_mm)"),
          ("torch_fp8", "torch FP8 (rowwise, torch._scaled_grouped_mm)"))


def main():
    source, png = sys.argv[1], sys.argv[2]
    data = read_json(source)
    rows = [r for r in data["rows"] if "moec_fp8" in r]
    labels = [f"{r['model']}\nT={r['T']}" for r in rows]
    xs = range(len(rows))
    fig, (ax_ms, ax_gb) = plt.subplots(1, 2, figsize=(14, 5))
    series = [(k, label) for k, label in SERIES if any(k in r for r in rows)]
    width = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ms = [r.get(key, {}).get("ms", 0.0) for r in rows]
        gb = [r.get(key, {}).get("peak_gb", 0.0) for r in rows]
        ax_ms.bar([x + offset for x in xs], ms, width, label=label)
        ax_gb.bar([x + offset for x in xs], gb, width, label=label)
        low = min(r[k]["ms"] for r in rows for k, _ in SERIES
                  if "ms" in r.get(k, {}))
        for x, r in zip(xs, rows):
            if key in r and "ms" not in r[key]:  # out of memory
                ax_ms.text(x + offset, low, "OOM", rotation=90, ha="center",
                           va="bottom", fontsize=7)
                ax_gb.text(x + offset, 1, "OOM", rotation=90, ha="center",
                           va="bottom", fontsize=7)
    for x, r in zip(xs, rows):
        top = max(r[k]["ms"] for k, _ in SERIES if "ms" in r.get(k, {}))
        note = f"FP8 {r['fp8_vs_bf16']:.2f}x bf16"
        if "fp8_cached_vs_bf16" in r:
            note += f"\n(once: {r['fp8_cached_vs_bf16']:.2f}x)"
        if "fp8_vs_torch_fp8" in r:
            note += f"\n{r['fp8_vs_torch_fp8']:.1f}x torch FP8"
        ax_ms.text(x, top * 1.08, note, ha="center", fontsize=7)
    ax_ms.set_yscale("log")
    ax_ms.set_ylabel("ms per forward + backward (log)")
    ax_ms.set_xticks(list(xs), labels, fontsize=8)
    ax_ms.set_ylim(top=ax_ms.get_ylim()[1] * 2.5)
    ax_ms.legend(fontsize=7, loc="upper left")
    lora = [r["mode"] for r in rows if r["mode"] != "full"]
    ax_ms.set_title("MoE layer training step, " + (
        f"LoRA r = {lora[0][4:]} on a frozen FP8 base" if lora
        else "full fine-tuning"))
    ax_gb.set_ylabel("peak GB (torch's allocations + moec's scratch)")
    ax_gb.set_xticks(list(xs), labels, fontsize=8)
    ax_gb.set_title(data["device"])
    ax_gb.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
