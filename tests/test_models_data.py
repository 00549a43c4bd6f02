"""Model architectures, parameter counts and the recipe's fixed flags are data (software/models.yaml):
each cites the upstream file it was read from, a model added to a copy of the file alone reaches a
run's command line and its checkpoint budget, and a malformed entry is refused naming the field."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import ROOT
from test_workloads import MILES_01, merge, variant

from software import models as M
from workloads.derive.argv import miles_argv, preset
from workloads.derive.checkpoint_budget import model_params

MILES_V010 = json.loads((ROOT / "workloads" / "schemas" / "miles" / "v0.1.0-flags.json").read_text())["origin"]


def test_every_architecture_and_the_recipe_cite_the_miles_release_the_flags_were_vendored_from():
    cat = M.catalog()
    origins = [m.architecture.origin for m in cat.models.values()] + [cat.recipe.origin]
    for o in origins:
        assert (o.repository, o.tag, o.commit) == (MILES_V010["repository"], MILES_V010["tag"], MILES_V010["commit"])
        assert o.path.startswith("scripts/") and o.path.endswith(".py")
    assert len({o.path for o in origins}) == len(origins)


def test_an_fp8_release_is_its_models_architecture_and_parameters():
    cat = M.catalog()
    for name, m in cat.models.items():
        if m.fp8_native:  # released in FP8 only: the entry is its own FP8 release
            assert m.fp8_release is None and cat.model(name) is m
            continue
        assert m.fp8_release and cat.model(m.fp8_release) is cat.model(name) is m
        assert preset(m.fp8_release) == preset(name) == m.architecture.args
        layers = m.architecture.dimension("--num-layers")
        freq = m.architecture.args[m.architecture.args.index("--moe-layer-freq") + 1]
        assert freq.count("1") + freq.count("0") == layers
    assert cat.model("org/unknown") is None and preset("org/unknown") == []


NEW = "org/New-MoE-A1B"


def models_copy(tmp_path, edit=None):
    """software/models.yaml with ``NEW`` added (Qwen3-30B-A3B's entry, 12 layers and 7.5 B parameters)."""
    rows = yaml.safe_load(M.DATA.read_text())
    entry = json.loads(json.dumps(rows["models"]["Qwen/Qwen3-30B-A3B"]))
    args = entry["architecture"]["megatronArgs"]
    args[args.index("--num-layers") + 1] = "12"
    entry.update(paramsB=7.5, fp8Release=None, fp8Origin=None)
    rows["models"][NEW] = entry
    if edit:
        edit(rows)
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(rows))
    return path


def test_a_model_added_only_to_the_data_reaches_the_argv_and_the_checkpoint_budget(tmp_path, monkeypatch):
    """Before: a model without a preset in workloads/derive/argv.py needed modelArgs and modelParamsB."""
    monkeypatch.setattr(M, "catalog", lambda: M.load(models_copy(tmp_path)))
    cfg = variant("p5en-prod", merge(MILES_01, {"workloads": {"run": {"model": NEW}}}))
    argv = miles_argv(cfg)
    assert argv[argv.index("--num-layers") + 1] == "12" and argv[argv.index("--moe-layer-freq") + 1] == "[" + ",".join(
        ["1"] * 12) + "]"
    assert model_params(cfg) == 7.5e9


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["models"][NEW].pop("paramsB"), f"models.{NEW}.paramsB: Field required"),
    (lambda r: r["models"][NEW]["architecture"]["origin"].pop("blob"),
     f"models.{NEW}.architecture.origin.blob: Field required"),
    (lambda r: r["models"][NEW]["architecture"]["megatronArgs"].extend(["--moe-token-dispatcher-type", "alltoall"]),
     f"models.{NEW}.architecture: megatronArgs: --moe-token-dispatcher-type is set by the platform"),
    (lambda r: r["models"][NEW]["architecture"].update(megatronArgs=["--hidden-size", "64"]),
     f"models.{NEW}.architecture: megatronArgs: --num-layers with an integer value is required"),
    (lambda r: r["recipe"].pop("optimizer"), "recipe.optimizer: Field required"),
    (lambda r: r["models"][NEW].update(bf16Release="org/x-bf16", bf16Origin="card"),
     f"models.{NEW}: bf16Release: only an fp8Native model names its BF16 checkpoint"),
    (lambda r: r["models"][NEW].update(fp8Native=True, bf16Release="org/x-bf16"),
     f"models.{NEW}: bf16Origin: required exactly with bf16Release"),
    (lambda r: r["models"][NEW].update(fp8Native=True, fp8Release="org/x-fp8", fp8Origin="card"),
     f"models.{NEW}: fp8Release: an fp8Native model is its own FP8 release"),
])
def test_a_malformed_entry_is_refused_naming_the_field(tmp_path, edit, message):
    with pytest.raises(ValueError, match=rf"models.yaml: invalid\n(.*\n)*  {message}"):
        M.load(models_copy(tmp_path, edit))


DEEPSEEK = "deepseek-ai/DeepSeek-R1-0528"
ON_DEEPSEEK = {"workloads": {"run": {"model": DEEPSEEK}, "storage": {"capacityGib": 21600}}}


def test_a_model_released_in_fp8_only_serves_its_release_and_trains_from_its_named_bf16_upcast():
    """Before: a name without the -FP8 suffix was taken for BF16 experts, so the seed's DeepSeek engines
    ran as BF16 and the trainer loaded the FP8 files as its BF16 checkpoint."""
    from workloads.derive.deepep import expert_precision, ref_model
    cfg = variant("p5en-prod", merge(MILES_01, ON_DEEPSEEK))
    entry = M.catalog().model(DEEPSEEK)
    assert entry.fp8_native and expert_precision(cfg) == "fp8-blockwise"
    assert ref_model(cfg) == entry.bf16_release == "unsloth/DeepSeek-R1-0528-BF16"


def test_a_models_own_recipe_replaces_the_shared_precision_flags():
    """Miles' DeepSeek recipe leaves out --attention-backend flash (MLA); the Qwen runs keep it."""
    qwen = miles_argv(variant("p5en-prod", MILES_01))
    deepseek = miles_argv(variant("p5en-prod", merge(MILES_01, ON_DEEPSEEK)))
    assert "--attention-backend" in qwen and "--attention-backend" not in deepseek
    assert "--accumulate-allreduce-grads-in-fp32" in deepseek and "--multi-latent-attention" in deepseek
    assert deepseek[deepseek.index("--moe-layer-freq") + 1].startswith("[0,0,0,1,")
