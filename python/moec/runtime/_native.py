"""The native modules, imported on first use with a clear error when absent.

_runtime (bundles) builds everywhere; _cuda where the CUDA toolkit is (it
loads the driver, libcuda.so.1, on first use: has_cuda() says whether one
answers); _compiler needs the full (MLIR) build.
"""

from __future__ import annotations

import importlib

_cache: dict = {}


def _load(name: str, why: str):
    if name not in _cache:
        try:
            _cache[name] = importlib.import_module(f"moec.{name}")
        except ImportError as error:
            _cache[name] = ImportError(f"{why} ({error})")
    module = _cache[name]
    if isinstance(module, ImportError):
        raise ImportError(str(module))
    return module


def runtime():
    return _load("_runtime", "moec's runtime module (moec._runtime) is not "
                 "built: build the `moec-python` target")


def cuda():
    return _load("_cuda", "CUDA is unavailable: moec._cuda did not import "
                 "(it is built only where the CUDA toolkit is found; the "
                 "driver, libcuda.so.1, is loaded when it is first used)")


def compiler():
    return _load("_compiler", "moec's compiler module (moec._compiler, which "
                 "links MLIR) is not available here: this is a runtime-only "
                 "build. Compile where MLIR is and moec.load() the bundle")


def has_compiler() -> bool:
    try:
        compiler()
        return True
    except ImportError:
        return False


def has_cuda() -> bool:
    """True when the driver loads and a GPU answers."""
    try:
        cuda().init()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no usable GPU"
        return False
