#!/usr/bin/env python3
"""Memory ceilings of the GPU for the bandwidth-bound kernels: how fast
torch's own kernels and plain Triton kernels (16-byte accesses, a block of
4096 int32 per program) read, write and copy large buffers.

    python3 bench/ceilings.py [--mib 1024] [--json out.json]

The Triton cases show what a kernel that only reads or only writes can
reach; moec's permute writes 8 bytes per byte it reads, its unpermute the
reverse. A Triton row scatter moves permute's mix: each 4 KiB row (a Qwen3
token) read once and written to 8 rows of a random permutation. Each case
is timed like bench/memory_bound.py (CUDA events, the L2 evicted by a
256 MB read before each run, median of --iters). Bytes are what the
kernel must move: read + written. A one-element add gives the time any
kernel pays whatever its size. Triton's copy is also timed as 2 - 8 copies
(400 MB at least) between as many buffer pairs in one CUDA graph, per copy:
the steady-state ceiling that memory_bound.py's graph column compares with.
"""

import argparse
import math
import sys

import torch

from common import (GRAPH_BYTES, graph_timed, make_flush, timed,
                    triton_cases, write_json)

GRAPH_SETS = 8    # buffer pairs of the graph-timed copy, at most


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024,
                        help="size of the buffer read or written")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    n = args.mib << 20
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    flush = make_flush("read")
    one = torch.zeros(1, device="cuda")
    cases = {
        # What timing adds to any kernel (launch, ramp-up, the events): the
        # floor under a short kernel's time.
        "torch add, 1 element": (lambda: one.add_(1), 0),
        "torch read (max)": (lambda: src.max(), n),
        "torch write (fill)": (lambda: dst.fill_(7), n),
        "torch copy": (lambda: dst.copy_(src), 2 * n),
    }
    copy, more = triton_cases(src, dst)
    cases.update(more)
    # The copy in steady state, timed like memory_bound.py's graph column:
    # copies between their own pairs of buffers in one graph. Triton's
    # kernel, not torch's copy_: captured, that becomes a memcpy node,
    # which the copy engines serve at 2.8 TB/s.
    count = max(2, min(GRAPH_SETS, math.ceil(GRAPH_BYTES / (2 * n))))
    pairs = [(torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda"),
              torch.empty_like(src)) for _ in range(count)] if copy else []
    rows = []
    for name, (fn, nbytes) in cases.items():
        ms = timed(fn, args.iters, flush)
        tbps = nbytes / ms / 1e9
        rows.append(dict(case=name, ms=ms, bytes=nbytes, tbps=tbps))
        bw = f"{tbps:5.2f} TB/s" if nbytes else ""
        print(f"{name:20s} {ms * 1e3:9.1f} us  {bw}", flush=True)
    if pairs:
        name = f"triton copy, graph of {count}"
        ms, why = graph_timed([lambda s=s, d=d: copy(s, d) for s, d in pairs],
                              args.iters, flush)
        if ms is None:
            raise RuntimeError(f"{name}: {why}")
        rows.append(dict(case=name, ms=ms, bytes=2 * n,
                         tbps=2 * n / ms / 1e9))
        print(f"{name:20s} {ms * 1e3:9.1f} us  {rows[-1]['tbps']:5.2f} TB/s "
              f"per copy", flush=True)
    if args.json:
        write_json(args.json, dict(command=" ".join(sys.argv),
                                   device=torch.cuda.get_device_name(),
                                   rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
