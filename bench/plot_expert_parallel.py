#!/usr/bin/env python3
"""Plots bench/expert_parallel.py's JSON: per (model, T per rank), moec's
forward split into its steps next to torch's stages (stacked, slowest
rank's medians), and the time of the two exchanges against plain
all_to_all_single of the same bytes.

    python3 bench/plot_expert_parallel.py \\
        bench/results/expert-parallel-h100x2.json \\
        bench/plots/expert-parallel-h100x2.png
"""
import sys

from common import pyplot, read_json

plt = pyplot()

MOEC_STEPS = ("route", "plan", "send", "compute", "send_back", "weigh")
TORCH_STAGES = ("dispatch", "compute", "combine")


def main():
    source, png = sys.argv[1], sys.argv[2]
    data = read_json(source)
    rows = data["results"]
    labels = [f"{r['model']}\nT={r['T']}/rank" for r in rows]
    xs = list(range(len(rows)))
    piped = any(r.get("pipelined") for r in rows)
    fig, axes = plt.subplots(1, 3 if piped else 2,
                             figsize=(19 if piped else 13, 4.8))
    ax_ms, ax_a2a = axes[0], axes[1]
    width = 0.38
    colors = plt.get_cmap("tab10").colors

    def stacked(ax, offset, names, values, hatch, label_prefix, first):
        bottom = [0.0] * len(rows)
        for i, name in enumerate(names):
            heights = [v[name] for v in values]
            ax.bar([x + offset for x in xs], heights, width, bottom=bottom,
                   color=colors[(first + i) % len(colors)], hatch=hatch,
                   edgecolor="white",
                   label=f"{label_prefix} {name}")
            bottom = [b + h for b, h in zip(bottom, heights)]
        return bottom

    top = stacked(ax_ms, -width / 2, MOEC_STEPS,
                  [r["moec"]["steps"] for r in rows], "", "moec", 0)
    stacked(ax_ms, width / 2, TORCH_STAGES, [r["torch"] for r in rows], "//",
            "torch", len(MOEC_STEPS))
    for x, r, t in zip(xs, rows, top):
        ax_ms.text(x, max(t, sum(r["torch"].values())) * 1.03,
                   f"{r['ratio']:.2f}x", ha="center", fontsize=8)
    ax_ms.set_ylabel("ms per forward (stages summed)")
    ax_ms.set_xticks(xs, labels, fontsize=8)
    ax_ms.legend(fontsize=7, ncol=2)
    ax_ms.set_title(f"Expert-parallel MoE layer, {data['world']} GPUs "
                    f"({data['device']}), bf16")

    plain = [r["a2a"]["send"] + r["a2a"]["back"] for r in rows]
    exchanges = [r["moec"]["steps"]["send"] + r["moec"]["steps"]["send_back"]
                 for r in rows]
    stages = [r["moec"]["dispatch"] + r["moec"]["combine"] for r in rows]
    for i, (values, name) in enumerate((
            (plain, "plain all_to_all_single, same bytes (both ways)"),
            (exchanges, "moec's two exchanges (send + send_back)"),
            (stages, "moec dispatch + combine (route, plan, weigh too)"))):
        ax_a2a.bar([x + (i - 1) * 0.27 for x in xs], values, 0.27,
                   label=name, color=colors[i])
    ax_a2a.set_ylabel("ms")
    ax_a2a.set_xticks(xs, labels, fontsize=8)
    ax_a2a.legend(fontsize=7)
    ax_a2a.set_title("Exchanges against plain all-to-all")
    if piped:
        whole(axes[2], rows, xs, labels, colors,
              data.get("transport", "nccl"))
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def whole(ax, rows, xs, labels, colors, transport):
    """The whole layer timed in one piece: moec plain (over `transport`),
    moec's fastest pipelined variant (transport, SMs the matmuls fill,
    pieces), torch."""
    best = [min(r["pipelined"], key=lambda p: p["ms"]) for r in rows]
    bars = (([r["moec_layer_ms"] for r in rows],
             f"moec ({transport}, 132 SMs, 1 piece)"),
            ([b["ms"] for b in best], "moec, fastest pipelined variant"),
            ([r["torch_layer_ms"] for r in rows], "torch EP composition"))
    for i, (values, name) in enumerate(bars):
        ax.bar([x + (i - 1) * 0.27 for x in xs], values, 0.27, label=name,
               color=colors[i + 3])
    for x, r, b in zip(xs, rows, best):
        ax.text(x, r["torch_layer_ms"] * 1.03,
                f"{r['torch_layer_ms'] / b['ms']:.2f}x\n"
                f"({b.get('transport', 'nccl')},\n{b['sm_count']} SMs, "
                f"{b['chunks']})", ha="center", fontsize=6)
    ax.set_ylim(top=max(r["torch_layer_ms"] for r in rows) * 1.25)
    ax.set_ylabel("ms per forward (whole layer)")
    ax.set_xticks(xs, labels, fontsize=8)
    ax.legend(fontsize=7)
    ax.set_title("Pipelined: exchanges overlapping the experts")


if __name__ == "__main__":
    main()
