"""The examples run as documented."""

import os
import runpy
import sys

import pytest

pytestmark = pytest.mark.compiler
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def test_moe_layer_example(capsys, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    runpy.run_path(os.path.join(EXAMPLES, "moe_layer.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "gather(" in out and "y: (100, 64) bfloat16" in out


def test_aot_compile_example(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLES)
    monkeypatch.setattr(sys, "argv", ["aot_compile.py", str(tmp_path)])
    runpy.run_path(os.path.join(EXAMPLES, "aot_compile.py"),
                   run_name="__main__")
    assert (tmp_path / "moe_layer.moecb").exists()
    assert (tmp_path / "qwen3_moe_block.moecb").exists()


def test_moe_layer_example_empty_batch_returns_zero_rows(monkeypatch):
    # Expert-parallel ranks and a dataset's last micro-batch can have no
    # tokens; numpy gives an empty (0, H) array strides (0, 0).
    monkeypatch.syspath_prepend(EXAMPLES)
    import ml_dtypes
    import numpy as np
    from moe_layer import E, H, I, moe_layer
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    x = np.empty((0, H), bf16)
    assert x.strides == (0, 0)  # the strides the old check rejected
    y = moe_layer(x, rng.standard_normal((E, H)).astype(bf16),
                  rng.standard_normal((E, 2 * I, H)).astype(bf16),
                  rng.standard_normal((E, H, I)).astype(bf16))
    assert y.shape == (0, H) and y.dtype == bf16


def run_finetune_moe(capsys, monkeypatch, steps: int, *extra) -> str:
    """examples/finetune_moe.py at the CPU size with --check and `extra`
    arguments: what it printed."""
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    monkeypatch.setattr(sys, "argv", [
        "finetune_moe.py", "--device", "cpu", "--steps", str(steps),
        "--batch", "4", "--seq", "64", "--small", "--check", *extra])
    runpy.run_path(os.path.join(EXAMPLES, "finetune_moe.py"),
                   run_name="__main__")
    return capsys.readouterr().out


def test_finetune_example(capsys, monkeypatch):
    # Training a tiny Qwen3-MoE-shaped model with its MoE blocks on moec,
    # next to plain torch: the loss falls and the curves track (--check).
    out = run_finetune_moe(capsys, monkeypatch, 40)
    assert "loss fell: True" in out and "(first steps 1 %): True" in out


def test_finetune_example_main_grad(capsys, monkeypatch):
    # The same with two micro-batches per step, the moec experts' gradients
    # accumulated into f32 main gradients by the kernels.
    out = run_finetune_moe(capsys, monkeypatch, 30, "--micro-batches", "2",
                           "--main-grad")
    assert "loss fell: True" in out and "(first steps 1 %): True" in out


def test_finetune_example_fp8(capsys, monkeypatch):
    # --fp8: a third model whose moec blocks train in FP8; its loss stays
    # within 2 % of the bf16 moec model's (--check).
    out = run_finetune_moe(capsys, monkeypatch, 40, "--fp8")
    assert "moec fp8 loss" in out and "fp8 tracks bf16 within 2 %: True" in out


def test_finetune_example_fp8_kept_weights(capsys, monkeypatch):
    # --keep-fp8-weights over two micro-batches: the FP8 model's blocks
    # quantize their weights once per optimizer step (test_torch_fp8.py
    # checks that the gradients are those of quantizing on every call) and
    # train as the FP8 model does.
    out = run_finetune_moe(capsys, monkeypatch, 30, "--fp8",
                           "--micro-batches", "2", "--keep-fp8-weights")
    assert "fp8 tracks bf16 within 2 %: True" in out
    monkeypatch.setattr(sys, "argv", [
        "finetune_moe.py", "--keep-fp8-weights"])
    with pytest.raises(SystemExit):
        runpy.run_path(os.path.join(EXAMPLES, "finetune_moe.py"),
                       run_name="__main__")
    assert "--keep-fp8-weights: only with --fp8" in capsys.readouterr().err


def test_finetune_lora_example(capsys, monkeypatch):
    # LoRA fine-tuning of a tiny Qwen3-MoE-shaped model (base weights
    # frozen, adapters on the experts) on moec next to the same math in
    # torch: the loss falls and the curves track (--check).
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    monkeypatch.setattr(sys, "argv", [
        "finetune_lora.py", "--device", "cpu", "--steps", "40", "--batch",
        "4", "--seq", "64", "--small", "--check"])
    runpy.run_path(os.path.join(EXAMPLES, "finetune_lora.py"),
                   run_name="__main__")
    out = capsys.readouterr().out
    assert "loss fell: True" in out and "(first steps 1 %): True" in out
