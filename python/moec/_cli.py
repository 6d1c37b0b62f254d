"""The package's `moec` command. `moec cache ...` is answered here: the
compile cache is the Python package's (moec.cache). Every other command is
the compiler's command line (lib/Cli, also build/bin/moec), run in-process
through moec._compiler.cli_main."""

from __future__ import annotations

import sys
import time
from typing import Optional, Sequence

from .compiler import _ptxas, cache

_CACHE_USAGE = """\
usage: moec cache list|size|clear|path

The on-disk compile cache of moec.compile, moec.torch.MoE and @moec.kernel
(moec.cache; its directory is $MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec,
else ~/.cache/moec, and $MOEC_CACHE_MAX_BYTES caps it, default 4G, by
evicting the least recently used entries).

  list    the entries, most recently used first: key, size, last use, path
  size    the bytes of every cache file
  clear   removes every entry (say after upgrading moec or the CUDA driver)
  path    the cache's directory
"""


def _human(n: float) -> str:
    """Bytes as B, KiB, MiB or GiB."""
    units = ("B", "KiB", "MiB", "GiB")
    unit = 0
    while n >= 1024 and unit < len(units) - 1:
        n, unit = n / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{n:.1f} {units[unit]}"


def cache_command(args: Sequence[str]) -> int:
    """`moec cache ARGS`; the exit code (2: a bad call)."""
    if not args or args[0] in ("-h", "--help"):
        print(_CACHE_USAGE, end="", file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    action, rest = args[0], args[1:]
    if rest:
        print(f"moec: error: 'cache {action}' takes no arguments, got "
              f"{' '.join(rest)!r}", file=sys.stderr)
        return 2
    if action == "list":
        entries = cache.list()
        for e in entries:
            used = time.strftime("%Y-%m-%d %H:%M:%S",
                                 time.localtime(e.last_used))
            print(f"{e.key[:16]}  {_human(e.size):>10}  {used}  {e.path}")
        print(f"{len(entries)} entries, {_human(cache.size())} in "
              f"{cache.cache_dir()}")
    elif action == "size":
        print(cache.size())
    elif action == "clear":
        freed = cache.clear()
        print(f"removed {_human(freed)} from {cache.cache_dir()}")
    elif action == "path":
        print(cache.cache_dir())
    else:
        print(f"moec: error: unknown cache command {action!r}\n"
              + _CACHE_USAGE, end="", file=sys.stderr)
        return 2
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if len(argv) > 1 and argv[1] == "cache":
        return cache_command(argv[2:])
    try:
        from . import _compiler
    except ImportError:
        print("moec: error: this is moec's runtime-only package, which has "
              "no compiler: install the full wheel, or run `moec cache` "
              "only", file=sys.stderr)
        return 1
    _ptxas.use_pip_ptxas(_compiler)
    # Python's buffered output first: the compiler writes to fd 1 and 2.
    sys.stdout.flush()
    sys.stderr.flush()
    return _compiler.cli_main(["moec", *argv[1:]])
