"""GPU checks (gpu_checks.py) under pytest: need torch, a CUDA GPU and the
bundles of `gpu_checks.py --prepare DIR` in MOEC_GPU_BUNDLES=DIR."""

import os

import pytest

BUNDLES = os.environ.get("MOEC_GPU_BUNDLES")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not BUNDLES, reason="MOEC_GPU_BUNDLES not set")]


@pytest.fixture(scope="module")
def checks():
    return pytest.importorskip("gpu_checks")


def test_aot_layer(checks):
    assert checks.check_aot_layer(BUNDLES) < 1e-2


def test_moe_module_matches_torch(checks):
    assert checks.check_moe_module(BUNDLES) <= 1e-2


def test_fp8_moe_module_against_float64(checks):
    assert checks.check_fp8_moe_module(BUNDLES) <= 0.1


def test_mixtral_names_and_routing(checks):
    assert checks.check_mixtral_names_and_routing(BUNDLES) < 1e-2


def test_cuda_array_interface(checks):
    checks.check_cuda_array_interface(BUNDLES)


def test_cuda_graph(checks):
    assert checks.check_cuda_graph(BUNDLES) < 1e-6


def test_validation(checks):
    checks.check_validation(BUNDLES)


def test_determinism(checks):
    checks.check_determinism(BUNDLES)


def test_empty_and_single_token(checks):
    checks.check_empty_and_single_token(BUNDLES)


def test_nan_confined(checks):
    checks.check_nan_confined(BUNDLES)
