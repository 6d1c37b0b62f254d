#!/usr/bin/env python3
"""Permute's scatter with three kinds of destination rows, same kernel, same
call: the routing's positions, identity positions (token t's k copies to
the adjacent rows t*k .. t*k+k-1) and a random permutation of the rows; a
torch fill of the rows for reference. Separates what the access pattern
costs from what the kernel costs.

    python3 bench/permute_destinations.py BUNDLE

BUNDLE is bench/kernels/memory_bound.mlir compiled for sm_90a (its
permute_* functions take the positions as an argument). Timing and byte
counts as in bench/memory_bound.py.
"""

import argparse
import sys

import torch

import moec
from common import (COPY_TBPS, MODELS, make_flush, positions_of, timed,
                    torch_route)

SHAPES = (("qwen3", 8192), ("qwen3", 32768), ("dsv3", 8192))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    bundle = moec.load(args.bundle)
    flush = make_flush("read")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for key, T in SHAPES:
        m = MODELS[key]
        E, H, k = m["E"], m["H"], m["k"]
        R = T * k
        logits = torch.randn(T, E, device="cuda", generator=gen)
        bias = (0.1 * torch.randn(E, device="cuda", generator=gen)
                if key == "dsv3" else None)
        w, _, slots, offsets = torch_route(logits, m, bias)
        x = torch.randn(T, H, device="cuda", generator=gen).to(torch.bfloat16)
        perm = bundle.entry(f"permute_{key}")
        out = (torch.empty(R, H, dtype=torch.bfloat16, device="cuda"),
               torch.empty(R, device="cuda"))
        destinations = {
            "routing": positions_of(slots),
            "identity": torch.arange(R, dtype=slots.dtype, device="cuda"),
            "random": torch.randperm(R, device="cuda",
                                     generator=gen).to(slots.dtype),
        }
        nbytes = T * H * 2 + R * 4 * 3 + R * H * 2 + E * 4
        for name, pos in destinations.items():
            ms = timed(lambda: perm(x, slots, offsets, w, pos, out=out,
                                    check_values=False), args.iters, flush)
            pct = 100 * nbytes / ms / 1e9 / COPY_TBPS
            print(f"{key} T={T} {name:9s} {ms * 1e3:8.1f} us {pct:6.1f} % "
                  f"copy", flush=True)
        ms = timed(lambda: out[0].fill_(1), args.iters, flush)
        pct = 100 * R * H * 2 / ms / 1e9 / COPY_TBPS
        print(f"{key} T={T} fill rows {ms * 1e3:8.1f} us {pct:6.1f} % copy",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
