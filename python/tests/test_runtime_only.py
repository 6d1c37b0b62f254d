"""What works without the compiler: loading bundles compiled elsewhere.

`make test` compiles test/Integration/ops.mlir with the moec CLI and passes
the bundle in MOEC_TEST_BUNDLE; this file runs against both the full and the
runtime-only build of the package.
"""

import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec

BUNDLE = os.environ.get("MOEC_TEST_BUNDLE")
pytestmark = pytest.mark.skipif(not BUNDLE, reason="MOEC_TEST_BUNDLE not set")


def test_import_and_load_without_compiling():
    bundle = moec.load(BUNDLE)
    assert bundle.producer.startswith("moec")
    entry = bundle.entry("moe_layer", "sm_90a")
    assert entry.binary_kind in ("cubin", "ptx")
    assert [b.dims for b in entry.inputs][0] == ("T", "40")
    assert entry.outputs[0].dtype == "bf16"


def test_validation_runs_before_any_device_work():
    entry = moec.load(BUNDLE).entry("moe_layer", "sm_90a")
    x = np.zeros((4, 40), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="'arg0': expected an array on a CUDA "
                       "device"):
        entry(x, np.zeros((8, 40), ml_dtypes.bfloat16),
              np.zeros((8, 40, 40), ml_dtypes.bfloat16),
              np.zeros((8, 40, 20), ml_dtypes.bfloat16))
    with pytest.raises(ValueError, match=r"'arg1': expected rank 2"):
        entry(x, np.zeros((8, 40, 1), ml_dtypes.bfloat16),
              np.zeros((8, 40, 40), ml_dtypes.bfloat16),
              np.zeros((8, 40, 20), ml_dtypes.bfloat16))


def test_compiler_absence_is_explained():
    if moec.has_compiler():
        pytest.skip("this build has the compiler")
    with pytest.raises(ImportError, match="runtime-only build"):
        moec.compile("func.func @f() { return }", target="host")


def test_damaged_bundle_is_refused(tmp_path):
    # A bundle is code: one changed byte must stop it from loading at all.
    data = bytearray(open(BUNDLE, "rb").read())
    data[len(data) // 2] ^= 0x01
    damaged = tmp_path / "damaged.moecb"
    damaged.write_bytes(bytes(data))
    with pytest.raises(moec.MoecError, match="checksum mismatch .*the bundle "
                       "is damaged"):
        moec.load(damaged)
