"""A bundle given to an MoE block is checked against the block's
configuration (MoEConfig.check_bundle): the error names what differs and
the fix, and the block never compiles its own kernels in its place."""

import pytest

import moec

pytestmark = pytest.mark.compiler

BASE = dict(hidden_size=32, intermediate_size=16, num_experts=4, top_k=2,
            dtype="f32")


def config(**changes):
    return moec.MoEConfig(**{**BASE, **changes})


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """Host bundles of the base config and its variants (compiled once)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("MOEC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    made = {
        "base": config().compile("host"),
        "inference": config().compile("host", training=False),
        "lora": config(lora_rank=2).compile("host"),
        "main_grad": config(main_grad=True).compile("host"),
        "bf16": config(dtype="bf16").compile("host", training=False),
        "wider": config(intermediate_size=24).compile("host",
                                                      training=False),
    }
    patch.undo()
    return made


def test_a_fitting_bundle_passes(bundles):
    for training in (False, True):
        config().check_bundle(bundles["base"], "host", training)
    config().check_bundle(bundles["base"])
    config(lora_rank=2).check_bundle(bundles["lora"], "host", True)
    config(main_grad=True).check_bundle(bundles["main_grad"], "host", True)


@pytest.mark.parametrize("variant,block,training,message", [
    ("wider", {}, False,
     r"its moe_block \[host\] takes w_gate_up as \[4, 48, 32\] f32, the "
     r"block's w_gate_up is \[4, 32, 32\] f32 .*intermediate_size=16"),
    ("bf16", {}, False,
     r"takes x as \[T, 32\] bf16, the block's x is \[T, 32\] f32"),
    ("lora", {}, False,
     r"takes LoRA adapters \(gate_up_lora_a, .*\), the block has none"),
    ("base", {"lora_rank": 2}, False,
     r"takes no LoRA adapters, the block has lora_rank=2"),
    ("base", {"main_grad": True}, True,
     r"its moe_block_grad was compiled without main gradients, the block "
     r"has main_grad=True"),
    ("main_grad", {}, True,
     r"compiled with main gradients, the block has main_grad=False"),
    ("inference", {}, True,
     r"it has no moe_block_fwd for target 'host' \(a bundle compiled with "
     r"training=False\)"),
])
def test_a_bundle_that_does_not_fit_is_named(bundles, variant, block,
                                             training, message):
    with pytest.raises(ValueError, match=message) as info:
        config(**block).check_bundle(bundles[variant], "host", training)
    assert str(info.value).startswith("'bundle': ")
    assert "block.save_bundle(path" in str(info.value)  # the fix


def test_a_missing_target_names_the_fix(bundles):
    with pytest.raises(ValueError, match=r"no moe_block for target 'sm_90a'"
                       r".*block\.save_bundle\(path, target='sm_90a'\)"):
        config().check_bundle(bundles["base"], "sm_90a")


def test_a_bundle_without_the_block_entries(bundles):
    other = moec.compile(moec.kernel(
        lambda x: moec.ops.swiglu(x), name="act",
        signature={"x": moec.Tensor["T", 8, "f32"]}), "host")
    with pytest.raises(ValueError, match=r"none of the MoE block's entries "
                       r".*act \[host\]"):
        config().check_bundle(other)


def test_the_given_bundle_is_checked_as_given(bundles):
    # Without a target: the inputs of the entries the bundle has.
    with pytest.raises(ValueError, match="w_gate_up"):
        config().check_bundle(bundles["wider"])
    # The backward's kind is a training matter (checked on first use).
    config(main_grad=True).check_bundle(bundles["base"])


# -- moec.torch.MoE ---------------------------------------------------------

def torch_or_skip():
    return pytest.importorskip("torch")


def test_block_rejects_a_bundle_that_does_not_fit(bundles, monkeypatch):
    torch = torch_or_skip()
    import moec.torch

    with pytest.raises(ValueError, match=r"w_gate_up as \[4, 48, 32\]"):
        moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32,
                       bundle=bundles["wider"])
    with pytest.raises(ValueError, match="takes no LoRA adapters"):
        moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32, lora_rank=2,
                       bundle=bundles["base"])
    with pytest.raises(TypeError, match="'bundle'"):
        moec.torch.MoE(32, 16, 4, 2, bundle="qwen.moecb")

    # An inference bundle does not train: named, not silently compiled.
    def no_compile(*args, **kwargs):
        raise AssertionError("the block compiled its own kernels")
    monkeypatch.setattr(moec.torch._moe, "_compile", no_compile)
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32,
                           bundle=bundles["inference"])
    x = torch.randn(3, 32)
    with torch.no_grad():
        assert block(x).shape == (3, 32)
    with pytest.raises(ValueError, match="no moe_block_fwd for target "
                                         "'host'"):
        block(x.requires_grad_())
    # A bf16 bundle fits an f32 block under autocast only.
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32,
                           bundle=bundles["bf16"])
    with torch.no_grad(), pytest.raises(
            ValueError, match=r"takes x as \[T, 32\] bf16, the block's x is "
                              r"\[T, 32\] f32"):
        block(torch.randn(3, 32))


def test_block_compile_defaults_to_its_parameters_device():
    torch = torch_or_skip()
    import moec.torch
    block = moec.torch.MoE(32, 16, 4, 2, dtype=torch.float32)
    assert block.compile(training=False).targets == ["host"]
