"""One place per instance fact: the GPU records and family entries of catalog/data/gpu-facts.json.

Every family a stack runs on defines every field; a new family added to a copy of the catalog's data
alone gets its NCCL environment, GIN type, burn-in allowance and fabric figures from its entry; a
missing field or entry is refused naming the catalog field, never defaulted."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
from test_workloads import variant

import catalog
from catalog.facts import Family, Gpu
from nodes.burn_in import plans
from stackconfig.files import raw_stack, stack_names
from stackconfig.stack import StackConfigError
from workloads.acceptance import family_of
from workloads.acceptance.compare import floor_of
from workloads.derive import moe_backend as moe
from workloads.derive.model import derive

CHECKED = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300")
"""The families the platform's stacks are written for."""


def stack_gpu_families() -> set[str]:
    """The families of every train and rollout pool of every stack file."""
    out = set()
    for name in stack_names():
        for pool in raw_stack(name)["pools"]:
            if pool["role"] in ("train", "rollout"):
                out.add(catalog.CATALOG[pool["instanceType"]].family)
    return out


def test_every_stack_family_is_hand_checked_and_defines_every_field():
    assert stack_gpu_families() <= set(CHECKED)
    for name in CHECKED:
        fam = catalog.FACTS.families[name]
        assert fam.fabric is not None, name
        assert fam.burn_in_nccl_seconds > 0 and isinstance(fam.gin_gda, bool), name
        for figure in ("node_all_reduce", "pair_all_reduce", "world_all_reduce"):
            assert getattr(fam.fabric, figure) is not None, (name, figure)
        for t, given in fam.types.items():
            row = catalog.CATALOG[t]
            assert row.hand_checked and row.family == name
            assert {"efa_generation", "efa_gbps", "nvme_disks", "nvme_disk_gb"} <= set(given.given()), t
            measured = {"smi_memory_mib"} if row.gpu.smi_memory_mib else set()  # only where measured
            assert set(Gpu.model_fields) - {"origin", "smi_memory_mib"} | measured <= set(row.gpu.origin), t
        assert set(Family.model_fields) - {"origin", "fabric"} <= set(fam.origin), name


def test_every_gpu_model_of_the_generated_rows_has_a_record():
    models = {t.gpu_model for t in catalog.CATALOG.values() if t.is_gpu}
    assert models <= set(catalog.FACTS.gpus) and {"L40S", "A10G", "RTX-PRO-SERVER-6000"} <= models
    assert catalog.gpu("B300").sm == 103 and catalog.gpu("H200").sm == 90 and not catalog.gpu("A100").nvls


def test_the_g_families_gpus_go_through_the_moe_rules_not_a_hidden_table():
    """L40S (g6e) runs NCCL all-to-all and refuses DeepEP by the SM90 rule; an SM120 GPU (g7e) refuses
    DeepEP because SGLang turns DeepGEMM off there (test_moe_backend reads the wheel)."""
    assert moe.choose("bf16", 1, "off", "L40S", "0.5.17").moe_a2a_backend == "none"
    with pytest.raises(ValueError, match=r"\[deepep-needs-sm90\]"):
        moe.refusal("fp8-blockwise", 1, "v2", "RTX-PRO-SERVER-6000", "0.5.19")
    with pytest.raises(ValueError, match=r"^pools\[\]\.instanceType: unknown GPU model 'V100': not in "
                                         r"catalog/data/gpu-facts.json gpus"):
        moe.choose("bf16", 1, "off", "V100", "0.5.17")


def test_a_gpu_pool_of_a_family_without_an_entry_is_refused_naming_the_catalog_field():
    """Before: a g6 pool got the burn-in's default NCCL allowance and no floor, without a word."""
    raw = raw_stack("p5en-prod")
    pools = [dict(p, instanceType="g6.12xlarge") if p["name"] == "reward" else p for p in raw["pools"]]
    with pytest.raises(StackConfigError, match=r"pools\[reward\]\.instanceType: g6.12xlarge: the instance catalog has "
                                               r"no facts for family 'g6' \(catalog/data/gpu-facts.json: families.g6, "
                                               r"with types, gin_gda, burn_in_nccl_seconds, fabric\)"):
        variant("p5en-prod", {"pools": pools})
    with pytest.raises(catalog.MissingFact, match=r"families.g6"):
        catalog.CATALOG["g6.12xlarge"].burn_in_nccl_seconds


# --- a new family in a copy of the catalog's data ---------------------------------------------------

NEW_TYPE = "p7.48xlarge"
NEW_FAMILY = {
    "types": {NEW_TYPE: {"efa_generation": 4, "efa_gbps": 6400, "nvme_disks": 8, "nvme_disk_gb": 3840,
                         "card0_takes_efa": False}},
    "gin_gda": True, "burn_in_nccl_seconds": 333,
    "fabric": {"instance_type": NEW_TYPE, "node_all_reduce": {"measurement": "x300-node"},
               "node_all_reduce_without_nvls": None, "pair_all_reduce": {"efa_rate": True},
               "world_all_reduce": {"efa_rate": True}},
    "origin": {"types": "test", "gin_gda": "test", "burn_in_nccl_seconds": "test"},
}


