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


def test_lora_kernels_mlir_is_current(tmp_path):
    # bench/kernels/lora_kernels.mlir is what bench/lora_kernels.py emits.
    import os
    import sys
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    out = tmp_path / "lora_kernels.mlir"
    sys.path.insert(0, str(BENCH))
    try:
        import lora_kernels
        lora_kernels.emit_mlir(str(out))
    finally:
        sys.path.remove(str(BENCH))
    assert out.read_text() == (BENCH / "kernels" / "lora_kernels.mlir").read_text()
