"""The default target follows the device (moec.target_for): the CUDA GPU's
target when one is visible, else "host"; the hint of a bundle called on
arrays of another device names a call that works."""

import numpy as np
import pytest

import moec
from moec import ops
from moec.compiler import _compile


def route_kernel():
    def route(logits):
        return ops.router_topk(logits, k=2, renormalize=True)
    return moec.kernel(route, signature={"logits": moec.Tensor["T", 8, "f32"]})


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without a usable GPU (as this CPU-only one is)."""
    monkeypatch.setattr(_compile._native, "has_cuda", lambda: False)
    monkeypatch.setattr(_compile, "_torch_capability", lambda index: None)
    _compile._default_target.cache_clear()
    _compile._cuda_target.cache_clear()
    yield
    _compile._default_target.cache_clear()
    _compile._cuda_target.cache_clear()


@pytest.fixture
def gpu(monkeypatch):
    """A machine whose CUDA device has the compute capability set in
    `gpu.capability` (through moec's CUDA runtime module)."""
    class Device:
        capability = (9, 0)

        def device_info(self):
            return {"capability": self.capability}
    device = Device()
    monkeypatch.setattr(_compile._native, "has_cuda", lambda: True)
    monkeypatch.setattr(_compile._native, "cuda", lambda: device)
    monkeypatch.setattr(_compile, "_torch_capability", lambda index: None)
    _compile._default_target.cache_clear()
    _compile._cuda_target.cache_clear()
    yield device
    _compile._default_target.cache_clear()
    _compile._cuda_target.cache_clear()


def test_target_of_capability():
    assert _compile.target_of_capability(9, 0) == "sm_90a"
    assert _compile.target_of_capability(8, 9) == "sm_89"
    assert _compile.target_of_capability(8, 0) == "sm_80"
    assert _compile.target_of_capability(10, 0) == "sm_100"


def test_target_for_without_a_gpu(no_gpu):
    assert moec.target_for() == "host"
    assert moec.target_for("cpu") == "host"
    # Asked for CUDA where none is visible: compiling for a GPU elsewhere.
    assert moec.target_for("cuda") == "sm_90a"
    with pytest.raises(ValueError, match="'device'"):
        moec.target_for("cuda:x")
    with pytest.raises(ValueError, match="'device'"):
        moec.target_for("tpu")


@pytest.mark.parametrize("capability,target", [((9, 0), "sm_90a"),
                                               ((8, 9), "sm_89"),
                                               ((8, 0), "sm_80")])
def test_target_for_follows_the_gpu(gpu, capability, target):
    gpu.capability = capability
    assert moec.target_for() == target
    assert moec.target_for("cuda") == target
    assert moec.target_for("cuda:0") == target
    assert moec.target_for("cpu") == "host"


def test_torch_device_index(gpu, monkeypatch):
    # torch (when imported) answers for the device of the tensors.
    class Dev:
        type, index = "cuda", 1
    seen = []

    def capability(index):
        seen.append(index)
        return (8, 9)
    monkeypatch.setattr(_compile, "_torch_capability", capability)
    assert moec.target_for(Dev()) == "sm_89"
    assert seen == [1]


@pytest.mark.compiler
def test_compile_defaults_to_the_host_without_a_gpu(no_gpu):
    kernel = route_kernel()
    logits = np.random.default_rng(0).random((4, 8), dtype=np.float32)
    for bundle in (moec.compile(kernel), kernel.compile(),
                   moec.MoEConfig(16, 8, 4, 2, dtype="f32").compile(
                       training=False)):
        assert bundle.targets == ["host"]
    weights, ids = moec.compile(kernel)(logits)
    assert weights.shape == ids.shape == (4, 2)


@pytest.mark.compiler
def test_compile_defaults_to_the_gpu(gpu):
    gpu.capability = (9, 0)
    assert moec.compile(route_kernel()).targets == ["sm_90a"]


@pytest.mark.compiler
def test_a_bundle_for_another_device_names_a_call_that_works(no_gpu):
    kernel = route_kernel()
    bundle = moec.compile(kernel, "sm_90a")
    logits = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError) as info:
        bundle(logits)
    message = str(info.value)
    assert "route [sm_90a]" in message
    assert "target='host'" in message
    # The call it names works.
    weights, _ = moec.compile(kernel, target="host")(logits)
    assert weights.shape == (4, 2)


@pytest.mark.compiler
def test_several_functions_name_an_entry_that_exists(no_gpu):
    text = moec.ir(route_kernel())
    other = text.replace("@route", "@route2").replace('"route"', '"route2"')
    if other == text:
        pytest.skip("the traced module names its function differently")
    module = text.rstrip().rstrip("}") + other[other.index("{") + 1:]
    try:
        bundle = moec.compile(module)
    except Exception:  # noqa: BLE001 - two modules do not merge this way
        pytest.skip("could not build a module with two functions")
    if len({e.name for e in bundle.entries}) < 2:
        pytest.skip("one function")
    with pytest.raises(ValueError,
                       match=r"bundle\.entry\('route2?', 'host'\)"):
        bundle(np.zeros((4, 8), np.float32))


def test_target_argument_checks():
    with pytest.raises(TypeError, match="'target'"):
        _compile._targets([3])
    with pytest.raises(ValueError, match="'target'"):
        _compile._targets([])
