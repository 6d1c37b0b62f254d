"""moec.cache (list, size, clear, the size cap with least-recently-used
eviction) and the compile log (MOEC_LOG, the line of a slow compile)."""

import logging
import os
import subprocess
import sys
import time

import pytest

import moec
import moec.cache
from moec import ops
from moec.compiler import _compile

pytestmark = pytest.mark.compiler


def make_kernel(cols=8):
    def act(x):
        return ops.swiglu(x)
    return moec.kernel(act, signature={"x": moec.Tensor["T", cols, "f32"]})


def bundle_files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                  if f.endswith(".moecb"))


def test_list_size_clear(private_cache):
    assert moec.cache.cache_dir() == moec.cache_dir() == str(private_cache)
    assert moec.cache.list() == [] and moec.cache.size() == 0
    moec.compile(make_kernel(8), "host")
    moec.compile(make_kernel(16), "host")
    entries = moec.cache.list()
    assert sorted(e.path for e in entries) == bundle_files(private_cache)
    assert all(len(e.key) == 64 and e.size > os.path.getsize(e.path)
               for e in entries)  # the bundle and its notes
    assert moec.cache.size() >= sum(e.size for e in entries)
    # Other files in the directory are not the cache's.
    mine = private_cache / "notes.txt"
    mine.write_text("keep me")
    freed = moec.cache.clear()
    assert freed >= sum(e.size for e in entries)
    assert moec.cache.list() == [] and moec.cache.size() == 0
    assert mine.read_text() == "keep me"
    # A cleared cache compiles afresh.
    moec.compile(make_kernel(8), "host")
    assert len(moec.cache.list()) == 1


def test_a_hit_touches_its_entry(private_cache):
    moec.compile(make_kernel(8), "host")
    [first] = moec.cache.list()
    moec.compile(make_kernel(16), "host")
    for entry in moec.cache.list():  # both used long ago
        os.utime(entry.path, (1e9, 1e9))
    moec.compile(make_kernel(8), "host")  # a hit
    newest, other = moec.cache.list()
    assert newest.key == first.key
    assert newest.last_used > time.time() - 60
    assert other.last_used == 1e9


def test_eviction_keeps_the_cache_under_its_cap(private_cache, monkeypatch):
    moec.compile(make_kernel(8), "host")
    one = moec.cache.list()[0]
    os.utime(one.path, (1e9, 1e9))  # the least recently used
    moec.compile(make_kernel(16), "host")
    two = [e for e in moec.cache.list() if e.key != one.key][0]
    os.utime(two.path, (2e9 - 1e8, 2e9 - 1e8))
    # Room for about two entries: the third write evicts the oldest.
    monkeypatch.setenv("MOEC_CACHE_MAX_BYTES",
                       str(one.size + two.size + max(one.size, two.size) // 2
                           + 512))
    moec.compile(make_kernel(32), "host")
    keys = {e.key for e in moec.cache.list()}
    assert one.key not in keys and two.key in keys and len(keys) == 2
    assert not os.path.exists(one.path)
    assert not os.path.exists(one.path[:-len(".moecb")] + ".json")
    # A cap below one entry keeps the entry just written, and only it.
    monkeypatch.setenv("MOEC_CACHE_MAX_BYTES", "1")
    moec.compile(make_kernel(64), "host")
    assert len(moec.cache.list()) == 1
    assert moec.cache.evict(cap=0) > 0 and moec.cache.list() == []


