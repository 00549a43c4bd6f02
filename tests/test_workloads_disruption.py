"""What a planned disruption does to a run: PodDisruptionBudgets keep voluntary evictions (node
group updates, consolidation, ``kubectl drain``) off the Ray head, the trainers and the non-Spot
rollout engines; before a Capacity Block ends, a CronJob asks Miles for a checkpoint through its
``--save-trigger-sentinel`` file early enough for the save to finish before EKS drains the block."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import kubernetes_validate
import pytest
from conftest import STACKS, graph_of, load
from test_workloads import SCHEMAS, groups, k8s_version, obj_of, variant, variant_graph
from test_workloads_security import with_end_time

from stackconfig.stack import POOL_LABEL, Role, StackConfigError
from workloads.derive.model import derive
from workloads.derive import layout as L
from workloads.derive.block_end import capacity_block_end
from workloads.derive.paths import CHECKPOINT_DIR, paths
from workloads import render as M
from workloads.derive.argv import miles_argv
from workloads.checks.crds import crd_schema
from workloads.checks.flags import argv_pairs
from workloads.checks.schedulability import check

MILES_FLAGS = SCHEMAS / "miles" / "v0.1.0-flags.json"


def objects(graph, kind: str) -> list[dict]:
    return [obj_of(r) for r in graph.resources if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind]


# --- PodDisruptionBudgets ---------------------------------------------------------------------------------

def test_kuberay_label_keys():
    """The keys and values KubeRay 1.7.0 puts on every pod of a RayCluster (utils/constant.go:
    RayClusterLabelKey, RayNodeTypeLabelKey, RayNodeGroupLabelKey, RayNodeHeadGroupLabelValue;
    labelPod in controllers/ray/common/pod.go, which a template label cannot override); the RayJob
    CRD's clusterSelector uses the first one."""
    assert (M.RAY_CLUSTER_LABEL, M.RAY_NODE_TYPE_LABEL, M.RAY_GROUP_LABEL, M.RAY_HEAD_GROUP) == (
        "ray.io/cluster", "ray.io/node-type", "ray.io/group", "headgroup")
    assert "clusterSelector" in crd_schema("ray.io/v1", "RayJob")["properties"]["spec"]["properties"]


@pytest.mark.parametrize("stack", STACKS)
def test_budgets_protect_head_trainers_and_reserved_rollout(stack):
    cfg, graph = load(stack), graph_of(stack)
    pdbs = {p["metadata"]["name"]: p for p in objects(graph, "PodDisruptionBudget")}
    spot_rollout = L.is_spot(cfg.pool(Role.ROLLOUT))
    protected = {"head", "trainer"} | (set() if spot_rollout else {"rollout"})
    if cfg.workloads.submit.value != "raycluster":
        protected = set()  # no long-lived RayCluster: nothing of the stack's own to protect
    assert {n for n in pdbs if n.startswith("ray-")} == {f"ray-{g}" for g in protected}
    for g in protected:
        pdb = pdbs[f"ray-{g}"]
        assert pdb["spec"]["maxUnavailable"] == 0 and "minAvailable" not in pdb["spec"]
        kubernetes_validate.validate(pdb, k8s_version(cfg), strict=True)
    # Each budget selects exactly its group's pods as KubeRay labels them, and no other pod.
    rc_groups = groups(M.raycluster(derive(cfg)))
    for name, pdb in pdbs.items():
        if pdb["metadata"]["namespace"].startswith("team-"):
            continue  # a team's run budget selects run pods only (tests/test_run_submission.py)
        selector = pdb["spec"]["selector"]["matchLabels"]
        picked = {g for g in rc_groups if selector.items() <= M.ray_pod_labels(derive(cfg), g).items()}
        if name.startswith("ray-"):
            assert picked == {name.removeprefix("ray-")}, (name, picked)
        else:
            assert not picked, (name, picked)  # the reward budget does not reach the Ray pods
    if stack == "p4d":
        assert spot_rollout and "ray-rollout" not in pdbs


def test_kuberay_pod_labels_extend_the_template():
    cfg = load("p5en-prod")
    head = M.ray_pod_labels(derive(cfg), "head")
    assert head[M.RAY_NODE_TYPE_LABEL] == "head" and head[M.RAY_GROUP_LABEL] == "headgroup"
    trainer = M.ray_pod_labels(derive(cfg), "trainer")
    assert (trainer[M.RAY_NODE_TYPE_LABEL], trainer[M.RAY_GROUP_LABEL], trainer[M.RAY_CLUSTER_LABEL]) == (
        "worker", "trainer", L.RAY_CLUSTER)
    assert groups(M.raycluster(derive(cfg)))["trainer"]["template"]["metadata"]["labels"].items() <= trainer.items()


