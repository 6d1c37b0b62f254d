"""The benchmark scripts under bench/ run only where a GPU and torch are
(the device runs); here each one is at least compiled, so that a syntax
error does not first show on the GPU machine."""

import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_bench_scripts_found():
    assert len(SCRIPTS) >= 5, f"no bench scripts under {BENCH}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_compiles(script):
    compile(script.read_text(), str(script), "exec")


@pytest.mark.parametrize("script", ["lora_kernels", "small_wgrad"])
def test_emitted_mlir_is_current(script, tmp_path):
    # bench/kernels/<script>.mlir is what bench/<script>.py emits.
    import importlib
    import os
    import sys
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    out = tmp_path / f"{script}.mlir"
    sys.path.insert(0, str(BENCH))
    try:
        importlib.import_module(script).emit_mlir(str(out))
    finally:
        sys.path.remove(str(BENCH))
    assert out.read_text() == (BENCH / "kernels" / f"{script}.mlir").read_text()


@pytest.mark.compiler
def test_main_grad_step_mlir_is_current(tmp_path):
    # bench/kernels/main_grad_step.mlir is what bench/main_grad_step.py
    # emits, and its _mg layers take moe-autodiff's accumulate=2,3 (the
    # expert weights).
    import sys
    from moec.runtime import _native
    out = tmp_path / "main_grad_step.mlir"
    sys.path.insert(0, str(BENCH))
    try:
        import main_grad_step
        main_grad_step.emit_mlir(str(out))
    finally:
        sys.path.remove(str(BENCH))
    text = out.read_text()
    assert text == (BENCH / "kernels" / "main_grad_step.mlir").read_text()
    module = _native.compiler().autodiff(text, "layer_qwen3_mg", [], "all",
                                         [2, 3])
    assert "moe.accumulated = array<i64: 2, 3>" in module


TINY_LAYERS = {
    "softmax": dict(name="tiny", E=4, H=32, I=16, k=2, routing="softmax"),
    "deepseek": dict(name="tiny", E=8, H=32, I=16, k=2, routing="deepseek",
                     groups=4, topk_groups=2, scaling=2.5),
}


@pytest.mark.parametrize("routing,rank", [("softmax", 0), ("softmax", 4),
                                          ("deepseek", 8)])
def test_training_step_layer_on_host(routing, rank):
    # bench/training_step.py's layer (full fine-tuning, or LoRA of `rank`)
    # and its moe-autodiff backward on the host backend, against the
    # script's own float64 reference and its torch autograd step: the
    # checks the GPU run makes, at a tiny shape, so that a wrong argument
    # order or reference shows here first.
    import os
    import sys
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    import torch

    import moec
    from moec.runtime import _native
    sys.path.insert(0, str(BENCH))
    try:
        import training_step as ts
        from grouped_gemm import rel_err
    finally:
        sys.path.remove(str(BENCH))
    m = TINY_LAYERS[routing]
    E, H, I, T = m["E"], m["H"], m["I"], 24
    name = ts.layer_name("tiny", rank)
    wrt = [0, 4, 5, 6, 7] if rank else [0, 1, 2, 3]
    module = _native.compiler().autodiff(ts.layer_mlir("tiny", m, rank),
                                         name, wrt, "all")
    bundle = moec.compile(module, "host")
    gen = torch.Generator().manual_seed(rank + len(routing))

    def randn(*shape, scale=0.2):
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)
    x, dy = randn(T, H, scale=1.0), randn(T, H, scale=1.0)
    weights = [randn(E, H), randn(E, 2 * I, H), randn(E, H, I)]
    adapters = [randn(E * rank, H), randn(2 * I, E * rank),
                randn(E * rank, I), randn(H, E * rank)] if rank else []
    bias = (torch.randn(E, generator=gen) * 0.01
            if routing == "deepseek" else None)
    inputs = [x, *weights, *adapters] + ([bias] if bias is not None else [])
    grads, outs = ts.moec_step_fn(bundle, name, inputs, dy)()
    ref = ts.reference_grads(m, x, *weights, bias, dy, outs[3], adapters)
    names = ts.LORA_GRADS if rank else ts.GRADS
    assert len(grads) == len(ref) == len(names)
    for n, g, r in zip(names, grads, ref):
        assert g.shape == r.shape, n
        assert rel_err(g, r) < 2e-2, n
    # torch autograd (torch._grouped_mm on the CPU) routes by itself: where
    # it picks moec's experts (these seeded inputs have no near tie, but a
    # CPU's bf16 matmul may round differently), its gradients agree too.
    logits = torch.nn.functional.linear(x, weights[0]).float()
    _, torch_ids = ts.route(logits, m, bias)
    if not torch.equal(torch_ids.sort(-1).values.int(),
                       outs[3].sort(-1).values.int()):
        import warnings
        warnings.warn("torch routed these inputs differently from moec: the "
                      "comparison with the torch step was not run (the "
                      "float64 check above was)")
        return
    leaves = [t.requires_grad_() for t in ([x] + adapters if rank
                                           else [x, *weights])]
    torch_grads = ts.torch_step_fn(m, x, *weights, bias, dy, adapters)()
    for t in leaves:
        t.requires_grad_(False)
    for n, g, t in zip(names, grads, torch_grads):
        assert rel_err(g, t) < 3e-2, n
