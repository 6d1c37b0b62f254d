"""A fused MoE layer in moec, in about 20 lines, run on the host with numpy
(or on a GPU: pass torch CUDA tensors instead).

    python3 examples/moe_layer.py

with moec installed (`pip install .`; or PYTHONPATH=build/python_packages
after `make`).
"""

import ml_dtypes
import numpy as np

import moec
from moec import ops

E, H, I, K = 8, 64, 32, 2  # experts, hidden, expert intermediate, top-k


@moec.kernel
def moe_layer(x: moec.Tensor["T", H, "bf16"], gate_w: moec.Tensor[E, H, "bf16"],
              w_gate_up: moec.Tensor[E, 2 * I, H, "bf16"],
              w_down: moec.Tensor[E, H, I, "bf16"]):
    logits = ops.matmul(x, gate_w, transpose_rhs=True)          # router
    weights, ids = ops.router_topk(logits, k=K, renormalize=True)
    _, slots, offsets = ops.sort_by_expert(ids, E)
    rows = ops.permute(x, slots, offsets, k=K)                  # fused into
    h = ops.grouped_matmul(rows, w_gate_up, offsets, transpose_rhs=True)
    act = ops.swiglu(h)                                         # the matmuls
    down = ops.grouped_matmul(act, w_down, offsets, transpose_rhs=True)
    return ops.unpermute(down, slots, offsets, k=K, weights=weights)


if __name__ == "__main__":
    moe_layer.print_ir(stages=("optimized",))   # the fused, tiled IR
    rng = np.random.default_rng(0)
    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((100, H)).astype(bf16)
    gate_w = rng.standard_normal((E, H)).astype(bf16)
    w_gate_up = (rng.standard_normal((E, 2 * I, H)) / H ** 0.5).astype(bf16)
    w_down = (rng.standard_normal((E, H, I)) / I ** 0.5).astype(bf16)
    y = moe_layer(x, gate_w, w_gate_up, w_down)   # compiles for the host
    print("y:", y.shape, y.dtype, "mean |y| =",
          float(np.abs(y.astype(np.float32)).mean()))