# --- the sentinel flag ------------------------------------------------------------------------------------

def test_miles_has_the_save_trigger_sentinel_flag():
    declared = json.loads(MILES_FLAGS.read_text())["miles_flags"]["--save-trigger-sentinel"]
    assert (declared["type"], declared["action"], declared["nargs"]) == ("str", None, None)


@pytest.mark.parametrize("stack", STACKS)
def test_every_argv_carries_the_sentinel_in_the_checkpoint_directory(stack):
    cfg = load(stack)
    argv = dict(argv_pairs(miles_argv(cfg)))
    (sentinel,) = argv["--save-trigger-sentinel"]
    assert sentinel == f"{paths(cfg).checkpoints}/SAVE_NOW" == paths(cfg).save_trigger
    assert argv["--save"] == [paths(cfg).checkpoints]


# --- the Capacity Block end CronJob --------------------------------------------------------------------------

def cronjob(cfg) -> dict:
    return M.checkpoint_trigger_cronjob(derive(cfg))


@pytest.mark.parametrize("end, schedule", [
    ("2026-12-14T11:30:00Z", "0 10 14 12 *"),       # minus the default 90 minutes
    ("2026-12-14T12:45:30+02:00", "15 9 14 12 *"),  # UTC, and a cron schedule has no seconds
    ("2027-01-01T00:30:00Z", "0 23 31 12 *"),       # back across midnight, month and year
])
def test_p5en_prod_with_an_end_time_gets_the_cronjob_at_the_utc_minute(end, schedule):
    override = with_end_time(end=end)
    cfg, graph = variant("p5en-prod", override), variant_graph("p5en-prod", override)
    (job,) = objects(graph, "CronJob")
    kubernetes_validate.validate(job, k8s_version(cfg), strict=True)
    spec = job["spec"]
    assert spec["schedule"] == schedule and spec["timeZone"] == "Etc/UTC"
    assert spec["startingDeadlineSeconds"] == (90 - 40) * 60 and spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {POOL_LABEL: cfg.pool(Role.CPU).name}
    (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert claim == M.FSX_CLAIM and mount["mountPath"] == f"{paths(cfg).mount}/{CHECKPOINT_DIR}"
    assert mount["subPath"] == CHECKPOINT_DIR  # only the checkpoints, not the models and data
    assert f"touch {shlex.quote(paths(cfg).save_trigger)}" in pod["containers"][0]["command"][-1]
    assert job["metadata"]["annotations"]["rl.platform/capacity-block-pools"] == "train"


def test_no_end_time_no_cronjob():
    for stack in STACKS:
        assert objects(graph_of(stack), "CronJob") == [], stack
        assert capacity_block_end(load(stack)) is None
    # A block end on a training pool scaled to zero: no run can be running, no trigger.
    override = with_end_time()
    for p in override["pools"]:
        if p["role"] == "train":
            p["nodes"] = {"min": 0, "desired": 0, "max": 16}
    assert capacity_block_end(variant("p5en-prod", override)) is None
    assert capacity_block_end(variant("p5en-prod", with_end_time())) is not None


def test_the_earliest_block_end_of_the_gpu_pools_wins_and_the_lead_is_configurable():
    override = with_end_time("p5e", "2026-12-14T11:30:00Z", ("train",))
    rollout = next(p for p in override["pools"] if p["role"] == "rollout")
    assert rollout["capacity"]["type"] == "CAPACITY_BLOCK"
    rollout["capacity"]["endTime"] = "2026-12-14T09:00:00Z"
    cfg = variant("p5e", override)
    end = capacity_block_end(cfg)
    assert end.pools == (rollout["name"],) and end.end == datetime(2026, 12, 14, 9, 0, tzinfo=timezone.utc)
    assert cronjob(cfg)["spec"]["schedule"] == "30 7 14 12 *"
    longer = variant("p5e", {**override, "workloads": {"capacityBlockEnd": {"leadMinutes": 150}}})
    assert cronjob(longer)["spec"]["schedule"] == "30 6 14 12 *"
    assert cronjob(longer)["spec"]["startingDeadlineSeconds"] == (150 - 40) * 60


@pytest.mark.parametrize("settings", [{"leadMinutes": 70}, {"leadMinutes": 90, "checkpointMinutes": 50},
                                      {"leadMinutes": 30}])
def test_a_lead_that_does_not_cover_drain_and_checkpoint_is_refused(settings):
    with pytest.raises(StackConfigError) as err:
        variant("p5en-prod", {"workloads": {"capacityBlockEnd": settings}})
    line = str(err.value).splitlines()[1]
    assert line.startswith("  workloads.capacityBlockEnd.leadMinutes: ") and "40 minutes" in line, line


def test_the_trigger_pod_fits_the_cpu_pool():
    cfg = variant("p5en-prod", with_end_time())
    (placement,) = [p for p in check(derive(cfg)) if p.pod == M.CHECKPOINT_TRIGGER]
    assert placement.fits and placement.pool == cfg.pool(Role.CPU).name


def test_the_cronjob_is_registered_after_the_claim():
    graph = variant_graph("p5en-prod", with_end_time())
    by_name = {r.name: r for r in graph.resources}
    job = by_name[f"cronjob-{M.CHECKPOINT_TRIGGER}"]
    assert by_name["persistentvolumeclaim-fsx"].urn in job.dependencies


# --- the guard: once, in its window, never a year later ---------------------------------------------------

def run_trigger(script: str, now: datetime, tmp_path: Path) -> subprocess.CompletedProcess:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "date").write_text(f"#!/bin/sh\necho {int(now.timestamp())}\n")
    (fake / "date").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=10)


