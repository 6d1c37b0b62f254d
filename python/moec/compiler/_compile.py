"""Compiling kernels, functions or MLIR text to bundles, with an on-disk
cache; the target of a device."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import tempfile
from typing import Optional, Sequence, Union

from .._version import __version__
from ..language._ir import kernel_name, signature_specs, trace
from ..runtime import Bundle, MoecError, _native
from ..runtime._args import is_positive_int

#: Targets moec compiles for.
TARGETS = ("sm_90a", "gfx942", "host")


def _module_text(source) -> tuple:
    """(MLIR text, {function: argument names}) of a kernel, its gradient,
    a function, MLIR text or .mlir path."""
    module = getattr(source, "module", None)
    if isinstance(module, str):  # a Kernel or a Gradient
        return module, dict(getattr(source, "entry_arg_names", {}))
    if callable(source):
        name = kernel_name(source)
        specs = signature_specs(source, name)
        return trace(source, name, specs), {name: list(specs)}
    if isinstance(source, os.PathLike) or (
            isinstance(source, str) and source.endswith(".mlir")
            and "\n" not in source and os.path.exists(source)):
        with open(source, encoding="utf-8") as file:
            return file.read(), {}
    if isinstance(source, str):
        return source, {}
    raise TypeError(f"moec.compile takes a @moec.kernel, its .grad(), a "
                    f"function, MLIR text or a .mlir path; got "
                    f"{type(source).__name__}")


def ir(source, stage: str = "moe", tile: Optional[dict] = None) -> str:
    """`source` (kernel, function or MLIR text) printed at `stage`."""
    text, _ = _module_text(source)
    compiler = _native.compiler()
    if stage not in compiler.stages():
        raise ValueError(f"'stage': expected one of "
                         f"{', '.join(compiler.stages())}, got {stage!r}")
    if stage == "moe":
        return compiler.verify(text)
    return compiler.lower(text, stage, _tile_dict(tile))


def _tile_dict(tile) -> dict:
    if tile is None:
        return {}
    if not isinstance(tile, dict):
        raise TypeError("'tile': expected a dict such as {'m': 32, 'n': 32}")
    for key, value in tile.items():
        if key not in ("m", "n", "k", "threads"):
            raise ValueError(f"'tile': unknown field {key!r} (expected m, n, "
                             f"k, threads)")
        if not is_positive_int(value):
            raise ValueError(f"'tile': field {key!r} must be a positive int, "
                             f"got {value!r}")
    return dict(sorted(tile.items()))


def cache_dir() -> str:
    """$MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec, else ~/.cache/moec."""
    if os.environ.get("MOEC_CACHE_DIR"):
        return os.environ["MOEC_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moec")


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """The package version and a SHA-256 of the compiler module's bytes (our
    whole compiler is linked into it): a rebuilt compiler gives new cache
    keys, while the same build under another path or with another mtime (a
    reinstall, another venv) keeps them. Read without importing the module,
    so a cache hit never loads MLIR (hashing its 2 MB takes a few ms, once
    per process). Not covered: the system's libMLIR / libLLVM, which the
    module links dynamically; clear the cache after upgrading them."""
    import importlib.util
    spec = importlib.util.find_spec("moec._compiler")
    if spec is None or not spec.origin:
        _native.compiler()  # raises the explanatory ImportError
    digest = hashlib.sha256()
    with open(spec.origin, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return f"moec {__version__} {digest.hexdigest()}"


def target_for(device) -> str:
    """The target moec compiles for to run on `device`: a torch.device, a
    device type ("cpu", "cuda") or a device string ("cuda:1"). "host" for
    the CPU, "sm_90a" for CUDA GPUs."""
    kind = getattr(device, "type", device)
    if not isinstance(kind, str):
        raise TypeError(f"'device': expected a torch.device or a string such "
                        f"as 'cpu' or 'cuda', got {type(device).__name__}")
    kind = kind.split(":")[0]
    if kind == "cpu":
        return "host"
    if kind == "cuda":
        return "sm_90a"
    raise ValueError(f"'device': moec runs on 'cpu' and 'cuda' devices, got "
                     f"{device!r}")


def _targets(target) -> list:
    targets = [target] if isinstance(target, str) else list(target)
    if not targets:
        raise ValueError("'target': give at least one target")
    for t in targets:
        if t not in TARGETS and not (t.startswith("sm_") or
                                     t.startswith("gfx")):
            raise ValueError(f"'target': unknown target {t!r} (expected "
                             f"{', '.join(TARGETS)})")
    return targets


def compile(source, target: Union[str, Sequence[str]] = "sm_90a",
            tile: Optional[dict] = None, *, cache: bool = True,
            keep_assembly: bool = False,
            sm_count: Optional[int] = None) -> Bundle:
    """Compiles a kernel (or function, MLIR text, .mlir path) to a Bundle.

    `target`: "sm_90a" (cubin; PTX when ptxas is missing), "gfx942",
    "host", or a list. `tile`: matmul tile fields replacing the cost model's
    ({"m", "n", "k", "threads"}). `sm_count`: the SMs sm_90a's persistent
    matmuls fill (default: all 132); fewer leave room for kernels that run
    beside them, such as NCCL's all-to-all (docs/expert_parallel.md).
    Other targets ignore it, and a module with its own #moe.target keeps
    that. With `cache`, the bundle is kept in cache_dir() under a key of the
    IR, the options and the compiler build, so compiling an unchanged kernel
    again only reads a file.
    """
    text, arg_names = _module_text(source)
    targets = _targets(target)
    tile_options = _tile_dict(tile)
    if sm_count is not None and not (is_positive_int(sm_count) and
                                     sm_count <= 65536):
        raise ValueError(f"'sm_count': expected an int in [1, 65536], got "
                         f"{sm_count!r}")
    kwargs = dict(module_text=text, tile=tile_options, arg_names=arg_names)

    def compile_now():
        return _native.compiler().compile(text, targets, tile_options,
                                          keep_assembly, sm_count or 0)
    key = None
    if cache:
        key = hashlib.sha256(json.dumps(
            [text, targets, tile_options, keep_assembly, sm_count,
             compiler_fingerprint()]).encode()).hexdigest()
        path = os.path.join(cache_dir(), key[:2], key + ".moecb")
        meta_path = path[:-len(".moecb")] + ".json"
        cached = _read_cached(path, meta_path, kwargs)
        if cached is not None:
            return cached
        # A miss. The ranks of a job on one machine ask for the same
        # kernels at once: one compiles, the others wait and read its entry.
        with _compile_lock(path + ".lock"):
            cached = _read_cached(path, meta_path, kwargs)
            if cached is not None:
                return cached
            data, notes, assembly = compile_now()
            _store(path, data)
            _store(meta_path, json.dumps({
                "notes": list(notes), "assembly": list(assembly)}).encode())
    else:
        data, notes, assembly = compile_now()
    return Bundle.from_bytes(data, notes=notes, assembly=assembly, **kwargs)


def _read_cached(path: str, meta_path: str, kwargs: dict) -> Optional[Bundle]:
    """The cache entry at `path`, or None for a miss or an unreadable one
    (which is then compiled afresh)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
        with open(meta_path, encoding="utf-8") as file:
            meta = json.load(file)
        return Bundle.from_bytes(data, notes=meta["notes"],
                                 assembly=meta["assembly"], **kwargs)
    except (OSError, ValueError, KeyError, MoecError):
        return None


@contextlib.contextmanager
def _compile_lock(path: str):
    """An exclusive advisory lock on `path` while one process compiles a
    cache entry; none where the cache cannot be written (the compile then
    runs unlocked, as without a cache)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _store(path: str, data: bytes) -> None:
    """Writes atomically (a concurrent reader sees all or nothing); a cache
    that cannot be written is not an error."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


