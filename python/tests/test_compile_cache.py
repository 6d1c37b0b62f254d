"""The on-disk compile cache, and AOT bundles."""

import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec
from moec import ops
from moec.runtime import _native

pytestmark = pytest.mark.compiler


def make_kernel(cols=8):
    def act(x):
        return ops.swiglu(x)
    return moec.kernel(act, signature={"x": moec.Tensor["T", cols, "f32"]})


def test_second_compile_reads_the_cache(private_cache, monkeypatch):
    first = moec.compile(make_kernel(), target=["host", "sm_90a"])
    files = [f for _, _, fs in os.walk(private_cache) for f in fs]
    assert any(f.endswith(".moecb") for f in files)

    # A second compile of the same IR and options must not run the compiler.
    class NoCompiler:
        def __getattr__(self, name):
            real = getattr(_native.compiler(), name)
            if name == "compile":
                raise AssertionError("the compiler ran on a cache hit")
            return real
    monkeypatch.setattr(_native, "compiler", lambda real=_native.compiler():
                        NoCompiler() if True else real)
    second = moec.compile(make_kernel(), target=["host", "sm_90a"])
    assert second.to_bytes() == first.to_bytes()
    assert second.notes == first.notes


def test_cache_key_covers_ir_and_options(private_cache):
    moec.compile(make_kernel(8), target="host")
    moec.compile(make_kernel(16), target="host")          # other IR
    moec.compile(make_kernel(8), target="sm_90a")         # other target
    moec.compile(make_kernel(8), target="host", tile={"threads": 64})
    bundles = [f for _, _, fs in os.walk(private_cache) for f in fs
               if f.endswith(".moecb")]
    assert len(bundles) == 4


def test_sm_count(private_cache):
    # The persistent wgmma matmuls launch at most sm_count blocks (the grid
    # expression ends in "<count> min"); the key covers it; bad values are
    # named.
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                        "qwen3_moe_layer.mlir")
    with open(path, encoding="utf-8") as file:
        text = file.read()

    def wgmma_grids(bundle):
        return [step["grid"] for step in bundle.entries[0].steps
                if step["kernel"].endswith("grouped_matmul_wgmma")]

    full = wgmma_grids(moec.compile(text, "sm_90a"))
    fewer = wgmma_grids(moec.compile(text, "sm_90a", sm_count=100))
    assert len(full) == len(fewer) == 2
    assert all(g.endswith(" 132 min") for g in full)
    assert all(g.endswith(" 100 min") for g in fewer)
    assert moec.compile(text, "host", sm_count=100).targets == ["host"]
    for bad in (0, -1, 1.5, True, 70000):
        with pytest.raises(ValueError, match="'sm_count'"):
            moec.compile(text, "sm_90a", sm_count=bad)


def test_cache_key_is_the_compiler_module_content():
    # Not its path or mtime: an installed package keeps its keys across
    # reinstalls of the same build, and any rebuilt compiler changes them.
    import hashlib
    import importlib.util
    origin = importlib.util.find_spec("moec._compiler").origin
    with open(origin, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()
    assert moec.compiler_fingerprint() == f"moec {moec.__version__} {digest}"


def test_corrupt_cache_entry_is_recompiled(private_cache):
    moec.compile(make_kernel(), target="host")
    for root, _, files in os.walk(private_cache):
        for f in files:
            if f.endswith(".moecb"):
                with open(os.path.join(root, f), "wb") as file:
                    file.write(b"not a bundle")
    bundle = moec.compile(make_kernel(), target="host")
    x = np.ones((2, 8), np.float32)
    assert bundle(x).shape == (2, 4)


def test_aot_save_load(tmp_path, rng):
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "bf16"]):
        return ops.swiglu(x)

    bundle = moec.compile(act, target=["sm_90a", "host"])
    path = tmp_path / "act.moecb"
    bundle.save(path)
    loaded = moec.load(path)
    assert loaded.to_bytes() == bundle.to_bytes()
    assert loaded.targets == ["host", "sm_90a"]
    entry = loaded.entry("act", "sm_90a")
    assert entry.binary_kind in ("cubin", "ptx")
    assert [b.dtype for b in entry.inputs] == ["bf16"]
    x = rng.standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    # The in-process bundle runs on the host; a loaded one cannot (yet).
    assert bundle(x).shape == (3, 4)
    with pytest.raises(moec.MoecError, match="runtime cannot load host "
                       "objects"):
        loaded(x)


def test_load_rejects_garbage(tmp_path):
    path = tmp_path / "bad.moecb"
    path.write_bytes(b"MOEC" + b"\0" * 40)
    with pytest.raises(moec.MoecError, match="invalid bundle"):
        moec.load(path)
    with pytest.raises(FileNotFoundError):
        moec.load(tmp_path / "missing.moecb")


def test_a_miss_waits_for_the_process_compiling_it(private_cache,
                                                   monkeypatch):
    # While another process holds a miss's lock (it is compiling that
    # entry), compile waits, then reads the entry that process wrote instead
    # of compiling it a second time.
    import fcntl
    import threading

    first = moec.compile(make_kernel(), target="host")
    [entry] = [os.path.join(d, f) for d, _, fs in os.walk(private_cache)
               for f in fs if f.endswith(".moecb")]
    meta = entry[:-len(".moecb")] + ".json"
    saved = {p: open(p, "rb").read() for p in (entry, meta)}
    for path in saved:
        os.remove(path)

    calls = []
    real = _native.compiler()

    class CountingCompiler:
        def __getattr__(self, name):
            if name == "compile":
                calls.append(name)
            return getattr(real, name)
    monkeypatch.setattr(_native, "compiler", lambda: CountingCompiler())

    result = {}
    with open(entry + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: result.update(
            bundle=moec.compile(make_kernel(), target="host")))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive(), "compile did not wait for the lock"
        for path, data in saved.items():  # the other process's entry
            with open(path, "wb") as file:
                file.write(data)
    waiter.join(60)
    assert not waiter.is_alive()
    assert calls == [], "the compiler ran again for an entry being written"
    assert result["bundle"].to_bytes() == first.to_bytes()
