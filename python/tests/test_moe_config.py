"""moec.MoEConfig (the one description of an MoE block, checked once),
moec.target_for, moec.compile of a Gradient and the compiler's error
messages. No torch needed."""

import dataclasses

import pytest

import moec
from moec import ops
from moec.layers import MoEConfig, moe_kernel


def test_config_is_frozen_hashable_and_normalized():
    config = MoEConfig(64, 32, 8, 2, dtype="bfloat16", tile={"n": 64, "m": 32})
    assert config.dtype == "bf16"
    assert config.tile == (("m", 32), ("n", 64))
    assert config.tile_dict == {"m": 32, "n": 64}
    assert config == MoEConfig(64, 32, 8, 2, tile=(("n", 64), ("m", 32)))
    assert hash(config) == hash(MoEConfig(64, 32, 8, 2, tile={"m": 32,
                                                              "n": 64}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.top_k = 4
    assert moec.MoEConfig is MoEConfig


@pytest.mark.parametrize("options,message", [
    (dict(hidden_size=0), r"'hidden_size': expected a positive int"),
    (dict(top_k=9), r"'top_k' \(9\) exceeds 'num_experts' \(8\): pick at"),
    (dict(routing="top1"), r"'routing': expected one of softmax_then_topk"),
    (dict(dtype="i32"), r"'dtype': expected torch.bfloat16"),
    (dict(lora_rank=-1), r"'lora_rank': expected an int >= 0 \(0: no LoRA\)"),
    (dict(lora_rank=True), r"'lora_rank': expected an int >= 0"),
    (dict(lora_alpha=8), r"'lora_alpha' needs 'lora_rank' > 0 \(set "
                         r"lora_rank, or leave lora_alpha out\)"),
    (dict(lora_rank=2, lora_alpha=0), r"'lora_alpha': expected a positive"),
    (dict(lora_rank=2, main_grad=True), r"'main_grad': a LoRA block .*use "
                                        r"main_grad=False"),
    (dict(main_grad=1), r"'main_grad': expected a bool"),
    (dict(save="some"), r"'save': expected one of all, matmuls, inputs"),
    (dict(scoring="relu"), r"'scoring': expected softmax or sigmoid"),
    (dict(num_groups=2), r"'num_groups' and 'topk_groups' go together"),
    (dict(num_groups=3, topk_groups=1), r"'num_groups' \(3\) must divide"),
    (dict(scaling_factor=0), r"'scaling_factor' must be positive"),
    (dict(tile={"q": 1}), r"'tile': unknown field 'q'"),
])
def test_config_errors_name_the_argument(options, message):
    fields = dict(hidden_size=64, intermediate_size=32, num_experts=8,
                  top_k=2)
    fields.update(options)
    with pytest.raises(ValueError, match=message):
        MoEConfig(**fields)


def test_config_of_keyword_constructors():
    base = MoEConfig(64, 32, 8, 2)
    assert MoEConfig.of(None, (64, 32, 8, 2)) == base
    assert MoEConfig.of(base) is base
    # Given sizes and options replace the config's fields (checked again).
    changed = MoEConfig.of(base, (None, None, 16, None), lora_rank=4)
    assert (changed.num_experts, changed.lora_rank) == (16, 4)
    with pytest.raises(ValueError, match="'top_k' \\(2\\) exceeds"):
        MoEConfig.of(base, (None, None, 1, None))
    with pytest.raises(TypeError, match="missing intermediate_size, top_k"):
        MoEConfig.of(None, (64, None, 8, None))
    with pytest.raises(TypeError, match="'config': expected a moec.MoEConfig"):
        MoEConfig.of({"hidden_size": 64})


def test_lora_scaling_and_router():
    assert MoEConfig(64, 32, 8, 2).lora_scaling == 1.0
    assert MoEConfig(64, 32, 8, 2, lora_rank=4).lora_scaling == 1.0
    assert MoEConfig(64, 32, 8, 2, lora_rank=4,
                     lora_alpha=16).lora_scaling == 4.0
    assert MoEConfig(64, 32, 8, 2).default_router
    assert not MoEConfig(64, 32, 8, 2, scoring="sigmoid").default_router


def test_moe_kernel_checks_through_the_config():
    with pytest.raises(ValueError, match="'lora_rank': expected an int >= 0"):
        moe_kernel(64, 32, 8, 2, lora_rank=-2)
    kernel = moe_kernel(64, 32, 8, 2, lora_rank=2)
    assert kernel.arg_names[4:] == ["gate_up_lora_a", "gate_up_lora_b",
                                    "down_lora_a", "down_lora_b"]


@pytest.mark.parametrize("device,target", [
    ("cpu", "host"), ("cuda", "sm_90a"), ("cuda:1", "sm_90a")])
def test_target_for(device, target):
    assert moec.target_for(device) == target


def test_target_for_rejects_other_devices():
    class Device:
        type = "mps"
    with pytest.raises(ValueError, match="'device': moec runs on 'cpu' and "
                                         "'cuda' devices, got"):
        moec.target_for(Device())
    with pytest.raises(TypeError, match="'device': expected a torch.device"):
        moec.target_for(3)


@pytest.mark.compiler
def test_config_compile_writes_the_block_entries():
    config = MoEConfig(32, 16, 4, 2, dtype="f32", lora_rank=2)
    bundle = config.compile("host")
    assert sorted(e.name for e in bundle.entries) == [
        "moe_block", "moe_block_fwd", "moe_block_grad"]
    # LoRA: the backward is to x and the four adapters.
    assert len(bundle.entry("moe_block_grad").outputs) == 5
    forward = config.compile("host", training=False)
    assert [e.name for e in forward.entries] == ["moe_block"]


@pytest.mark.compiler
def test_compile_takes_a_gradient():
    @moec.kernel
    def act(x: moec.Tensor["T", 8, "f32"]):
        return ops.swiglu(x)

    grad = act.grad()
    for source in (grad, grad.module):
        bundle = moec.compile(source, "host")
        assert sorted(e.name for e in bundle.entries) == [
            "act", "act_fwd", "act_grad"]
    # The forward functions keep the kernel's argument names.
    bundle = moec.compile(grad, "host")
    assert [b.name for b in bundle.entry("act_fwd").inputs] == ["x"]


BAD_MODULE = """
func.func @bad(%ids: tensor<?x2xi32>) -> tensor<?xi32> {
  %s, %slots, %o = moe.sort_by_expert %ids experts = 8
      : tensor<?x2xi32> -> tensor<?xi32>, tensor<?xi32>, tensor<4xi32>
  return %slots : tensor<?xi32>
}"""


@pytest.mark.compiler
def test_compile_errors_drop_the_op_dump(monkeypatch):
    monkeypatch.delenv("MOEC_DEBUG", raising=False)
    with pytest.raises(moec.CompileError) as info:
        moec.compile(BAD_MODULE, target="host", cache=False)
    message = str(info.value)
    # The readable message and the source line it is about stay.
    assert "error:" in message and "offsets" in message
    assert "%s, %slots, %o = moe.sort_by_expert %ids experts = 8" in message
    assert "see current operation" not in message
    assert '"moe.sort_by_expert"(' not in message  # the generic form
    monkeypatch.setenv("MOEC_DEBUG", "1")
    with pytest.raises(moec.CompileError) as info:
        moec.compile(BAD_MODULE, target="host", cache=False)
    assert "see current operation" in str(info.value)
