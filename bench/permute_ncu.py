#!/usr/bin/env python3
"""The kernels whose DRAM traffic memory-bound-h200.md compares under ncu:
moec's permute at Qwen3 T=8192 and 32768 (the routing's rows) and the
Triton row scatter of bench/ceilings.py (the same bytes as T=32768), three
launches each. Run it under ncu, e.g.

    ncu --clock-control none --kernel-name regex:"scatter_vec|scatter_kernel" \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active \\
        python3 bench/permute_ncu.py BUNDLE

BUNDLE is bench/kernels/memory_bound.mlir compiled for sm_90a.
"""

import argparse
import sys

import torch

import moec
from common import MODELS, positions_of, torch_route, triton_cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    args = parser.parse_args()
    bundle = moec.load(args.bundle)
    gen = torch.Generator(device="cuda").manual_seed(0)
    for T in (8192, 32768):
        m = MODELS["qwen3"]
        E, H, k = m["E"], m["H"], m["k"]
        R = T * k
        logits = torch.randn(T, E, device="cuda", generator=gen)
        w, _, slots, offsets = torch_route(logits, m, None)
        positions = positions_of(slots)
        x = torch.randn(T, H, device="cuda", generator=gen).to(torch.bfloat16)
        perm = bundle.entry("permute_qwen3")
        out = (torch.empty(R, H, dtype=torch.bfloat16, device="cuda"),
               torch.empty(R, device="cuda"))
        for _ in range(3):
            perm(x, slots, offsets, w, positions, out=out, check_values=False)
    src = torch.randint(0, 255, (1 << 30,), dtype=torch.uint8, device="cuda")
    _, cases = triton_cases(src, torch.empty_like(src))
    scatter = cases.get("triton scatter 1:8")
    if scatter:
        for _ in range(3):
            scatter[0]()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
