"""Cold compile vs cached compile of moec.compile (no GPU needed).

    PYTHONPATH=build/python_packages python3 bench/python_compile_cache.py \
        [--repeats 5]

Compiles the Qwen3-30B-A3B MoE block kernel (moec.layers.moe_kernel) for
sm_90a into an empty cache directory (cold: trace, verify, fuse, tile, lower,
PTX, ptxas), then again from the cache, several times each; prints medians
and the ratio as a markdown table. Also times the first compile call of a
fresh Python process that finds the kernel in the cache (it never loads
MLIR).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import moec
from common import host_seconds
from moec.layers import moe_kernel

# Times the compile call only; `import moec` (about 25 ms, mostly standard
# library modules) is the same for a cold and a cached compile.
FRESH_PROCESS = """
import time
import moec
from moec.layers import moe_kernel
start = time.perf_counter()
moec.compile(moe_kernel(2048, 768, 128, 8), target="sm_90a")
print(time.perf_counter() - start)
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="cold compiles, and cached ones after each")
    repeats = parser.parse_args().repeats
    moec.compiler_fingerprint()  # once per process, outside the timings
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["MOEC_CACHE_DIR"] = cache
            # A fresh Kernel each time: tracing is part of both timings.
            cold.append(host_seconds(lambda: moec.compile(
                moe_kernel(2048, 768, 128, 8), target="sm_90a")))
            for _ in range(repeats):
                warm.append(host_seconds(lambda: moec.compile(
                    moe_kernel(2048, 768, 128, 8), target="sm_90a")))
    fresh = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["MOEC_CACHE_DIR"] = cache
        for _ in range(repeats + 1):
            fresh.append(float(subprocess.check_output(
                [sys.executable, "-c", FRESH_PROCESS], text=True)))
    fresh = fresh[1:]  # the first one filled the cache
    c, w = statistics.median(cold), statistics.median(warm)
    f = statistics.median(fresh)
    print("| compile of the Qwen3-30B-A3B block, sm_90a | median | runs |")
    print("|---|---|---|")
    print(f"| cold (empty cache) | {c * 1e3:.1f} ms | {len(cold)} |")
    print(f"| cached (unchanged kernel) | {w * 1e3:.3f} ms | {len(warm)} |")
    print(f"| cached, first compile of a fresh process | {f * 1e3:.2f} ms | "
          f"{len(fresh)} |")
    print(f"| ratio cold / cached | {c / w:.0f}x | |")
    print(f"| ratio cold / cached in a fresh process | {c / f:.0f}x | |")
    return 0 if c / w >= 100 else 1


if __name__ == "__main__":
    sys.exit(main())