def test_max_bytes_setting(monkeypatch):
    monkeypatch.delenv("MOEC_CACHE_MAX_BYTES", raising=False)
    assert moec.cache.max_bytes() == moec.cache.DEFAULT_MAX_BYTES == 4 << 30
    for text, value in (("123", 123), ("2K", 2048), ("3M", 3 << 20),
                        ("1G", 1 << 30), ("5GiB", 5 << 30)):
        monkeypatch.setenv("MOEC_CACHE_MAX_BYTES", text)
        assert moec.cache.max_bytes() == value
    monkeypatch.setenv("MOEC_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="MOEC_CACHE_MAX_BYTES"):
        moec.cache.max_bytes()
    # Named before anything is compiled.
    with pytest.raises(ValueError, match="MOEC_CACHE_MAX_BYTES"):
        moec.compile(make_kernel(8), "host")
    assert moec.compile(make_kernel(8), "host", cache=False).targets == \
        ["host"]


def test_a_slow_compile_is_logged(private_cache, monkeypatch, capsys):
    monkeypatch.setattr(_compile, "SLOW_COMPILE_S", 0.0)  # every one is slow
    moec.compile(make_kernel(8), "host")
    err = capsys.readouterr().err
    assert "moec: compiled act for host in " in err
    assert "(cache miss)" in err
    moec.compile(make_kernel(8), "host")
    assert "(cache hit)" in capsys.readouterr().err
    # A fast compile prints nothing at the default level.
    monkeypatch.setattr(_compile, "SLOW_COMPILE_S", 3600.0)
    moec.compile(make_kernel(16), "host")
    assert capsys.readouterr().err == ""


def test_moec_log_debug_prints_every_compile_and_lookup(tmp_path):
    script = ("import moec\n"
              "from moec import ops\n"
              "k = moec.kernel(lambda x: ops.swiglu(x), name='act', "
              "signature={'x': moec.Tensor['T', 8, 'f32']})\n"
              "moec.compile(k, 'host'); moec.compile(k, 'host')\n")
    env = dict(os.environ, MOEC_LOG="debug",
               MOEC_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, check=True)
    lines = run.stderr.splitlines()
    assert sum("moec: cache miss for act" in l for l in lines) == 2  # + lock
    assert sum("moec: compiling act for host" in l for l in lines) == 1
    assert sum("moec: cache hit for act" in l for l in lines) == 1
    assert sum("(cache miss)" in l for l in lines) == 1
    assert sum("(cache hit)" in l for l in lines) == 1
    env["MOEC_LOG"] = "warning"
    quiet = subprocess.run([sys.executable, "-c", script], env=env,
                           capture_output=True, text=True, check=True)
    assert "moec:" not in quiet.stderr


@pytest.mark.skipif("MOEC_LOG" in os.environ, reason="MOEC_LOG is set")
def test_the_logger_is_moecs():
    logger = logging.getLogger("moec")
    assert logger is _compile.logger
    assert logger.level == logging.INFO  # MOEC_LOG unset: the default


def test_the_log_names_the_functions_of_mlir_text():
    # moec.torch compiles MLIR text: the log line names its functions
    # (`compiled moe_block_fwd, moe_block_grad for sm_90a in ...`).
    text = moec.ir(make_kernel(8))
    assert _compile._describe(text, {}) == "act"
    two = text + "\n" + text.replace("@act", "@other")
    assert _compile._describe(two.replace("module {", "", 1), {}) in (
        "act, other", "other, act")
    assert _compile._describe("module {}", {}) == "an MLIR module"


def test_compile_notes_are_warnings(monkeypatch, capsys):
    # A note of a fresh compile (ptxas missing, so PTX shipped; or ptxas
    # spilling registers) is logged at WARNING, not left in Bundle.notes
    # alone. The compiler module is the real one; its notes are made up.
    from moec.runtime import _native
    real = _native.compiler()
    data, _, _ = real.compile(moec.ir(make_kernel(8)), ["host"])

    class NotingCompiler:
        def __getattr__(self, name):
            return getattr(real, name)

        def compile(self, *args):
            return data, ["ptxas not found (...): install it"], []

    monkeypatch.setattr(_native, "compiler", lambda: NotingCompiler())
    bundle = moec.compile(make_kernel(8), "host", cache=False)
    assert bundle.notes == ["ptxas not found (...): install it"]
    assert "moec: compiling act: ptxas not found (...): install it" in \
        capsys.readouterr().err
