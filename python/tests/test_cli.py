"""The package's `moec` command (moec._cli): `moec cache` answered in
Python, the compiler's commands run in moec._compiler. `python3 -m moec` is
the same command (the installed script is checked in test_package.py)."""

import os
import subprocess
import sys

import pytest

import moec
from moec import ops
from moec.compiler import _ptxas
from moec.runtime import _native

pytestmark = pytest.mark.compiler

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "test",
                       "Integration", "ops.mlir")


def moec_command(*args, env=None):
    return subprocess.run([sys.executable, "-m", "moec", *args],
                          capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_help_lists_every_command():
    out = moec_command("--help")
    assert out.returncode == 0, out.stderr
    for command in ("compile", "tune", "inspect", "run", "cache"):
        assert f"moec {command}" in out.stdout
    cache_help = moec_command("cache", "--help")
    assert cache_help.returncode == 0
    assert "list" in cache_help.stdout and "MOEC_CACHE_DIR" in \
        cache_help.stdout


def test_cache_list_size_clear_path(private_cache):
    env = {"MOEC_CACHE_DIR": str(private_cache)}
    assert moec_command("cache", "path", env=env).stdout.strip() == \
        str(private_cache)
    assert moec_command("cache", "size", env=env).stdout.strip() == "0"
    kernel = moec.kernel(lambda x: ops.swiglu(x),
                         signature={"x": moec.Tensor["T", 8, "f32"]})
    moec.compile(kernel, "host")
    [entry] = moec.cache.list()
    listed = moec_command("cache", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert entry.key[:16] in listed.stdout and entry.path in listed.stdout
    assert "1 entries" in listed.stdout
    size = int(moec_command("cache", "size", env=env).stdout)
    assert size >= entry.size
    cleared = moec_command("cache", "clear", env=env)
    assert cleared.returncode == 0 and "removed" in cleared.stdout
    assert not os.path.exists(entry.path)
    assert moec_command("cache", "size", env=env).stdout.strip() == "0"


def test_cache_bad_calls_say_what_is_wrong():
    out = moec_command("cache", "frobnicate")
    assert out.returncode == 2
    assert "unknown cache command 'frobnicate'" in out.stderr
    out = moec_command("cache", "list", "extra")
    assert out.returncode == 2 and "takes no arguments" in out.stderr
    assert moec_command("cache").returncode == 2


def test_compiler_commands_run_in_the_module(tmp_path):
    bundle = tmp_path / "ops.moecb"
    out = moec_command("compile", EXAMPLE, "-o", str(bundle), "--target",
                       "host", "--entry", "moe_layer")
    assert out.returncode == 0, out.stderr
    assert "compiled moe_layer for host" in out.stdout
    assert moec.load(str(bundle)).entry("moe_layer", "host") is not None
    out = moec_command("run", EXAMPLE, "--entry", "swiglu_fwd_bwd",
                       "--sym", "T=3", "--iters", "1")
    assert out.returncode == 0 and out.stdout.rstrip().endswith("PASS")
    assert "compiling @swiglu_fwd_bwd for the host" in out.stderr
    # The exit codes of failures are the compiler's.
    out = moec_command("compile", EXAMPLE, "-o", str(bundle), "--target",
                       "sm_80x")
    assert out.returncode == 1 and "unknown target 'sm_80x'" in out.stderr
    assert moec_command("frobnicate").returncode == 2


def fake_ptxas(directory):
    directory.mkdir(parents=True)
    path = directory / "ptxas"
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_pip_ptxas_is_found_under_the_nvidia_namespace(tmp_path, monkeypatch):
    # nvidia-cuda-nvcc (CUDA 13) puts ptxas in nvidia/cu13/bin.
    path = fake_ptxas(tmp_path / "nvidia" / "cu13" / "bin")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _ptxas.pip_ptxas() == path


def test_moec_ptxas_is_set_only_where_no_other_ptxas_is(tmp_path, monkeypatch):
    path = fake_ptxas(tmp_path / "nvidia" / "cuda_nvcc" / "bin")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MOEC_PTXAS", "")  # restored (unset) afterwards
    monkeypatch.delenv("MOEC_PTXAS")

    class Finds:
        def __init__(self, found):
            self.found = found

        def find_ptxas(self):
            return self.found

    monkeypatch.setattr(_ptxas, "_checked", False)
    _ptxas.use_pip_ptxas(Finds("/usr/local/cuda/bin/ptxas"))
    assert "MOEC_PTXAS" not in os.environ  # the toolkit's wins
    monkeypatch.setattr(_ptxas, "_checked", False)
    _ptxas.use_pip_ptxas(Finds(""))
    assert os.environ["MOEC_PTXAS"] == path
    # The compiler itself honours it.
    assert _native.compiler().find_ptxas() == path
