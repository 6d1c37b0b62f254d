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
