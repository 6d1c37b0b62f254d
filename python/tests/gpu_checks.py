"""GPU checks of the Python package (torch on a CUDA device).

First, where the compiler is, write the bundles the checks load:

    python3 python/tests/gpu_checks.py --prepare DIR

then, on the GPU machine (the runtime-only package installed with
MOEC_RUNTIME_ONLY=ON pip install .; torch), run them directly

    python3 python/tests/gpu_checks.py DIR

or through test_gpu.py under pytest (MOEC_GPU_BUNDLES=DIR). Each check
prints what it measured and raises AssertionError on failure.
"""

import os
import sys

import moec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
MIXTRAL_SMALL = dict(hidden_size=64, intermediate_size=32, num_experts=8,
                     top_k=2, routing="topk_then_softmax")


def prepare(bundles: str) -> None:
    """Compiles every bundle the checks use into `bundles` (needs the
    compiler, not torch)."""
    from moec.layers import moe_kernel
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from moe_layer import moe_layer
    os.makedirs(bundles, exist_ok=True)
    kernels = {
        "moe_layer": moe_layer,
        # With the derived forward and backward (moe_block_fwd/_grad), so
        # that the block also trains from this bundle.
        "qwen3_moe_block": moe_kernel(2048, 768, 128, 8).grad().module,
        # The same block in FP8 (moec.torch.MoE(fp8="blockwise")'s).
        "qwen3_moe_block_fp8": moe_kernel(2048, 768, 128, 8).grad(
            fp8="blockwise").module,
        "mixtral_small_block": moe_kernel(
            64, 32, 8, 2, routing="topk_then_softmax"),
        "ops": os.path.join(ROOT, "test", "Integration", "ops.mlir"),
        "backward_kernels": os.path.join(ROOT, "test", "Integration",
                                         "backward_kernels.mlir"),
    }
    for name, kernel in kernels.items():
        path = os.path.join(bundles, name + ".moecb")
        moec.compile(kernel, target="sm_90a").save(path)
        print("wrote", path)


if __name__ == "__main__" and sys.argv[1:2] == ["--prepare"]:
    prepare(sys.argv[2] if len(sys.argv) > 2 else ".")
    sys.exit(0)

import torch  # noqa: E402 - the checks need torch, --prepare does not
import torch.nn.functional as F  # noqa: E402

import moec.torch  # noqa: E402


