#!/usr/bin/env python3
"""Plots bench/fp8_kernels.py's JSON: TFLOP/s of moec's FP8 kernel, torch's
FP8 grouped matmul and moec's bf16 kernel per model and token count, one
panel per mode, with the dense FP8 peak of the same run and issue 59's
targets drawn in (80 % of it for the forward and input gradient, 70 % for
the weight gradient).

    python3 bench/plot_fp8_kernels.py bench/results/fp8-kernels-h200.json \
        [MORE.json ...] bench/plots/fp8-kernels-h200.png

Several JSON files (runs of some modes each) go into one figure, each
mode's panel with the peak of the run it came from.
"""
import sys

from common import pyplot, read_json

plt = pyplot()

SERIES = (("moec_fp8", "moec FP8"), ("torch_fp8", "torch._scaled_grouped_mm"),
          ("moec_bf16", "moec bf16"))
# Issue 59's share of the FP8 peak per mode.
TARGETS = {"weight_grad": 0.7}


def main():
    *sources, png = sys.argv[1:]
    runs = [read_json(source) for source in sources]
    rows = [dict(r, peak=data["peak_tflops"]) for data in runs
            for r in data["rows"]]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    cases = list(dict.fromkeys((r["model"], r["T"]) for r in rows))
    fig, axes = plt.subplots(len(modes), 1, figsize=(13, 4 * len(modes)),
                             sharex=True, squeeze=False)
    width = 0.8 / len(SERIES)
    for ax, mode in zip(axes[:, 0], modes):
        by_case = {(r["model"], r["T"]): r for r in rows if r["mode"] == mode}
        for i, (key, label) in enumerate(SERIES):
            ax.bar([x + (i - 1) * width for x in range(len(cases))],
                   [by_case[c]["tflops"][key] if c in by_case else 0
                    for c in cases], width, label=label)
        peak = next(r["peak"] for r in rows if r["mode"] == mode)
        ax.axhline(peak, color="gray", linewidth=0.8,
                   label=f"dense FP8 peak {peak:.0f}")
        target = TARGETS.get(mode, 0.8)
        ax.axhline(target * peak, color="red", linestyle="--", linewidth=0.8,
                   label=f"{target:.0%} of it")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(mode)
        ax.legend(fontsize=8, ncol=5)
    axes[-1, 0].set_xticks(range(len(cases)))
    axes[-1, 0].set_xticklabels([f"{m}\nT={t}" for m, t in cases], fontsize=8)
    fig.suptitle(f"{runs[0]['device']}: FP8 grouped matmuls (block scales) "
                 "against torch FP8 (rowwise) and moec bf16")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
