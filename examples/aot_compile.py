"""Ahead of time, part 1 (where MLIR is): compile kernels to bundle files.

    python3 examples/aot_compile.py OUT_DIR

with moec installed (`pip install .`; or PYTHONPATH=build/python_packages
after `make`).

Writes OUT_DIR/moe_layer.moecb (the layer of examples/moe_layer.py) and
OUT_DIR/qwen3_moe_block.moecb (moec.torch.MoE's kernel at the Qwen3-30B-A3B
shape), both for sm_90a. Carry them to the GPU machine and run
examples/aot_run.py there.
"""

import os
import sys
import time

import moec
from moe_layer import moe_layer
from moec.layers import moe_kernel

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out_dir, exist_ok=True)
kernels = {
    "moe_layer": moe_layer,
    "qwen3_moe_block": moe_kernel(2048, 768, 128, 8, norm_topk_prob=True),
}
for name, kernel in kernels.items():
    start = time.perf_counter()
    bundle = moec.compile(kernel, target="sm_90a")
    path = os.path.join(out_dir, name + ".moecb")
    bundle.save(path)
    print(f"{path}: {bundle.entries[0]!r} ({time.perf_counter() - start:.2f} s)")
    for note in bundle.notes:
        print("  note:", note)
