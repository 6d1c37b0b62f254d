"""Ahead of time, part 1 (where MLIR is): compile kernels to bundle files.

    python3 examples/aot_compile.py OUT_DIR

with moec installed (`pip install .`; or PYTHONPATH=build/python_packages
after `make`).

Writes OUT_DIR/moe_layer.moecb (the layer of examples/moe_layer.py) and
OUT_DIR/qwen3_moe_block.moecb (a moec.torch.MoE block's inference entry at
the Qwen3-30B-A3B shape, from its MoEConfig: what `block.save_bundle(path,
training=False)` writes; without training=False it holds the backward
too), both for sm_90a. On the GPU machine, examples/aot_run.py runs the
first, and `moec.torch.MoE(config=..., bundle=moec.load(path))` the second.
"""

import os
import sys
import time

import moec
from moe_layer import moe_layer

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out_dir, exist_ok=True)
qwen3 = moec.MoEConfig(2048, 768, 128, 8, norm_topk_prob=True)
compilers = {
    "moe_layer": lambda: moec.compile(moe_layer, target="sm_90a"),
    "qwen3_moe_block": lambda: qwen3.compile("sm_90a", training=False),
}
for name, compile_ in compilers.items():
    start = time.perf_counter()
    bundle = compile_()
    path = os.path.join(out_dir, name + ".moecb")
    bundle.save(path)
    print(f"{path}: {bundle.entries[0]!r} ({time.perf_counter() - start:.2f} s)")
    for note in bundle.notes:
        print("  note:", note)
