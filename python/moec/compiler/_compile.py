"""Compiling kernels, functions or MLIR text to bundles, with an on-disk
cache; the target of a device."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import time
from typing import Optional, Sequence, Union

from .._version import __version__
from ..language._ir import kernel_name, signature_specs, trace
from ..runtime import Bundle, MoecError, _native
from ..runtime._args import is_positive_int
from . import _ptxas
from . import cache as _cache
from ._log import SLOW_COMPILE_S, logger
from .cache import cache_dir

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


@functools.lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """The package version and the compiler module's GNU build ID (the
    linker's SHA-1 of the module, our whole compiler with MLIR and LLVM
    linked in), else a SHA-256 of its bytes: a rebuilt compiler gives new
    cache keys, while the same build under another path or with another
    mtime (a reinstall, another venv) keeps them. Read without importing
    the module, so a cache hit never loads MLIR; the build ID is a read of a
    few bytes, where hashing the 130 MB module took 0.1-0.3 s. Not covered:
    ptxas, which assembles the cubins; after upgrading it, `moec cache
    clear`."""
    import importlib.util
    spec = importlib.util.find_spec("moec._compiler")
    if spec is None or not spec.origin:
        _native.compiler()  # raises the explanatory ImportError
    build_id = elf_build_id(spec.origin)
    if build_id:
        return f"moec {__version__} build-id {build_id}"
    digest = hashlib.sha256()
    with open(spec.origin, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return f"moec {__version__} {digest.hexdigest()}"


def elf_build_id(path: str) -> Optional[str]:
    """The hex of a 64-bit little-endian ELF file's NT_GNU_BUILD_ID note
    (its .note.gnu.build-id section), or None where it has none."""
    import struct
    with open(path, "rb") as file:
        header = file.read(64)
        if header[:6] != b"\x7fELF\x02\x01":  # ELF, 64-bit, little-endian
            return None
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        file.seek(shoff)
        table = file.read(shentsize * shnum)
        if len(table) < shentsize * shnum or shstrndx >= shnum:
            return None

        def section(i):  # (name offset, type, file offset, size)
            name, kind, _, _, offset, size = struct.unpack_from(
                "<IIQQQQ", table, i * shentsize)
            return name, kind, offset, size
        _, _, names_at, names_size = section(shstrndx)
        file.seek(names_at)
        names = file.read(names_size)
        for i in range(shnum):
            name, kind, offset, size = section(i)
            if kind != 7 or not names[name:].startswith(
                    b".note.gnu.build-id\0"):  # 7: SHT_NOTE
                continue
            file.seek(offset)
            note = file.read(size)
            namesz, descsz, note_type = struct.unpack_from("<III", note)
            desc_at = 12 + (namesz + 3) // 4 * 4
            if note_type == 3 and note[12:12 + namesz] == b"GNU\0":
                return note[desc_at:desc_at + descsz].hex()
    return None


def target_for(device=None) -> str:
    """The target moec compiles for to run on `device`: a torch.device, a
    device type ("cpu", "cuda") or a device string ("cuda:1"); None: the
    device this process runs kernels on, the CUDA GPU when one is visible
    (through moec's CUDA runtime module, else torch when it is already
    imported), else the CPU.

    "host" for the CPU. A CUDA GPU's target follows its compute
    capability: "sm_90a" for Hopper (9.0, the wgmma kernels), "sm_<major>
    <minor>" for the others ("sm_89": the NVVM kernels; "sm_80": the
    generic ones)."""
    if device is None:
        return _default_target()
    kind = getattr(device, "type", device)
    if not isinstance(kind, str):
        raise TypeError(f"'device': expected a torch.device or a string such "
                        f"as 'cpu' or 'cuda', got {type(device).__name__}")
    kind, _, index = kind.partition(":")
    if not isinstance(device, str) and isinstance(
            getattr(device, "index", None), int):  # a torch.device
        index = str(device.index)
    if kind == "cpu":
        return "host"
    if kind == "cuda":
        if index and not index.isdigit():
            raise ValueError(f"'device': expected 'cuda' or 'cuda:<index>', "
                             f"got {device!r}")
        return _cuda_target(int(index) if index else None)
    raise ValueError(f"'device': moec runs on 'cpu' and 'cuda' devices, got "
                     f"{device!r}")


def target_of_capability(major: int, minor: int) -> str:
    """The compile target of a CUDA compute capability: "sm_90a" for 9.0
    (the architecture-specific wgmma kernels), else "sm_<major><minor>"."""
    if (major, minor) == (9, 0):
        return "sm_90a"
    return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def _cuda_target(index: Optional[int]) -> str:
    """The target of CUDA device `index` (None: the current one); sm_90a
    where its capability cannot be read (no GPU here: compiling for one
    elsewhere)."""
    capability = _torch_capability(index)
    if capability is None and _native.has_cuda():  # the current device's
        try:
            capability = tuple(_native.cuda().device_info()["capability"])
        except Exception:  # noqa: BLE001 - unreadable: the default below
            capability = None
    if capability is None:
        return "sm_90a"
    return target_of_capability(*capability)


def _torch_capability(index: Optional[int]):
    """torch's compute capability of CUDA device `index` when torch is
    already imported and sees a GPU (moec does not import torch here)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability(index))
    except Exception:  # noqa: BLE001 - a torch without CUDA, a bad index
        return None


