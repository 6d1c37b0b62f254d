"""LoRA ranks that are not a multiple of 8 (moe-pad-lora-rank).

The pass zero-pads bf16 adapters to the next multiple of 8 so that the
sm_90a kernels take them, and slices the adapter gradients back. These
tests run the padded programs on the host backend against float64 math
written here, independent of the compiler: the LoRA forward, its input
gradient (`transpose_lora`) and moe.lora_grad, with an expert that has no
rows, one that has one, and ranks 3, 4 and 12 (8: nothing is padded).
"""

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import moec

from conftest import rel_error

pytestmark = pytest.mark.compiler

BF16 = ml_dtypes.bfloat16
E, K, N = 4, 40, 24
SCALE = 2.0

_SOURCE = """
func.func @forward(%x: tensor<?x{K}xbf16>, %w: tensor<{E}x{N}x{K}xbf16>,
                   %o: tensor<{E}xi32>, %a: tensor<{R}x{K}xbf16>,
                   %b: tensor<{N}x{R}xbf16>) -> tensor<?x{N}xbf16> {{
  %y = moe.grouped_matmul %x, %w, %o
      lora(%a, %b : tensor<{R}x{K}xbf16>, tensor<{N}x{R}xbf16>)
      {{transpose_rhs, lora_scaling = {S} : f32}}
      : tensor<?x{K}xbf16>, tensor<{E}x{N}x{K}xbf16>, tensor<{E}xi32>
      -> tensor<?x{N}xbf16>
  return %y : tensor<?x{N}xbf16>
}}

func.func @input_grad(%dy: tensor<?x{N}xbf16>, %w: tensor<{E}x{N}x{K}xbf16>,
                      %o: tensor<{E}xi32>, %a: tensor<{R}x{K}xbf16>,
                      %b: tensor<{N}x{R}xbf16>) -> tensor<?x{K}xbf16> {{
  %dx = moe.grouped_matmul %dy, %w, %o
      lora(%a, %b : tensor<{R}x{K}xbf16>, tensor<{N}x{R}xbf16>)
      {{transpose_lora, lora_scaling = {S} : f32}}
      : tensor<?x{N}xbf16>, tensor<{E}x{N}x{K}xbf16>, tensor<{E}xi32>
      -> tensor<?x{K}xbf16>
  return %dx : tensor<?x{K}xbf16>
}}

func.func @adapter_grads(%x: tensor<?x{K}xbf16>, %dy: tensor<?x{N}xbf16>,
                         %o: tensor<{E}xi32>, %a: tensor<{R}x{K}xbf16>,
                         %b: tensor<{N}x{R}xbf16>)
    -> (tensor<{R}x{K}xf32>, tensor<{N}x{R}xbf16>) {{
  %da, %db = moe.lora_grad %x, %dy, %o
      lora(%a, %b : tensor<{R}x{K}xbf16>, tensor<{N}x{R}xbf16>)
      {{lora_scaling = {S} : f32}}
      : tensor<?x{K}xbf16>, tensor<?x{N}xbf16>, tensor<{E}xi32>
      -> tensor<{R}x{K}xf32>, tensor<{N}x{R}xbf16>
  return %da, %db : tensor<{R}x{K}xf32>, tensor<{N}x{R}xbf16>
}}
"""


def _source(rank):
    return _SOURCE.format(K=K, N=N, E=E, R=E * rank, S=SCALE)


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


def _groups(offsets):
    start = 0
    for e, end in enumerate(offsets):
        yield e, slice(start, int(end))
        start = int(end)


def _reference(x, dy, w, offsets, a, b, rank):
    """Forward, input gradient, dA and dB in float64, expert by expert."""
    x, dy, w, a, b = (np.asarray(t, np.float64) for t in (x, dy, w, a, b))
    y = np.zeros((x.shape[0], N))
    dx = np.zeros((x.shape[0], K))
    da, db = np.zeros_like(a), np.zeros_like(b)
    for e, rows in _groups(offsets):
        ae, be = a[e * rank:(e + 1) * rank], b[:, e * rank:(e + 1) * rank]
        u, du = x[rows] @ ae.T, SCALE * (dy[rows] @ be)
        y[rows] = x[rows] @ w[e].T + SCALE * u @ be.T
        dx[rows] = dy[rows] @ w[e] + du @ ae
        da[e * rank:(e + 1) * rank] = du.T @ x[rows]
        db[:, e * rank:(e + 1) * rank] = SCALE * dy[rows].T @ u
    return y, dx, da, db


@pytest.mark.parametrize("rank", [3, 4, 12, 8])
@pytest.mark.parametrize("counts", [(0, 5, 1, 9), (0, 0, 0, 1), (7, 0, 0, 0)])
def test_padded_rank_matches_float64(rank, counts):
    source = _source(rank)
    optimized = moec.ir(source, stage="optimized")
    # Padded exactly where the rank is not a multiple of 8: adapters in,
    # gradients out.
    assert (optimized.count("tensor.pad") == 6) == (rank % 8 != 0)
    assert (optimized.count("tensor.extract_slice") == 2) == (rank % 8 != 0)
    rng = np.random.default_rng(100 * rank + sum(counts))
    rows = sum(counts)
    offsets = np.cumsum(counts).astype(np.int32)
    x, dy = _bf16(rng, rows, K), _bf16(rng, rows, N)
    w = _bf16(rng, E, N, K)
    a, b = _bf16(rng, E * rank, K), _bf16(rng, N, E * rank)
    bundle = moec.compile(source, target="host", cache=False)
    y = bundle["forward"](x, w, offsets, a, b)
    dx = bundle["input_grad"](dy, w, offsets, a, b)
    da, db = bundle["adapter_grads"](x, dy, offsets, a, b)
    want = _reference(x, dy, w, offsets, a, b, rank)
    for name, got, ref in zip(["y", "dx", "da", "db"], [y, dx, da, db], want):
        assert got.shape == ref.shape, name
        # bf16 results: one rounding of values of order 1-10.
        assert rel_error(got, ref) < 1e-2, name
    # Experts without rows get zero gradients (no padding leaks in).
    for e, rows_of in _groups(offsets):
        if rows_of.start == rows_of.stop:
            assert not np.any(np.asarray(da[e * rank:(e + 1) * rank], np.float64))
            assert not np.any(np.asarray(db[:, e * rank:(e + 1) * rank],
                                         np.float64))
