"""Shared fixtures: a private compile cache, numpy helpers, skips."""

import numpy as np
import pytest

import moec


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test compiles into its own cache directory."""
    monkeypatch.setenv("MOEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def pytest_collection_modifyitems(config, items):
    skip_compiler = pytest.mark.skip(reason="moec._compiler (MLIR) not built")
    skip_cuda = pytest.mark.skip(reason="no CUDA GPU (or no torch)")
    cuda = _has_torch_cuda()
    for item in items:
        if "compiler" in item.keywords and not moec.has_compiler():
            item.add_marker(skip_compiler)
        if "cuda" in item.keywords and not cuda:
            item.add_marker(skip_cuda)


def _has_torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and moec.has_cuda()


def pytest_report_header(config):
    # Which package the suite runs against: make test installs it with pip.
    return f"moec {moec.__version__} from {moec.__path__[0]}"


def pytest_configure(config):
    config.addinivalue_line("markers", "compiler: needs moec._compiler")
    config.addinivalue_line("markers", "cuda: needs torch and a CUDA GPU")


@pytest.fixture
def rng():
    return np.random.default_rng(20261120)


def rel_error(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ in float64."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))
