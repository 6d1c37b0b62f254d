"""The autotuner's GPU half (moec.compiler.tune): manifest and cache handling run
anywhere; timing candidates needs a CUDA GPU (bench/ and the device runs)."""

import json
import os

import pytest

from moec.compiler import tune

MANIFEST = {
    "moec_tuning_manifest": 1,
    "target": "sm_90a",
    "ops": [{
        "key": "grouped_matmul bf16xbf16->bf16 E=4 K=64 N=128 gather k=2",
        "function": "layer", "k": 2,
        "args": ["lhs", "rhs", "offsets", "gather_slots"],
        "candidates": [
            {"entry": "tune0_0", "tile": "#moe.tile<a>", "default": True},
            {"entry": "tune0_1", "tile": "#moe.tile<b>", "default": False}],
    }],
}


def write(tmp_path, name, value):
    path = tmp_path / name
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return str(path)


def test_manifest_is_checked(tmp_path):
    assert tune.load_manifest(write(tmp_path, "m.json", MANIFEST)) == MANIFEST
    with pytest.raises(tune.TuneError, match="not a version 1 tuning manifest"):
        tune.load_manifest(write(tmp_path, "bad.json", {"ops": []}))
    with pytest.raises(tune.TuneError, match="manifest '.*broken.json'"):
        tune.load_manifest(write(tmp_path, "broken.json", "{"))
    # LoRA adapters are filled (random, like the weights), FP8 block scales
    # too (positive); a role the kernel does not have is not.
    lora = json.loads(json.dumps(MANIFEST))
    lora["ops"][0]["args"] += ["lora_a", "lora_b"]
    assert tune.load_manifest(write(tmp_path, "lora.json", lora)) == lora
    fp8 = json.loads(json.dumps(MANIFEST))
    fp8["ops"][0]["args"] += ["lhs_scales", "rhs_scales"]
    assert tune.load_manifest(write(tmp_path, "fp8.json", fp8)) == fp8
    unknown = json.loads(json.dumps(MANIFEST))
    unknown["ops"][0]["args"].append("weight_scales")
    with pytest.raises(tune.TuneError, match="cannot fill: weight_scales"):
        tune.load_manifest(write(tmp_path, "unknown.json", unknown))
    no_default = json.loads(json.dumps(MANIFEST))
    no_default["ops"][0]["candidates"].reverse()
    with pytest.raises(tune.TuneError, match="first candidate must be the default"):
        tune.load_manifest(write(tmp_path, "order.json", no_default))
    no_k = json.loads(json.dumps(MANIFEST))
    del no_k["ops"][0]["k"]
    with pytest.raises(tune.TuneError, match='"k" missing'):
        tune.load_manifest(write(tmp_path, "k.json", no_k))


def test_cache_merge_keeps_other_entries(tmp_path):
    def entry(key, rows, tile):
        return {"target": "sm_90a", "key": key, "max_rows": rows, "tile": tile}
    old = [entry("a", 4096, "t1"), entry("a", 16384, "t2"), entry("b", 64, "t3")]
    new = [entry("a", 16384, "t4"), entry("a", 1024, "t5")]
    merged = tune.merge_entries(old, new)
    assert [(e["key"], e["max_rows"], e["tile"]) for e in merged] == [
        ("a", 1024, "t5"), ("a", 4096, "t1"), ("a", 16384, "t4"),
        ("b", 64, "t3")]
    path = str(tmp_path / "cache.json")
    assert tune.load_cache(path) == []
    tune.write_cache(path, merged, "test device")
    assert tune.load_cache(path) == merged
    with pytest.raises(tune.TuneError, match="not a version 1 tuning cache"):
        tune.load_cache(write(tmp_path, "other.json", {"entries": []}))


def test_rows_and_symbols():
    assert tune.parse_rows("16384, 4096,4096") == [4096, 16384]
    with pytest.raises(tune.TuneError, match="--rows"):
        tune.parse_rows("4k")
    with pytest.raises(tune.TuneError, match="--rows"):
        tune.parse_rows("0")
    # Rows round down to whole tokens.
    assert tune.symbol_values(["T", "M"], 4099, 8) == {"M": 4096, "T": 512}
    assert tune.symbol_values(["M"], 3, 8) == {"M": 8, "T": 1}
    with pytest.raises(tune.TuneError, match="symbols the tuner does not know: R"):
        tune.symbol_values(["R"], 64, 1)


def test_main_reports_bad_arguments(tmp_path, capsys):
    bundle = write(tmp_path, "tune.moecb", "")
    assert tune.main([bundle, "-o", str(tmp_path / "c.json")]) == 2
    assert "manifest" in capsys.readouterr().err
    write(tmp_path, "tune.moecb.json", MANIFEST)
    assert tune.main([bundle, "-o", str(tmp_path / "c.json"),
                      "--rows", "x"]) == 2
    assert "--rows" in capsys.readouterr().err
    for skew in ("-1", "nan", "inf"):
        assert tune.main([bundle, "-o", str(tmp_path / "c.json"),
                          "--skew", skew]) == 2
        assert "--skew" in capsys.readouterr().err


def test_skewed_routing_favours_low_experts():
    # make test installs torch for this suite: missing there, it fails.
    if os.environ.get("MOEC_TEST_EXPECT_TORCH") != "1":
        pytest.importorskip("torch")
    import torch
    gen = torch.Generator().manual_seed(0)
    for tokenwise, k in ((True, 2), (False, 1)):
        flat = tune.routed_ids(4000, 4000 * k, 8, k, tokenwise, 0.0, gen,
                               device="cpu")
        counts = torch.bincount(flat, minlength=8)
        assert flat.numel() == 4000 * k and counts.min() > 0.8 * k * 500
        flat = tune.routed_ids(4000, 4000 * k, 8, k, tokenwise, 2.0, gen,
                               device="cpu")
        counts = torch.bincount(flat, minlength=8)
        assert flat.numel() == 4000 * k
        # Expert 0 takes most tokens (nearly all with k = 2, 79 % of
        # rows alone on the H200 run); the last expert is rare.
        assert counts[0] > 0.7 * 4000 and counts[7] < 0.05 * 4000 * k
        if tokenwise:  # k distinct experts per token
            assert (flat.view(-1, k).sort(dim=1).values.diff(dim=1) > 0).all()


def test_small_gains_keep_the_default_tile():
    entry = {"key": "a", "max_rows": 64, "tile": "best", "ms": 0.995,
             "default_ms": 1.0}
    assert tune.prefer_default(entry, "default", 0.01)["tile"] == "default"
    assert tune.prefer_default(entry, "default", 0.01)["ms"] == 1.0
    entry["ms"] = 0.98
    assert tune.prefer_default(entry, "default", 0.01)["tile"] == "best"
