"""Sustained grouped matmuls at the Mixtral-8x7B shape with the SM clock and
board power sampled: where the bench's speed goes under the power cap.

Runs each kernel back to back for a few seconds (moec entries of one or more
bundles, torch._grouped_mm + gather, and a cuBLAS 8192^3 matmul), samples
`nvidia-smi` every 50 ms meanwhile, then times it the bench's way (median,
L2 evicted, sleep in front). Prints per kernel: sustained ms and TFLOP/s,
bench ms and TFLOP/s, median SM clock, median power, TFLOP/s per GHz and
energy per FLOP.

    python3 bench/power_probe.py BUNDLE [BUNDLE ...] [--tokens 8192]
"""
import argparse
import datetime
import statistics
import subprocess
import sys
import time

import torch

import moec
import common
from common import make_flush, timed


def sustained_ms(fn, seconds):
    """Mean ms per call of fn() run back to back for `seconds`."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    calls, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(5):
            fn()
        calls += 5
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def samples(path):
    """(unix time, SM MHz, watts) rows of the nvidia-smi log."""
    rows = []
    for line in open(path):
        p = [q.strip() for q in line.split(",")]
        try:
            ts = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f")
            rows.append((ts.timestamp(), float(p[1]), float(p[2])))
        except (ValueError, IndexError):
            pass  # a header or a torn line
    return rows


def median(values):
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+",
                        help="bundles of bench/kernels/grouped_gemm.mlir")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--log", default="/tmp/power_probe_smi.csv")
    args = parser.parse_args()

    gen = torch.Generator(device="cuda").manual_seed(0)
    m = common.MODELS["mixtral"]
    E, H, I, k, T = m["E"], m["H"], m["I"], m["k"], args.tokens
    w_gate_up = common.random_weights((E, 2 * I, H), gen)
    w_down = common.random_weights((E, H, I), gen)
    x = torch.randn(T, H, device="cuda", dtype=common.BF16, generator=gen)
    slots, offsets = common.random_routing(T, E, k, gen)
    groups = common.host_groups(offsets)
    h = torch.randn(T * k, I, device="cuda", dtype=common.BF16, generator=gen)
    a = torch.randn(8192, 8192, device="cuda", dtype=common.BF16, generator=gen)
    b = torch.randn(8192, 8192, device="cuda", dtype=common.BF16, generator=gen)

    kernels = []
    for i, path in enumerate(args.bundles):
        bundle = moec.load(path)
        gather = common.gathered_case(bundle, "mixtral", m, x, slots, offsets,
                                  groups, w_gate_up, False)
        down = common.down_case(bundle, "mixtral", m, h, offsets, groups, w_down)
        if i == 0:
            kernels += [("grouped_mm gather", gather.baselines["grouped_mm"],
                         gather.flops),
                        ("grouped_mm down", down.baselines["grouped_mm"],
                         down.flops)]
        for case in (gather, down):
            err = common.rel_err(case.moec(), case.baselines["grouped_mm"]())
            if not err < common.TOLERANCE:
                sys.exit(f"{path} {case.kernel}: error {err:.1e} against "
                         "torch._grouped_mm")
        kernels += [(f"moec[{i}] gather", gather.moec, gather.flops),
                    (f"moec[{i}] down", down.moec, down.flops)]
    kernels.append(("cublas 8192^3", lambda: torch.mm(a, b), 2 * 8192**3))

    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
         "--format=csv,noheader,nounits", "-lms", "50"],
        stdout=open(args.log, "w"))
    time.sleep(1)
    flush = make_flush("read")
    marks = []
    try:
        for _ in range(args.reps):
            for name, fn, flops in kernels:
                fn()
                torch.cuda.synchronize()
                time.sleep(0.3)
                t0 = time.time()
                ms = sustained_ms(fn, args.seconds)
                t1 = time.time()
                marks.append((name, t0, t1, flops, ms,
                              timed(fn, 20, flush)))
    finally:
        smi.terminate()
        smi.wait()
    rows = samples(args.log)
    print(f"{torch.cuda.get_device_name()}, Mixtral T={T}, "
          f"{args.seconds:.0f} s per kernel, {args.reps} reps")
    print(f"{'kernel':18} {'sust ms':>8} {'TF/s':>6} {'bench ms':>8} "
          f"{'TF/s':>6} {'MHz':>5} {'W':>4} {'TF/s/GHz':>8} {'pJ/FLOP':>7}")
    for name, t0, t1, flops, ms, bench_ms in marks:
        # Skip the first second: the clock settles.
        window = [r for r in rows if t0 + 1.0 <= r[0] <= t1]
        mhz = median([r[1] for r in window])
        watts = median([r[2] for r in window])
        tflops = flops / ms / 1e9
        print(f"{name:18} {ms:8.3f} {tflops:6.1f} {bench_ms:8.3f} "
              f"{flops / bench_ms / 1e9:6.1f} {mhz:5.0f} {watts:4.0f} "
              f"{tflops / mhz * 1e3:8.1f} {watts / tflops:7.3f}")


if __name__ == "__main__":
    main()
