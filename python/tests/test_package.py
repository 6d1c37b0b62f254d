"""The package as pip installs it. `make test` installs moec into a fresh
venv (the full package, then the runtime-only one) and sets
MOEC_TEST_INSTALLED=full or runtime, and MOEC_TEST_EXPECT_CUDA=1 where the
build found the CUDA toolkit; a file missing from the package fails here or
in the other tests, which import the installed package too."""

import importlib.metadata
import importlib.util
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

import moec

KIND = os.environ.get("MOEC_TEST_INSTALLED")
EXPECT_CUDA = os.environ.get("MOEC_TEST_EXPECT_CUDA") == "1"
pytestmark = pytest.mark.skipif(
    KIND not in ("full", "runtime"),
    reason="MOEC_TEST_INSTALLED not set (make test sets it)")
SOURCE = pathlib.Path(__file__).resolve().parents[1] / "moec"
SCRIPTS = pathlib.Path(sysconfig.get_path("scripts"))


def test_imported_from_site_packages():
    site = pathlib.Path(sysconfig.get_path("platlib")).resolve()
    assert site in pathlib.Path(moec.__file__).resolve().parents, (
        f"moec imported from {moec.__file__}, not from {site}")


def test_version_is_the_metadata_version():
    assert moec.__version__ == importlib.metadata.version("moec")


def test_license_in_the_metadata():
    # pyproject.toml's SPDX expression, and the LICENSE text in the wheel.
    meta = importlib.metadata.metadata("moec")
    assert meta["License-Expression"] == "Apache-2.0 WITH LLVM-exception"
    shipped = [f for f in importlib.metadata.files("moec")
               if f.name == "LICENSE"]
    assert shipped, "LICENSE is not in the installed package's metadata"
    text = shipped[0].read_text()
    assert "Apache License" in text and "LLVM Exceptions" in text


def test_imports_from_another_directory():
    out = subprocess.run(
        [sys.executable, "-c", "import moec; print(moec.__version__)"],
        cwd="/", capture_output=True, text=True, check=True).stdout
    assert out.strip() == moec.__version__


def test_every_source_file_is_installed():
    # The subpackages (moec.language, moec.compiler, ...) included.
    installed = {str(pathlib.PurePosixPath(f))
                 for f in importlib.metadata.files("moec")
                 if str(f).startswith("moec/")}
    sources = [p.relative_to(SOURCE.parent).as_posix()
               for p in SOURCE.rglob("*.py")]
    assert "moec/torch/__init__.py" in sources
    missing = sorted(p for p in sources if p not in installed)
    assert not missing, f"not in the installed package: {missing}"
    assert "moec/_version.py" in installed


def test_native_modules():
    def has(name):
        return importlib.util.find_spec(f"moec.{name}") is not None
    assert has("_runtime")
    assert has("_cuda") == EXPECT_CUDA
    if KIND == "full":
        assert moec.has_compiler()  # imports it: libMLIR.so must load
        assert moec.CompileError is not None
    else:
        assert not has("_compiler")
        with pytest.raises(ImportError, match="runtime-only build"):
            moec.ir("func.func @f() { return }")


def test_commands():
    def command(name):
        return (SCRIPTS / name).is_file() and os.access(SCRIPTS / name,
                                                         os.X_OK)
    assert command("moec") == (KIND == "full")
    # A developer's tool that links libMLIR.so: build/bin only.
    assert not command("moec-opt")
    # moec-runner needs the CUDA launcher; it loads libcuda.so.1 only when
    # it launches, so its help works without a driver.
    assert command("moec-runner") == EXPECT_CUDA
    if command("moec-runner"):
        usage = subprocess.run([SCRIPTS / "moec-runner", "--help"],
                               capture_output=True, text=True,
                               check=True).stdout
        assert "usage: moec-runner" in usage
    if KIND == "full":
        usage = subprocess.run([SCRIPTS / "moec", "--help"],
                               capture_output=True, text=True,
                               check=True).stdout
        assert "moec compile" in usage
        assert "--print-plan" in subprocess.run(
            [SCRIPTS / "moec", "compile", "--help"], capture_output=True,
            text=True, check=True).stdout
        assert subprocess.run(
            [SCRIPTS / "moec", "cache", "path"], capture_output=True,
            text=True, check=True).stdout.strip() == moec.cache_dir()


@pytest.mark.skipif(KIND != "full", reason="the full package's compiler")
def test_the_compiler_needs_no_llvm_installed():
    # MLIR and LLVM are linked into _compiler: it needs no libMLIR.so or
    # libLLVM.so (make test runs this suite with /usr/lib/llvm-22 hidden,
    # where it can), and its dynamic symbol table exports none of theirs.
    origin = importlib.util.find_spec("moec._compiler").origin
    needed = subprocess.run(["ldd", origin], capture_output=True, text=True,
                            check=True).stdout
    assert "libMLIR" not in needed and "libLLVM" not in needed, needed
    assert "not found" not in needed, needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", origin],
                             capture_output=True, text=True).stdout
    if symbols:  # nm is binutils', where installed
        assert "mlir" not in symbols and "llvm" not in symbols.lower(), \
            symbols[:2000]
