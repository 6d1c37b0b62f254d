"""Ahead of time, part 2 (on the GPU machine, runtime only): load the bundle
compiled by examples/aot_compile.py and check it against torch in float64.

    python3 examples/aot_run.py DIR

with the runtime-only package installed there (MOEC_RUNTIME_ONLY=ON
pip install .).
"""

import sys

import torch

import moec

bundle = moec.load(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/moe_layer.moecb")
entry = bundle.entry("moe_layer", "sm_90a")
print(entry)
E, H, I2 = entry.inputs[2].dims[0], entry.inputs[0].dims[1], entry.inputs[2].dims[1]
E, H, I = int(E), int(H), int(I2) // 2
K = 2

torch.manual_seed(0)
dev, bf16 = "cuda", torch.bfloat16
x = torch.randn(1000, H, device=dev).to(bf16)
gate_w = torch.randn(E, H, device=dev).to(bf16)
w_gate_up = (torch.randn(E, 2 * I, H, device=dev) / H ** 0.5).to(bf16)
w_down = (torch.randn(E, H, I, device=dev) / I ** 0.5).to(bf16)
y = entry(x, gate_w, w_gate_up, w_down)
torch.cuda.synchronize()

# float64 reference of the same layer
xd = x.double()
probs = torch.softmax(xd @ gate_w.double().T, dim=-1)
w, ids = probs.topk(K, dim=-1)
w = w / w.sum(-1, keepdim=True)
ref = torch.zeros_like(xd)
for e in range(E):
    token, slot = (ids == e).nonzero(as_tuple=True)
    h = xd[token] @ w_gate_up[e].double().T
    a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    ref.index_add_(0, token, (a @ w_down[e].double().T) * w[token, slot, None])
err = ((y.double() - ref).norm() / ref.norm()).item()
print(f"moe_layer T=1000 on {torch.cuda.get_device_name()}: "
      f"rel error {err:.2e} -> {'PASS' if err < 1e-2 else 'FAIL'}")
sys.exit(0 if err < 1e-2 else 1)