@functools.lru_cache(maxsize=1)
def _default_target() -> str:
    """target_for(None): the CUDA GPU's target when one is visible, else
    "host". Looked up once per process."""
    if _torch_capability(None) is not None or _native.has_cuda():
        return _cuda_target(None)
    return "host"


def _targets(target) -> list:
    if target is None:
        return [target_for(None)]
    targets = [target] if isinstance(target, str) else list(target)
    if not targets:
        raise ValueError("'target': give at least one target")
    for t in targets:
        if not isinstance(t, str):
            raise TypeError(f"'target': expected a target name such as "
                            f"'sm_90a' or 'host' (or a list of them), got "
                            f"{type(t).__name__}")
        if t not in TARGETS and not (t.startswith("sm_") or
                                     t.startswith("gfx")):
            raise ValueError(f"'target': unknown target {t!r} (expected "
                             f"{', '.join(TARGETS)})")
    return targets


def compile(source, target: Union[str, Sequence[str], None] = None,
            tile: Optional[dict] = None, *, cache: bool = True,
            keep_assembly: bool = False,
            sm_count: Optional[int] = None) -> Bundle:
    """Compiles a kernel (or function, MLIR text, .mlir path) to a Bundle.

    `target`: "sm_90a" (cubin; PTX when ptxas is missing), another
    "sm_<NN>", "gfx942", "host", or a list; None (the default): the target
    of the device kernels run on here, `target_for()` (the CUDA GPU's when
    one is visible, else "host"). `tile`: matmul tile fields replacing the
    cost model's ({"m", "n", "k", "threads"}). `sm_count`: the SMs sm_90a's persistent
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
    what = _describe(source, arg_names)
    start = time.perf_counter()

    def compile_now():
        logger.debug("compiling %s for %s", what, ", ".join(targets))
        compiler = _native.compiler()
        _ptxas.use_pip_ptxas(compiler)
        result = compiler.compile(text, targets, tile_options,
                                  keep_assembly, sm_count or 0)
        for note in result[1]:  # ptxas missing, or spilling registers
            logger.warning("compiling %s: %s", what, note)
        return result
    key = None
    if cache:
        cap = _cache.max_bytes()  # a malformed setting fails before a compile
        key = hashlib.sha256(json.dumps(
            [text, targets, tile_options, keep_assembly, sm_count,
             compiler_fingerprint()]).encode()).hexdigest()
        path = os.path.join(cache_dir(), key[:2], key + ".moecb")
        meta_path = path[:-len(".moecb")] + ".json"
        cached = _lookup(path, meta_path, kwargs, what)
        if cached is not None:
            _log_compile(what, targets, start, "cache hit")
            return cached
        # A miss. The ranks of a job on one machine ask for the same
        # kernels at once: one compiles, the others wait and read its entry.
        with _compile_lock(path + ".lock"):
            cached = _lookup(path, meta_path, kwargs, what)
            if cached is not None:
                _log_compile(what, targets, start,
                             "cache hit, after waiting for another process")
                return cached
            data, notes, assembly = compile_now()
            # The notes first: an entry is complete once its bundle is
            # there (moec.cache lists bundles).
            _store(meta_path, json.dumps({
                "notes": list(notes), "assembly": list(assembly)}).encode())
            _store(path, data)
        freed = _cache.evict(keep=path, cap=cap)
        if freed:
            logger.debug("evicted %d bytes of least recently used cache "
                         "entries (cap %d bytes, MOEC_CACHE_MAX_BYTES)",
                         freed, cap)
        _log_compile(what, targets, start, "cache miss")
    else:
        data, notes, assembly = compile_now()
        _log_compile(what, targets, start, "cache off")
    return Bundle.from_bytes(data, notes=notes, assembly=assembly, **kwargs)


def _describe(source, arg_names: dict) -> str:
    """What is compiled, for the log: the kernel's or functions' names."""
    name = getattr(source, "name", None)
    if isinstance(name, str):
        return name
    if arg_names:
        return ", ".join(arg_names)
    if isinstance(source, os.PathLike) or (
            isinstance(source, str) and source.endswith(".mlir")
            and "\n" not in source):
        return os.fspath(source)
    # MLIR text (moec.torch's blocks): its public functions' names.
    names = re.findall(r"func\.func @([\w$.]+)\(", str(source))
    return ", ".join(names) if names else "an MLIR module"


def _log_compile(what: str, targets: list, start: float, how: str) -> None:
    """The compile's log line: at INFO when it took longer than
    SLOW_COMPILE_S, else at DEBUG."""
    seconds = time.perf_counter() - start
    level = logging.INFO if seconds > SLOW_COMPILE_S else logging.DEBUG
    logger.log(level, "compiled %s for %s in %.2f s (%s)", what,
               ", ".join(targets), seconds, how)


def _lookup(path: str, meta_path: str, kwargs: dict,
            what: str) -> Optional[Bundle]:
    """_read_cached, logged (DEBUG), and the entry touched on a hit (the
    least recently used entries are evicted first)."""
    cached = _read_cached(path, meta_path, kwargs)
    logger.debug("cache %s for %s: %s", "hit" if cached else "miss", what,
                 path)
    if cached is not None:
        _cache.touch(path)
    return cached


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