def data_copy(tmp_path, edit=None):
    """catalog/data copied to ``tmp_path`` with the p7 family (a p6-b300 row on a new GPU, X300, that
    has no NVLink SHARP) added to both files; ``edit(facts)`` changes the facts file before it is written."""
    shutil.copytree(catalog.DATA_DIR, tmp_path, dirs_exist_ok=True)
    types = json.loads((tmp_path / catalog.TYPES_FILE).read_text())
    row = dict(types["instance_types"]["p6-b300.48xlarge"], family="p7", gpu_model="X300")
    types["instance_types"][NEW_TYPE] = row
    (tmp_path / catalog.TYPES_FILE).write_text(json.dumps(types))
    facts = json.loads((tmp_path / catalog.FACTS_FILE).read_text())
    facts["gpus"]["X300"] = {"compute_capability": "10.0", "nvls": False, "nvlink_gbs": 900.0,
                             "origin": {"compute_capability": "test", "nvls": "test", "nvlink_gbs": "test"}}
    facts["measurements"]["x300-node"] = {"busbw": 777.0, "at_bytes": None, "source": "ml-eng-bench", "says": "test"}
    facts["families"]["p7"] = copy.deepcopy(NEW_FAMILY)
    if edit:
        edit(facts)
    (tmp_path / catalog.FACTS_FILE).write_text(json.dumps(facts))
    return tmp_path


@pytest.fixture
def with_p7(tmp_path, monkeypatch):
    rows, facts = catalog.load(data_copy(tmp_path))
    monkeypatch.setattr(catalog, "FACTS", facts)
    for name, row in rows.items():
        monkeypatch.setitem(catalog.CATALOG, name, row)


def test_a_family_added_only_to_the_catalogs_data_gets_its_facts_from_its_entry(with_p7):
    raw = raw_stack("p6-b300")
    pools = [dict(p, instanceType=NEW_TYPE) if p["role"] in ("train", "rollout") else p for p in raw["pools"]]
    cfg = variant("p6-b300", {"pools": pools})
    m = derive(cfg)
    trainer = next(g for g in m.workers if g.gpus and g.pool.name == "train")
    assert trainer.pool.instance.gpu_model == "X300"
    assert trainer.env["NCCL_NVLS_ENABLE"] == "0" and m.runtime_env["NCCL_NVLS_ENABLE"] == "0"  # X300: no NVLS
    rollout = next(g for g in m.workers if g.gpus and g.pool.name == "rollout")
    assert rollout.env["NCCL_GIN_TYPE"] == "5" and m.node_setups["train"].gpu_initiated  # gin_gda
    burn_in = {b.pool.name: b for b in plans(m, cfg)}
    assert burn_in["train"].steps["nccl"] == 333
    fam = family_of(trainer.pool)
    assert fam.intra_all_reduce.busbw == 777.0 and fam.intra_all_reduce_without_nvls is None
    assert fam.world_all_reduce.busbw == round(6400 / 8 * 0.8, 2) and fam.world_all_reduce.derived
    all_reduce = next(f for f in burn_in["train"].floors if f.op == "all_reduce")
    assert all_reduce.busbw == floor_of(fam.intra_all_reduce) and not all_reduce.advisory


@pytest.mark.parametrize("path, message", [
    (("families", "p7", "burn_in_nccl_seconds"), "families.p7.burn_in_nccl_seconds: Field required"),
    (("families", "p7", "gin_gda"), "families.p7.gin_gda: Field required"),
    (("families", "p7", "fabric"), "families.p7.fabric: Field required"),
    (("gpus", "X300", "nvls"), "gpus.X300.nvls: Field required"),
    (("gpus", "X300", "origin", "nvls"), "gpus.X300: origin: no citation for nvls"),
])
def test_omitting_a_field_of_the_new_family_is_refused_naming_it(tmp_path, path, message):
    def drop(facts):
        *parents, last = path
        node = facts
        for key in parents:
            node = node[key]
        del node[last]
    with pytest.raises(ValueError, match=rf"gpu-facts.json: invalid\n(.*\n)*  {message}"):
        catalog.load(data_copy(tmp_path, drop))


def test_what_the_two_files_must_agree_on_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"gpus: no record for X300"):
        catalog.load(data_copy(tmp_path, lambda f: f["gpus"].pop("X300")))
    with pytest.raises(ValueError, match=r"families.p7.fabric.node_all_reduce_without_nvls: required: the GPU has "
                                         r"NVLink SHARP"):
        catalog.load(data_copy(tmp_path, lambda f: f["gpus"]["X300"].update(nvls=True)))
    with pytest.raises(ValueError, match=r"families.p7.fabric.node_all_reduce.measurement: 'nope' is not in "
                                         r"measurements"):
        catalog.load(data_copy(tmp_path, lambda f: f["families"]["p7"]["fabric"]["node_all_reduce"].update(
            measurement="nope")))



def test_the_budget_sizes_from_the_memory_nvidia_smi_shows_sglang_not_ec2s_figure():
    """SGLang sizes its memory from nvidia-smi's memory.total (sglang 0.5.19 srt/utils/common.py:653-678): on an
    H200 143771 MiB (measured, docs/measurements/preflight-h200.log), not EC2's 144384; a model never measured
    here is taken below EC2's figure by the largest share a measured driver kept (review34c F1)."""
    h200 = catalog.instance("p5en.48xlarge")
    assert (h200.gpu_memory_gib * 1024, h200.gpu_memory_seen_mib) == (144384, 143771)
    assert catalog.DRIVER_SHARE == 1 - 143771 / 144384
    h100 = catalog.instance("p5.48xlarge")
    assert h100.gpu.smi_memory_mib is None and h100.gpu_memory_seen_mib == 81572  # 81920 MiB less H200's share
