"""The README's quick start, run as the README shows it: the fenced block
marked ```python quickstart, extracted from the text and run in a fresh
interpreter, so that the landing page cannot show code that stopped
working. It trains an MoE block on the host backend (needs torch and the
compiler)."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def quickstart():
    blocks = re.findall(r"^```python quickstart\n(.*?)^```$", README.read_text(),
                        flags=re.M | re.S)
    assert len(blocks) == 1, "README.md needs one ```python quickstart block"
    return blocks[0]


def test_quickstart_is_short():
    # "A 20-line quick start": the block stays one screen.
    assert len(quickstart().splitlines()) <= 25


@pytest.mark.compiler
def test_quickstart_runs(tmp_path):
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart())
    env = dict(os.environ, MOEC_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                         env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.fullmatch(r"loss \d+\.\d{4} -> \d+\.\d{4}\n", out.stdout), \
        out.stdout


def test_readme_is_a_landing_page():
    # At most 150 lines, the two commands on the first screen; the numbers
    # live in docs/performance.md.
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    first = "\n".join(lines[:40])
    assert "make demo" in first and "make test" in first
    assert "docs/performance.md" in README.read_text()
