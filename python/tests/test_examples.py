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
