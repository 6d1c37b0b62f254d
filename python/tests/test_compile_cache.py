"""The on-disk compile cache, and AOT bundles."""

import os
import subprocess

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


def test_cache_key_is_the_compiler_module_content(tmp_path):
    # Not its path or mtime: an installed package keeps its keys across
    # reinstalls of the same build, and any rebuilt compiler changes them.
    # The module's GNU build ID (the linker's hash of it) where it has one,
    # as readelf reads it; else a SHA-256 of its bytes.
    import hashlib
    import importlib.util
    import shutil
    from moec.compiler import _compile
    origin = importlib.util.find_spec("moec._compiler").origin
    build_id = _compile.elf_build_id(origin)
    if build_id is None:
        with open(origin, "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
        assert moec.compiler_fingerprint() == \
            f"moec {moec.__version__} {digest}"
        return
    assert moec.compiler_fingerprint() == \
        f"moec {moec.__version__} build-id {build_id}"
    assert len(build_id) >= 32
    if shutil.which("readelf"):
        notes = subprocess.run(["readelf", "-n", origin], capture_output=True,
                               text=True, check=True).stdout
        assert f"Build ID: {build_id}" in notes
    # Files without one: not ELF, and ELF without the note.
    (tmp_path / "text").write_text("not an ELF file")
    assert _compile.elf_build_id(str(tmp_path / "text")) is None
    stripped = tmp_path / "no-id.so"
    shutil.copy(origin, stripped)
    if shutil.which("objcopy") and subprocess.run(
            ["objcopy", "--remove-section", ".note.gnu.build-id",
             str(stripped)], capture_output=True).returncode == 0:
        assert _compile.elf_build_id(str(stripped)) is None


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
    # The loaded bundle runs on the host from its object, as the one
    # compiled in this process does, bit for bit.
    out = bundle(x)
    assert out.shape == (3, 4)
    assert np.array_equal(np.asarray(loaded(x)).view(np.uint16),
                          np.asarray(out).view(np.uint16))


def test_a_loaded_host_entry_runs_against_float64(tmp_path, rng):
    # Edge cases through the loaded object: no rows, one row, and rows not
    # a multiple of any tile, against the float64 reference of SwiGLU.
    @moec.kernel
    def act(x: moec.Tensor["T", 6, "f32"]):
        return ops.swiglu(x)

    path = tmp_path / "act.moecb"
    moec.compile(act, target="host").save(path)
    loaded = moec.load(path)
    for rows in (0, 1, 37):
        x = rng.standard_normal((rows, 6)).astype(np.float32)
        gate, up = x[:, :3].astype(np.float64), x[:, 3:].astype(np.float64)
        ref = gate / (1 + np.exp(-gate)) * up
        out = np.asarray(loaded(x), np.float64)
        assert out.shape == (rows, 3)
        if rows:
            assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-6


def test_a_host_object_without_entry_points_says_compile_again(tmp_path):
    # A bundle whose host object has no packed entry points (compiled before
    # moec loaded host objects) is refused with what to do, not run.
    from moec.runtime import _native
    compiler = _native.compiler()

    @moec.kernel
    def act(x: moec.Tensor["T", 6, "f32"]):
        return ops.swiglu(x)

    data = moec.compile(act, target="host").to_bytes()
    assert moec.runtime.Bundle.from_bytes(data).entry(
        "act", "host").binary_kind == "host-object"
    with pytest.raises(ValueError, match="has no packed entry point _mlir_act"
                       ".*compile it again"):
        compiler.HostModule.from_bundle(_without_packed_entry_points(data))


def _without_packed_entry_points(data: bytes) -> bytes:
    """`data` with the object's `_mlir_` symbols renamed (same length) and
    the checksum (docs/bundle.md: zlib's CRC-32 of the bytes after it, at
    offset 12) made to match again."""
    import zlib
    patched = bytearray(data.replace(b"_mlir_", b"_moec_"))
    assert patched != bytearray(data)
    patched[12:16] = zlib.crc32(bytes(patched[16:])).to_bytes(4, "little")
    return bytes(patched)