def rel(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def torch_moe_block(x, gate_w, w_gate_up, w_down, k, norm_topk_prob=True,
                    router_dtype=torch.float32, mixtral=False):
    """A plain torch Qwen3-MoE (or, with `mixtral`, Mixtral) block forward as
    in transformers, with the router logits computed in `router_dtype`
    (transformers keeps the model dtype, bf16; moec computes them in f32)."""
    logits = F.linear(x.to(router_dtype), gate_w.to(router_dtype))
    if mixtral:  # top-k of the logits, softmax over the k chosen
        top, ids = logits.topk(k, dim=-1)
        weights = torch.softmax(top, dim=-1, dtype=torch.float)
    else:
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        weights, ids = probs.topk(k, dim=-1)
        if norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
    weights = weights.to(x.dtype)
    out = torch.zeros_like(x)
    inter = w_down.shape[2]
    for e in range(gate_w.shape[0]):
        token, slot = (ids == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        h = F.linear(x[token], w_gate_up[e])
        a = F.silu(h[:, :inter]) * h[:, inter:]
        out.index_add_(0, token, F.linear(a, w_down[e]) * weights[token, slot,
                                                                  None])
    return out


def qwen3_block(bundles: str, name: str = "qwen3_moe_block",
                **options):
    """moec.torch.MoE at the Qwen3-30B-A3B shape from bundle `name`, with
    the same seeded weights every call."""
    torch.manual_seed(1)
    block = moec.torch.MoE(2048, 768, 128, 8, device="cuda",
                           bundle=moec.load(os.path.join(
                               bundles, name + ".moecb")), **options)
    # Initialized like a trained router: logits of order 1 (unscaled randn
    # gives logits of ±45, whose bf16 rounding in the torch block reorders
    # near-tied experts).
    hf_like = {"gate.weight": (torch.randn(128, 2048, device="cuda") /
                               2048 ** 0.5).bfloat16()}
    for e in range(128):
        for name, shape in (("gate_proj", (768, 2048)), ("up_proj",
                            (768, 2048)), ("down_proj", (2048, 768))):
            hf_like[f"experts.{e}.{name}.weight"] = (
                torch.randn(shape, device="cuda") / shape[1] ** 0.5).bfloat16()
    block.load_hf_state_dict(hf_like)
    return block


def qwen3_gradient_errors(block, x: torch.Tensor, dy: torch.Tensor) -> list:
    """‖g − ref‖/‖ref‖ of the gradients of x, gate, w_gate_up and w_down of
    a Qwen3-shaped block against float64 autograd of the same block with
    moec's routing (a near tie may go either way)."""
    block.zero_grad()
    xg = x.detach().clone().requires_grad_(True)
    block(xg).backward(dy)
    ids = torch.ops.moec.moe_block_train(
        xg.detach(), block.gate.weight.detach(), block.w_gate_up.detach(),
        block.w_down.detach(), [], [], block._launcher, [])[3].long()
    leaves = [t.detach().double().requires_grad_() for t in
              (xg, block.gate.weight, block.w_gate_up, block.w_down)]
    xd, gate_w, w_gate_up, w_down = leaves
    weights = torch.softmax(xd @ gate_w.T, dim=-1).gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(xd)
    for e in range(128):
        token, slot = (ids == e).nonzero(as_tuple=True)
        h = xd[token] @ w_gate_up[e].T
        a = F.silu(h[:, :768]) * h[:, 768:]
        out = out.index_add(0, token,
                            (a @ w_down[e].T) * weights[token, slot, None])
    (out * dy.double()).sum().backward()
    grads = (xg.grad, block.gate.weight.grad, block.w_gate_up.grad,
             block.w_down.grad)
    return [rel(g, t.grad) for g, t in zip(grads, leaves)]


def check_moe_module(bundles: str, tokens: int = 512) -> float:
    """moec.torch.MoE at the Qwen3-30B-A3B shape vs the plain torch block."""
    block = qwen3_block(bundles)
    x = torch.randn(2, tokens // 2, 2048, device="cuda").bfloat16()
    with torch.no_grad():
        y = block(x)
    ref = torch_moe_block(x.reshape(-1, 2048), block.gate.weight,
                          block.w_gate_up, block.w_down, 8).reshape(x.shape)
    err = rel(y, ref)
    weights = (x.reshape(-1, 2048), block.gate.weight, block.w_gate_up,
               block.w_down)
    bf16_router = torch_moe_block(*weights, 8, router_dtype=torch.bfloat16)
    exact = torch_moe_block(*(t.double() for t in weights), 8,
                            router_dtype=torch.float64)
    print(f"moec.torch.MoE Qwen3-30B-A3B T={tokens} vs torch block (bf16, "
          f"f32 router): rel error {err:.2e}")
    print(f"  vs float64: moec {rel(y, exact.reshape(x.shape)):.2e}, torch "
          f"block {rel(ref, exact.reshape(x.shape)):.2e}, torch block with a "
          f"bf16 router (transformers) {rel(bf16_router, exact):.2e}")
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    assert err <= 1e-2, err

    # Training: the derived backward's gradients against float64 autograd.
    x2 = x.reshape(-1, 2048)
    errs = qwen3_gradient_errors(block, x2, torch.randn_like(x2))
    print("  training: gradients of x, gate, w_gate_up, w_down vs float64: "
          + ", ".join(f"{e:.2e}" for e in errs))
    assert max(errs) <= 1e-2, errs
    return max(err, *errs)


def check_fp8_moe_module(bundles: str) -> float:
    """moec.torch.MoE(fp8="blockwise") at the Qwen3-30B-A3B shape: its
    output and gradients against float64 next to the bf16 block's on the
    same inputs; T = 1, all tokens to one expert, T = 0."""
    bf16 = qwen3_block(bundles)
    fp8 = qwen3_block(bundles, "qwen3_moe_block_fp8", fp8="blockwise")
    worst = 0.0
    gen = torch.Generator(device="cuda").manual_seed(2)
    for tokens, one_expert in ((512, False), (4096, False), (1, False),
                               (300, True)):
        x = torch.randn(tokens, 2048, device="cuda", generator=gen)
        if one_expert:  # expert 5's router row dominates every token
            x = x.abs()
            for block in (bf16, fp8):
                with torch.no_grad():
                    block.gate.weight[5] += 8.0 / (0.8 * 2048)
        x = x.bfloat16()
        dy = torch.randn(tokens, 2048, device="cuda",
                         generator=gen).bfloat16()
        with torch.no_grad():
            y = {name: b(x) for name, b in (("bf16", bf16), ("fp8", fp8))}
            exact = torch_moe_block(*(t.double() for t in (
                x, bf16.gate.weight, bf16.w_gate_up, bf16.w_down)), 8,
                router_dtype=torch.float64)
        out = {name: rel(v, exact) for name, v in y.items()}
        grads = {name: qwen3_gradient_errors(b, x, dy)
                 for name, b in (("bf16", bf16), ("fp8", fp8))}
        print(f"moec.torch.MoE(fp8='blockwise') Qwen3-30B-A3B T={tokens}"
              f"{' (all to expert 5)' if one_expert else ''} vs float64: "
              f"output FP8 {out['fp8']:.2e} (bf16 {out['bf16']:.2e}); "
              f"gradients x, gate, w_gate_up, w_down FP8 "
              + ", ".join(f"{e:.2e}" for e in grads["fp8"]) + " (bf16 "
              + ", ".join(f"{e:.2e}" for e in grads["bf16"]) + ")")
        # e4m3 keeps 3 mantissa bits; one token's router gradient is a
        # difference of products (twice the others' error on the host).
        assert out["fp8"] <= 0.1, out
        tol = [0.1, 0.2 if tokens == 1 else 0.1, 0.1, 0.1]
        assert all(e <= t for e, t in zip(grads["fp8"], tol)), grads
        worst = max(worst, out["fp8"], *grads["fp8"])
    with torch.no_grad():
        assert fp8(torch.empty(0, 2048, device="cuda",
                               dtype=torch.bfloat16)).shape == (0, 2048)
    return worst


def check_mixtral_names_and_routing(bundles: str) -> float:
    """Mixtral parameter names (w1/w3/w2) and top-k-then-softmax routing."""
    torch.manual_seed(3)
    block = moec.torch.MoE(**MIXTRAL_SMALL, device="cuda",
                           bundle=moec.load(os.path.join(
                               bundles, "mixtral_small_block.moecb")))
    H, I = 64, 32
    state = {"gate.weight": (torch.randn(8, H) / H ** 0.5).bfloat16()}
    for e in range(8):
        state[f"experts.{e}.w1.weight"] = (torch.randn(I, H) / H ** 0.5).bfloat16()
        state[f"experts.{e}.w3.weight"] = (torch.randn(I, H) / H ** 0.5).bfloat16()
        state[f"experts.{e}.w2.weight"] = (torch.randn(H, I) / I ** 0.5).bfloat16()
    block.load_hf_state_dict({k: v.cuda() for k, v in state.items()})
    assert torch.equal(block.w_gate_up[5, I:], state["experts.5.w3.weight"]
                       .cuda())
    x = torch.randn(333, H, device="cuda").bfloat16()
    with torch.no_grad():
        y = block(x)
    gate_up = torch.stack([torch.cat([state[f"experts.{e}.w1.weight"],
                                      state[f"experts.{e}.w3.weight"]])
                           for e in range(8)]).cuda()
    down = torch.stack([state[f"experts.{e}.w2.weight"]
                        for e in range(8)]).cuda()
    ref = torch_moe_block(*(t.double() for t in (
        x, state["gate.weight"].cuda(), gate_up, down)), 2,
        router_dtype=torch.float64, mixtral=True)
    err = rel(y, ref)
    print(f"moec.torch.MoE Mixtral-style (w1/w3/w2 names, top-k then "
          f"softmax) T=333 vs float64: rel error {err:.2e}")
    assert err < 1e-2, err
    return err


def check_cuda_array_interface(bundles: str) -> None:
    """Objects exposing only __cuda_array_interface__ (f32, i32)."""
    entry = moec.load(os.path.join(bundles, "ops.moecb")).entry(
        "gmm_bias_lora", "sm_90a")
    torch.manual_seed(4)
    args = (torch.randn(50, 24, device="cuda"),
            torch.randint(0, 8, (50, 1), device="cuda", dtype=torch.int32),
            torch.randn(8, 24, 20, device="cuda"),
            torch.randn(8, 20, device="cuda"),
            torch.randn(16, 24, device="cuda"),
            torch.randn(20, 16, device="cuda"))

    class CudaArrayOnly:
        def __init__(self, t):
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    y = entry(*args)
    out = torch.empty_like(y)
    entry(*(CudaArrayOnly(a) for a in args), out=CudaArrayOnly(out))
    torch.cuda.synchronize()
    assert torch.equal(out, y), "__cuda_array_interface__ path differs"
    print("__cuda_array_interface__ producer (f32, i32) gives the same result "
          "as torch tensors")


def example_layer_inputs(tokens: int):
    """Random (x, gate_w, w_gate_up, w_down) for examples/moe_layer.py's
    layer (E 8, H 64, I 32), weights scaled by 1/sqrt(fan-in)."""
    E, H, I = 8, 64, 32
    return (torch.randn(tokens, H, device="cuda").bfloat16(),
            torch.randn(E, H, device="cuda").bfloat16(),
            (torch.randn(E, 2 * I, H, device="cuda") / H ** 0.5).bfloat16(),
            (torch.randn(E, H, I, device="cuda") / I ** 0.5).bfloat16())


def check_aot_layer(bundles: str) -> float:
    """The example layer compiled elsewhere vs torch float64, on a side
    stream, through torch tensors and through a bare DLPack producer."""
    entry = moec.load(os.path.join(bundles, "moe_layer.moecb")).entry(
        "moe_layer", "sm_90a")
    torch.manual_seed(2)
    args = example_layer_inputs(1000)

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = entry(*args)           # torch's current stream: `side`
    side.synchronize()
    ref = torch_moe_block(*(a.double() for a in args), k=2,
                          router_dtype=torch.float64)
    err = rel(y, ref)
    print(f"AOT moe_layer T=1000 (side stream) vs float64: rel error {err:.2e}")
    assert err < 1e-2, err

    class DLPackOnly:  # not a torch tensor: goes through the capsule reader
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    out = torch.empty_like(y)
    entry(*(DLPackOnly(a) for a in args), out=DLPackOnly(out))
    torch.cuda.synchronize()
    assert torch.equal(out, y), "DLPack path differs from the torch path"
    print("DLPack producer (bf16) gives the same result as torch tensors")
    return err


def check_cuda_graph(bundles: str) -> float:
    """The example layer captured into a CUDA graph and replayed: its
    scratch buffers become the graph's own allocations, and the capture is
    the first time moec sees the capture stream. A replay on new inputs
    (copied into the captured ones) matches an eager call on them."""
    entry = moec.load(os.path.join(bundles, "moe_layer.moecb")).entry(
        "moe_layer", "sm_90a")
    torch.manual_seed(3)
    static = example_layer_inputs(300)
    side = torch.cuda.Stream()  # warm-up off the default stream, as torch asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        entry(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = entry(*static)
    fresh = example_layer_inputs(300)
    for dst, src in zip(static, fresh):
        dst.copy_(src)
    out.fill_(float("nan"))  # every element must be written by the replay
    graph.replay()
    torch.cuda.synchronize()
    eager = entry(*fresh)
    torch.cuda.synchronize()
    err = rel(out, eager)
    ref_err = rel(out, torch_moe_block(*(a.double() for a in fresh), k=2,
                                       router_dtype=torch.float64))
    print(f"CUDA graph replay of moe_layer T=300 on new inputs: rel error "
          f"{err:.2e} vs eager, {ref_err:.2e} vs float64")
    assert err < 1e-6, err
    assert ref_err < 1e-2, ref_err
    return err


def check_validation(bundles: str) -> None:
    """Bad arguments raise ValueError naming them, before any launch."""
    entry = moec.load(os.path.join(bundles, "moe_layer.moecb")).entry(
        "moe_layer", "sm_90a")
    x = torch.randn(16, 64, device="cuda").bfloat16()
    w = (torch.randn(8, 64, device="cuda").bfloat16(),
         torch.randn(8, 64, 64, device="cuda").bfloat16(),
         torch.randn(8, 64, 32, device="cuda").bfloat16())
    cases = [
        ((x.float(),) + w, "'x': expected element type bf16"),
        ((x.cpu(),) + w, "'x': expected an array on a CUDA device"),
        ((torch.randn(17 * 64, device="cuda").bfloat16()[1:1 + 16 * 64]
          .view(16, 64),) + w, "not 16-byte aligned"),
        ((x.t().contiguous().t(),) + w, "'x': must be contiguous"),
        ((x, w[0][:, :32]) + w[1:], "'gate_w': expected shape [8, 64]"),
    ]
    for args, message in cases:
        try:
            entry(*args)
        except ValueError as error:
            assert message in str(error), (message, str(error))
        else:
            raise AssertionError(f"no error for: {message}")
    ops = moec.load(os.path.join(bundles, "ops.moecb")).entry(
        "permute_unpermute", "sm_90a")
    ids = torch.randint(0, 8, (10, 2), device="cuda", dtype=torch.int32)
    ids[3, 1] = 8
    try:
        ops(torch.randn(10, 40, device="cuda").bfloat16(), ids,
            torch.rand(10, 2, device="cuda"))
    except ValueError as error:
        assert "expert ids must be in [0, 8)" in str(error), str(error)
    else:
        raise AssertionError("expert id 8 of 8 experts was accepted")
    print(f"validation: {len(cases) + 1} bad launches rejected with the "
          f"argument named")


def bitwise_equal(a, b) -> bool:
    """Equal bit for bit (NaNs included), whatever the dtype."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def routed_ids(tokens: int, experts: int, k: int):
    """k distinct experts per token, as a router picks them."""
    return torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :k] \
        .to(torch.int32).contiguous()


# The backward entries (and their routing: experts, align) whose outputs
# must repeat bit for bit: test/Integration/backward_kernels.mlir and the
# gradients of test/Integration/ops.mlir.
BACKWARD_ENTRIES = {
    ("backward_kernels", "permute_grad_vec"): (8, 2),
    ("backward_kernels", "permute_grad_scalar"): (8, 2),
    ("backward_kernels", "unpermute_grad_vec"): (16, 4),
    ("backward_kernels", "unpermute_grad_mixed"): (8, 2),
    ("backward_kernels", "unpermute_grad_scalar"): (8, 2),
    ("ops", "swiglu_fwd_bwd"): (None, 1),
    ("ops", "gmm_weight_grad"): (8, 1),
}
TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16,
                "f32": torch.float32}


def backward_inputs(entry, experts, align, tokens):
    """Random inputs for a backward entry: T tokens, and for inputs sized by
    the grouped rows M, the sorted capacity T*k + E*(align - 1)."""
    # The i32 input is the routing (names are arg0... in .mlir entries).
    ids_info = [b for b in entry.inputs if b.dtype == "i32"]
    k = int(ids_info[0].dims[1]) if ids_info else 1
    sizes = {"T": tokens, "M": tokens * k + (experts or 0) * (align - 1)}
    args = []
    for b in entry.inputs:
        shape = [sizes[d] if d in sizes else int(d) for d in b.dims]
        if b.dtype == "i32":
            args.append(routed_ids(tokens, experts, k))
        else:
            args.append(torch.randn(*shape, device="cuda")
                        .to(TORCH_DTYPES[b.dtype]))
    return args


def repeat_bitwise(fn, runs: int = 5):
    """Calls `fn` `runs` times; True when every output equals the first run
    bit for bit."""
    first = fn()
    first = first if isinstance(first, tuple) else (first,)
    first = tuple(t.clone() for t in first)
    for _ in range(runs - 1):
        again = fn()
        again = again if isinstance(again, tuple) else (again,)
        torch.cuda.synchronize()
        if not all(bitwise_equal(a, b) for a, b in zip(first, again)):
            return False
    return True


def check_determinism(bundles: str) -> None:
    """Run-to-run bitwise determinism: the example layer (AOT), the Qwen3
    block through moec.torch.MoE, and every backward entry, each 5 runs on
    the same inputs (fresh outputs every run)."""
    torch.manual_seed(5)
    layer = moec.load(os.path.join(bundles, "moe_layer.moecb")).entry(
        "moe_layer", "sm_90a")
    failed = []
    for tokens in (37, 4096):
        args = example_layer_inputs(tokens)
        if not repeat_bitwise(lambda: layer(*args)):
            failed.append(f"moe_layer T={tokens}")
    block = moec.torch.MoE(2048, 768, 128, 8, device="cuda",
                           bundle=moec.load(os.path.join(
                               bundles, "qwen3_moe_block.moecb")))
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        x = torch.randn(4096, 2048, device="cuda").bfloat16()
        if not repeat_bitwise(lambda: block(x)):
            failed.append("moec.torch.MoE Qwen3 T=4096")
    checked = 3
    for (bundle_name, name), (experts, align) in BACKWARD_ENTRIES.items():
        entry = moec.load(os.path.join(bundles, bundle_name + ".moecb")) \
            .entry(name, "sm_90a")
        for tokens in (1, 1000):
            args = backward_inputs(entry, experts, align, tokens)
            checked += 1
            if not repeat_bitwise(lambda: entry(*args)):
                failed.append(f"{name} T={tokens}")
    print(f"determinism: {checked - len(failed)} of {checked} (entry, T) "
          f"bitwise identical over 5 runs")
    assert not failed, f"not bitwise reproducible: {', '.join(failed)}"


def check_empty_and_single_token(bundles: str) -> None:
    """moec.torch.MoE on T = 0 (an expert-parallel rank or a last
    micro-batch with no tokens) and T = 1, 2-D and 3-D."""
    torch.manual_seed(6)
    block = moec.torch.MoE(**MIXTRAL_SMALL, device="cuda",
                           bundle=moec.load(os.path.join(
                               bundles, "mixtral_small_block.moecb")))
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
        for shape in ((0, 64), (2, 0, 64)):
            x = torch.randn(*shape, device="cuda").bfloat16()
            y = block(x)
            torch.cuda.synchronize()
            assert y.shape == x.shape and y.dtype == x.dtype, (shape, y.shape)
        x = torch.randn(1, 64, device="cuda").bfloat16()
        y = block(x)
        ref = torch_moe_block(x.double(), block.gate.weight.double(),
                              block.w_gate_up.double(), block.w_down.double(),
                              2, router_dtype=torch.float64, mixtral=True)
        err = rel(y, ref)
        # T = 1 is the same token inside a batch.
        batch = torch.cat([x, torch.randn(63, 64, device="cuda").bfloat16()])
        same = bitwise_equal(block(batch)[:1], y)
    print(f"moec.torch.MoE: T=0 gives (0, H) and (2, 0, H); T=1 vs float64 "
          f"rel error {err:.2e}, equal to its row in a batch of 64: {same}")
    assert err < 1e-2, err


def check_nan_confined(bundles: str) -> None:
    """A NaN in one token's input makes that token's output non-finite and
    leaves every other token's output as it was."""
    torch.manual_seed(7)
    layer = moec.load(os.path.join(bundles, "moe_layer.moecb")).entry(
        "moe_layer", "sm_90a")
    args = example_layer_inputs(256)
    clean = layer(*args)
    bad = args[0].clone()
    bad[100, 7] = float("nan")
    dirty = layer(bad, *args[1:])
    torch.cuda.synchronize()
    others = torch.ones(256, dtype=torch.bool, device="cuda")
    others[100] = False
    assert not torch.isfinite(dirty[100]).all(), "the NaN token's output is finite"
    assert torch.isfinite(dirty[others]).all(), "a NaN leaked to other tokens"
    err = rel(dirty[others], clean[others])
    same = bitwise_equal(dirty[others], clean[others])
    print(f"NaN in token 100 of 256: its output non-finite, the other 255 "
          f"finite, rel change {err:.2e} (bitwise unchanged: {same})")
    assert err < 1e-2, err


def main(bundles: str) -> int:
    print(f"device: {torch.cuda.get_device_name()}, moec "
          f"{moec.__version__}, compiler here: {moec.has_compiler()}")
    failures = 0
    for check in (check_aot_layer, check_moe_module, check_fp8_moe_module,
                  check_mixtral_names_and_routing, check_cuda_array_interface,
                  check_cuda_graph, check_validation, check_determinism,
                  check_empty_and_single_token, check_nan_confined):
        try:
            check(bundles)
        except AssertionError as error:
            failures += 1
            print(f"FAIL {check.__name__}: {error}")
    print("PASS" if not failures else f"{failures} FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
