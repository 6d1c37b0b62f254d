"""moec.cache: the on-disk compile cache that `moec.compile` keeps.

    moec.cache.list()    # the entries, most recently used first
    moec.cache.size()    # their bytes
    moec.cache.clear()   # removes them (e.g. after upgrading LLVM/MLIR)
    moec.cache.evict(cap=1 << 30)   # the least recently used, down to 1 GiB

It lives in `cache_dir()`: $MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec, else
~/.cache/moec. An entry is a bundle (<key>.moecb) and its notes
(<key>.json) under a folder named by the key's first two hex digits; a hit
touches the bundle's mtime, and a write evicts the least recently used
entries while the cache holds more than `max_bytes()`
($MOEC_CACHE_MAX_BYTES, default 4 GiB). Only these files are listed,
counted or removed: other files in the directory are left alone.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import re
from typing import Optional

__all__ = ["DEFAULT_MAX_BYTES", "CacheEntry", "cache_dir", "clear", "evict",
           "list", "max_bytes", "size", "touch"]

#: The cap without $MOEC_CACHE_MAX_BYTES: 4 GiB (a bundle is a few MB).
DEFAULT_MAX_BYTES = 4 << 30

_KEY = re.compile(r"^[0-9a-f]{64}$")
# What one entry writes: the bundle, its notes, and the lock of its compile.
_SUFFIXES = (".moecb", ".json", ".lock")


def cache_dir() -> str:
    """$MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec, else ~/.cache/moec."""
    if os.environ.get("MOEC_CACHE_DIR"):
        return os.environ["MOEC_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moec")


def max_bytes() -> int:
    """The cache's size cap: $MOEC_CACHE_MAX_BYTES (bytes; a K, M or G
    suffix multiplies by 1024, 1024², 1024³), else DEFAULT_MAX_BYTES."""
    text = os.environ.get("MOEC_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    match = re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", text)
    if not match:
        raise ValueError(f"MOEC_CACHE_MAX_BYTES: expected a number of bytes "
                         f"such as 4294967296 or 4G, got {text!r} (unset it "
                         f"for the default, 4G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    return int(match.group(1)) * scale[match.group(2).lower()]


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One cached compile: its key (a SHA-256 of the IR, the options and
    the compiler build), the bundle's path, the bytes of its files and when
    it was last used (written or hit; seconds since the epoch)."""
    key: str
    path: str
    size: int
    last_used: float


def list() -> builtins.list:  # noqa: A001 - moec.cache.list() reads well
    """The cache's entries (CacheEntry), most recently used first."""
    entries = []
    for key, files in _entry_files(cache_dir()).items():
        bundle = files.get(".moecb")
        if bundle is None:  # a lock or notes alone: a compile under way
            continue
        try:
            last_used = os.stat(bundle).st_mtime
        except OSError:
            continue
        entries.append(CacheEntry(key, bundle, _bytes(files.values()),
                                  last_used))
    entries.sort(key=lambda e: e.last_used, reverse=True)
    return entries


def size() -> int:
    """The bytes of every cache file (entries, and compiles under way)."""
    return sum(_bytes(files.values())
               for files in _entry_files(cache_dir()).values())


def clear() -> int:
    """Removes every entry; returns the bytes freed. Safe while other
    processes compile: they write their entries afresh."""
    freed = 0
    for files in _entry_files(cache_dir()).values():
        freed += _remove(files.values())
    return freed


def touch(path: str) -> None:
    """Marks the entry whose bundle is `path` as just used (a hit)."""
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache still serves hits


def evict(keep: Optional[str] = None, cap: Optional[int] = None) -> int:
    """Removes the least recently used entries while the cache holds more
    than `cap` bytes (default: max_bytes()); never the entry whose bundle
    is `keep` (the one just written). Returns the bytes freed."""
    cap = max_bytes() if cap is None else cap
    entries = list()
    total = size()
    freed = 0
    for entry in reversed(entries):  # least recently used first
        if total - freed <= cap:
            break
        if entry.path == keep:
            continue
        freed += _remove(_files_of(entry.path))
    return freed


def _entry_files(root: str) -> dict:
    """{key: {suffix: path}} of the cache's files under `root`."""
    found: dict = {}
    try:
        shards = os.listdir(root)
    except OSError:
        return found
    for shard in shards:
        if not re.fullmatch(r"[0-9a-f]{2}", shard):
            continue
        folder = os.path.join(root, shard)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            stem, dot, suffix = name.partition(".")
            if (_KEY.match(stem) and stem.startswith(shard)
                    and dot + suffix in _SUFFIXES):
                found.setdefault(stem, {})[dot + suffix] = os.path.join(
                    folder, name)
    return found


def _files_of(bundle_path: str) -> builtins.list:
    stem = bundle_path[:-len(".moecb")]
    return [stem + suffix for suffix in _SUFFIXES]


def _bytes(paths) -> int:
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    return total


def _remove(paths) -> int:
    freed = 0
    for path in paths:
        try:
            bytes_ = os.stat(path).st_size
            os.remove(path)
        except OSError:
            continue
        freed += bytes_
    return freed