def test_the_trigger_creates_the_sentinel_only_in_its_window(tmp_path):
    mount = tmp_path / "fsx"
    cfg = variant("p5en-prod", with_end_time(extra={"workloads": {"storage": {"mountPath": str(mount)}}}))
    script, sentinel = M.trigger_script(derive(cfg)), Path(paths(cfg).save_trigger)
    end = datetime(2026, 12, 14, 11, 30, tzinfo=timezone.utc)
    for now, fires in [(end - timedelta(minutes=90), True), (end - timedelta(minutes=93), True),
                       (end - timedelta(minutes=41), True), (end - timedelta(minutes=96), False),
                       (end - timedelta(minutes=40), False), (end + timedelta(days=365, minutes=-90), False),
                       (end - timedelta(days=365, minutes=90), False)]:
        done = run_trigger(script, now, tmp_path)
        assert done.returncode == 0, done.stderr
        assert sentinel.exists() == fires, (now, done.stdout)
        if sentinel.exists():
            sentinel.unlink()


# --- the reward server against Miles' reward function -------------------------------------------------------

def test_the_reward_server_builds_the_sample_miles_async_rm_reads(monkeypatch):
    """Miles v0.1.0's ``async_rm`` (miles/rollout/rm_hub/__init__.py) reads ``sample.reward_spec``
    first (per-sample override), then response, label, metadata, and tokens for one rule."""
    import importlib
    import sys
    import threading
    import types

    seen = {}

    async def async_rm(args, sample):  # the attribute reads of Miles' async_rm and _resolve_reward_config
        spec = sample.reward_spec
        seen.update(spec=spec, response=sample.response, label=sample.label, metadata=sample.metadata,
                    tokens=sample.tokens, rm_type=args.rm_type, custom=args.custom_rm_path)
        return 1.0

    rm_hub = types.ModuleType("miles.rollout.rm_hub")
    rm_hub.async_rm = async_rm
    for name, module in (("miles", types.ModuleType("miles")), ("miles.rollout", types.ModuleType("miles.rollout")),
                         ("miles.rollout.rm_hub", rm_hub)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("RM_TYPE", "dapo")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "workloads" / "pod"))
    monkeypatch.delitem(sys.modules, "reward_server", raising=False)
    server = importlib.import_module("reward_server")

    # In a thread of its own: asyncio.run would leave the main thread without a current loop, which
    # the Pulumi mocks of later tests expect.
    body = {"prompt": "1+1?", "response": "\\boxed{2}", "label": "2"}
    out: list = []
    worker = threading.Thread(target=lambda: out.append(server.miles_reward(body)))
    worker.start()
    worker.join(timeout=10)
    assert out == [1.0]
    assert seen == {"spec": None, "response": "\\boxed{2}", "label": "2", "metadata": {}, "tokens": [],
                    "rm_type": "dapo", "custom": None}
