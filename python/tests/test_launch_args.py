"""Every launch argument is validated before anything runs."""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec
from moec import ops

pytestmark = pytest.mark.compiler


@pytest.fixture(scope="module")
def grouped():
    @moec.kernel
    def grouped(x: moec.Tensor["T", 12, "f32"], ids: moec.Tensor["T", 2, "i32"],
                w: moec.Tensor[4, 12, 6, "f32"]):
        _, slots, offsets = ops.sort_by_expert(ids, 4)
        rows = ops.permute(x, slots, offsets, k=2)
        return ops.grouped_matmul(rows, w, offsets)

    return grouped.compile("host", cache=False).entry("grouped")


def args(rng, tokens=5):
    return (rng.standard_normal((tokens, 12)).astype(np.float32),
            rng.integers(0, 4, (tokens, 2)).astype(np.int32),
            rng.standard_normal((4, 12, 6)).astype(np.float32))


def test_entry_describes_itself(grouped):
    assert [b.name for b in grouped.inputs] == ["x", "ids", "w"]
    assert grouped.inputs[0].dims == ("T", "12")
    assert grouped.outputs[0].dims == ("T*2", "6")
    assert "grouped [host]" in repr(grouped)


def test_runs_and_sizes_follow_T(grouped, rng):
    for tokens in (1, 7):
        out = grouped(*args(rng, tokens))
        assert out.shape == (2 * tokens, 6)


@pytest.mark.parametrize("mutate,message", [
    (lambda a: (a[0].astype(np.float64), a[1], a[2]),
     "'x': expected element type f32, got float64"),
    (lambda a: (a[0], a[1], a[2][:, :, :5].copy()),
     r"'w': expected shape \[4, 12, 6\], got \[4, 12, 5\]"),
    (lambda a: (a[0], a[1][:3], a[2]),
     r"'ids': expected shape \[5, 2\], got \[3, 2\]"),
    (lambda a: (a[0][None], a[1], a[2]), "'x': expected rank 2"),
    (lambda a: (np.asfortranarray(a[0]), a[1], a[2]),
     "'x': must be contiguous"),
    (lambda a: (a[0], np.full_like(a[1], 4), a[2]),
     r"'ids': expert ids must be in \[0, 4\), got values in \[4, 4\]"),
    (lambda a: (a[0], a[1], [1, 2]), "'w': expected a torch tensor, a numpy"),
])
def test_bad_arguments_raise_naming_them(grouped, rng, mutate, message):
    with pytest.raises((ValueError, TypeError), match=message):
        grouped(*mutate(args(rng)))


def test_argument_count_and_out(grouped, rng):
    x, ids, w = args(rng)
    with pytest.raises(TypeError, match=r"takes 3 inputs \(x, ids, w\), got 2"):
        grouped(x, ids)
    with pytest.raises(ValueError, match=r"'out\[result0\]': expected shape"):
        grouped(x, ids, w, out=np.empty((3, 6), np.float32))
    with pytest.raises(ValueError, match="'out': grouped has 1 outputs, got 2"):
        grouped(x, ids, w, out=(np.empty((10, 6), np.float32),) * 2)


def test_values_check_can_be_skipped(grouped, rng):
    x, ids, w = args(rng)
    ids[0, 0] = 1  # still in range: skipping the check changes nothing
    a = grouped(x, ids, w)
    b = grouped(x, ids, w, check_values=False)
    np.testing.assert_array_equal(a, b)


def test_cuda_entry_rejects_host_arrays(rng, tmp_path):
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "bf16"]):
        return ops.swiglu(x)

    bundle = act.compile("sm_90a")
    x = rng.standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="'x': expected an array on a CUDA "
                       "device for this entry, got one on cpu"):
        bundle.entry("act", "sm_90a")(x)


def test_nf4_expert_indices_checked(rng):
    @moec.kernel
    def nf4(packed: moec.Tensor[4, 6, 8, "ui8"], absmax: moec.Tensor[4, 6, "f32"],
            codebook: moec.Tensor[16, "f32"], experts: moec.Tensor[3, "i32"]):
        return ops.dequantize(packed, absmax, group_size=16,
                              codebook=codebook, experts=experts)

    args = [rng.integers(0, 256, (4, 6, 8)).astype(np.uint8),
            rng.random((4, 6)).astype(np.float32),
            np.linspace(-1, 1, 16).astype(np.float32),
            np.array([2, 0, 3], np.int32)]
    out = nf4(*args)
    assert out.shape == (3, 6, 16)
    # expert 2's first byte: high nibble is column 0, low nibble column 1
    byte = args[0][2, 0, 0]
    assert float(out[0, 0, 0]) == pytest.approx(
        float(args[2][byte >> 4] * args[1][2, 0]), rel=1e-2)
    assert float(out[0, 0, 1]) == pytest.approx(
        float(args[2][byte & 15] * args[1][2, 0]), rel=1e-2)
    args[3][1] = 4
    with pytest.raises(ValueError, match=r"'experts': expert indices must be "
                       r"in \[0, 4\)"):
        nf4(*args)


class FakeCudaArray:
    """A device array by __cuda_array_interface__ at a chosen address (no
    GPU needed: the checks run before any launch)."""

    def __init__(self, address, shape, typestr="<f4"):
        self.__cuda_array_interface__ = dict(
            data=(address, False), shape=shape, typestr=typestr, strides=None,
            version=3)


def test_repeated_layout_still_checks_addresses():
    # A layout that passed once is cached with its shapes; the addresses,
    # which the layout does not decide, are checked on every call.
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "f32"]):
        return ops.swiglu(x)

    entry = act.compile("sm_90a").entry("act", "sm_90a")
    # A wrong `out` stops every call after the input checks, before any
    # launch (so nothing runs at these made-up addresses, GPU or not).
    out = FakeCudaArray(1 << 20, (3, 5))
    with pytest.raises(ValueError, match=r"'out\[result0\]': expected "
                                         r"shape \[3, 4\]"):
        entry(FakeCudaArray(1 << 20, (3, 8)), out=out)
    assert len(entry._checked) == 1
    with pytest.raises(ValueError, match="'x': device address 0x100004 is not "
                                         "16-byte aligned"):
        entry(FakeCudaArray((1 << 20) + 4, (3, 8)), out=out)
    with pytest.raises(ValueError, match="'x': null data pointer"):
        entry(FakeCudaArray(0, (3, 8)), out=out)
    with pytest.raises(ValueError, match=r"'x': expected shape \[3, 8\]|"
                                         r"'x': expected element type f32"):
        entry(FakeCudaArray(1 << 20, (3, 8), "<f8"), out=out)
