"""Runs apart from the platform: run files, the offline plan (queues, gangs, preemption, tiers), what a
submitted run creates, and what the run command sends to the Kubernetes API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from conftest import ROOT
from fake_kube import ApiServer
from test_workloads import custom_objects, job_argv, k8s_version, validate_custom, variant, variant_graph
from test_first_deploy import REAL, pinned_stack_dir
from test_workloads_security import registered_objects

from workloads.checks import gate
from workloads.render.runs import QUEUE_LABEL, PRIORITY_LABEL, SAVE_ON_STOP, SAVE_STATE, priority_classes
from workloads.render.teams import team_directories_job, team_fsx_pv, team_fsx_pvc
from workloads.checks.runs import NeverFits, load_run, run_model
from workloads.checks.run_plan import plan_runs
from workloads.cli.runs import main
from workloads.cli.runs_client import RunClient
from workloads.deploy.submit import run_objects
from workloads.derive.topology import tier_sizes_from_hypernodes
from workloads.schema.run import RunFile

SHARED = "p5en-shared"
REPO = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-shared"  # teams alpha (train 64/128, rollout 128/256 guarantee/cap) and beta (train 0/64, rollout 64/128)
TIERS = {"workloads": {"network": {"tierNodes": {1: 4, 2: 16, 3: 48}}}}


def run(name, team, priority="normal", topology="hard", **nodes) -> RunFile:
    return RunFile(name=name, team=team, priority=priority, nodes=nodes, topology=topology)


def decisions(cfg, runs, running=()):
    return {d.run: d for d in plan_runs(cfg, runs, frozenset(running))}


# --- the offline plan (its scheduling rules: test_scheduling_rules.py) ---------------------------

def test_no_run_is_evicted_when_evicting_cannot_free_enough():
    cfg = variant(SHARED, {})
    d = decisions(cfg, [run("a-low", "alpha", "low", train=2, rollout=2), run("b", "beta", "normal", train=8, rollout=8),
                        run("a-high", "alpha", "high", train=16, rollout=8)], running=["a-low", "b"])
    assert d["a-high"].action == "waits" and d["a-low"].action == "running" and d["b"].action == "running"


def test_a_run_past_its_teams_max_runs_waits_for_the_quota_not_the_scheduler():
    """The team ResourceQuota counts RayJobs (``maxRuns``): the next is refused at submission, however free the
    nodes (the control-plane tier saw the fourth of a team's small runs refused with 403)."""
    cfg = variant(SHARED, {})
    most = next(t.max_runs for t in cfg.workloads.teams if t.name == "alpha")
    runs_ = [run(f"a{i}", "alpha", train=1, rollout=1) for i in range(most + 1)]
    d = decisions(cfg, [run("b", "beta", train=1, rollout=1), *runs_], running=["a0"])
    assert [d[r.name].action for r in runs_] == ["running", *["starts"] * (most - 1), "waits"]
    assert d[runs_[-1].name].why.startswith("ResourceQuota gpu-quota count/rayjobs.ray.io: team alpha may hold "
                                            f"{most} RayJobs at once"), d[runs_[-1].name].why
    assert d["b"].action == "starts"  # another team's count is its own


@pytest.mark.parametrize("bad, message", [
    (run("big", "alpha", train=17, rollout=1), "run big: pool train: 17 nodes requested, the pool has 16"),
    (run("greedy", "beta", train=9, rollout=1), "run greedy: pool train: nvidia.com/gpu 72 exceeds team beta's cap of 64"),
    (run("half", "alpha", train=1), "run half: nodes.rollout: a run needs at least one node"),
])
def test_a_run_that_can_never_fit_is_refused_naming_run_pool_and_resource(bad, message):
    with pytest.raises(NeverFits, match=message):
        plan_runs(variant(SHARED, {}), [bad])


def test_a_run_above_its_queues_limit_never_starts_and_plan_exits_1(tmp_path, capsys):
    """Volcano's capacity plugin holds a queue to its capability or the GPUs not guaranteed to other queues,
    whichever is less, on each dimension (capacity.go:1081-1088), one per GPU pool, and enqueue never admits a
    job above it on one it requests (enqueue.go:95): alpha's 32 rollout nodes (256 GPUs) exceed 256 - 64 (beta's
    rollout guarantee) = 192, so the run would wait for ever. The plan says so and exits 1; ``runs submit``
    refuses it too."""
    seed = run("seed", "alpha", train=16, rollout=32)
    message = (r"run seed: pool rollout: 256 GPUs, more than queue team-alpha's limit of 192 there \(the pool's 256 "
               r"GPUs less the 64 guaranteed to other queues\)")
    with pytest.raises(NeverFits, match=message):
        plan_runs(variant(SHARED, {}), [seed])
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(seed.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    assert main(["plan", SHARED, str(path)]) == 1
    assert main(["submit", SHARED, str(path), "--dry-run"]) == 1
    assert "more than queue team-alpha's limit of 192" in capsys.readouterr().err


def test_a_run_too_large_for_any_tier_is_refused_when_hard_and_placed_when_soft():
    cfg = variant(SHARED, {"workloads": {"network": {"tierNodes": {1: 4, 2: 16, 3: 20}}}})
    with pytest.raises(NeverFits, match=r"run wide: run: 24 nodes, more than one HyperNode of the widest tier \(3\) "
                                        r"holds \(20\); allowed: topology soft or none"):
        plan_runs(cfg, [run("wide", "alpha", train=8, rollout=16)])
    assert plan_runs(cfg, [run("wide", "alpha", topology="soft", train=8, rollout=16)])[0].action == "starts"


def test_the_file_system_is_shared_by_the_runs_placed_on_it():
    halves = [t.model_dump(by_alias=True, exclude_none=True) | {"fileSystemGib": 1200} for t in variant(SHARED, {}).workloads.teams]
    cfg = variant(SHARED, {"workloads": {"storage": {"capacityGib": 2400}, "teams": halves}})  # 2,319 GB usable
    one_run = dict(train=4, rollout=4)
    d = decisions(cfg, [run("r1", "alpha", **one_run), run("r2", "alpha", **one_run), run("r3", "beta", **one_run)])
    # 926 GB each; beta's queue, at a lower share of its deserved, is served before alpha's second run
    assert [d[r].action for r in ("r1", "r2", "r3")] == ["starts", "waits", "starts"]
    assert "file system: 926 GB needed, 468 GB not yet budgeted" in d["r2"].why
    with pytest.raises(ValueError, match="run big: workloads.storage.capacityGib: 2400 GiB holds 2,319 GB usable, "
                                         "the run needs 7,064 GB"):
        plan_runs(cfg, [RunFile(name="big", team="alpha", nodes=one_run, model="Qwen/Qwen3-235B-A22B",
                                parallel={"tensor": 4, "expert": 8})])


def test_the_stack_must_be_in_runs_mode():
    with pytest.raises(NeverFits, match="workloads.submit raycluster, where the GPU nodes are held"):
        plan_runs(variant("p5en-prod", {"workloads": {"teams": [{"name": "alpha", "gpus": {"train": {"cap": 8}}}],
                                                      "images": {"requireDigest": False}}}),
                  [run("r", "alpha", train=1, rollout=1)])


def test_a_run_is_checked_like_the_stacks_own_run_on_its_own_nodes():
    bad = RunFile(name="odd", team="alpha", nodes={"train": 3, "rollout": 2}, parallel={"tensor": 8, "expert": 16})
    with pytest.raises(ValueError, match=r"run odd: parallel.expert: expert x expertTensor x pipeline = 16"):
        run_model(variant(SHARED, {}), bad)


# --- what a submitted run is ------------------------------------------------------------------------

def test_a_submitted_run_is_one_gang_in_its_team_queue_with_its_own_cluster_and_valid_objects():
    cfg = variant(SHARED, TIERS)
    r = load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")
    objs = run_objects(cfg, r)
    job = objs.rayjob
    validate_custom(job, k8s_version(cfg))
    md, spec = job["metadata"], job["spec"]
    assert (md["name"], md["namespace"]) == ("grpo-qwen3-30b-1", "team-alpha")
    assert md["labels"][QUEUE_LABEL] == "team-alpha" and md["labels"][PRIORITY_LABEL] == "rl-normal"
    assert not [k for k in md["labels"] if k.startswith("volcano.sh/network-topology")]  # see network_affinity
    # 24 GPU nodes: one tier-3 network node (48); the 8 trainers: one tier-2 node (16).
    assert (objs.gang.tier, objs.trainer.tier) == (3, 2)
    assert spec["shutdownAfterJobFinishes"] is True and "clusterSelector" not in spec
    cluster = spec["rayClusterSpec"]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert {n: g["replicas"] for n, g in groups.items()} == {"trainer": 8, "rollout": 16}
    def terms(group):
        return groups[group]["template"]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    gang = {"matchLabels": {"rl.platform/run": "grpo-qwen3-30b", "rl.platform/attempt": "1"},
            "matchExpressions": [{"key": "ray.io/group", "operator": "In", "values": ["trainer", "rollout"]}]}
    assert terms("rollout") == [{"labelSelector": gang, "topologyKey": "topology.k8s.aws/network-node-layer-1"}]
    assert terms("trainer")[1]["topologyKey"] == "topology.k8s.aws/network-node-layer-2"
    assert terms("trainer")[1]["labelSelector"]["matchExpressions"][0]["values"] == ["trainer"]
    assert "affinity" not in cluster["headGroupSpec"]["template"]["spec"]  # CPU nodes carry no network labels
    order = {g: groups[g]["template"]["metadata"]["annotations"]["volcano.sh/task-priority"] for g in groups}
    assert int(order["trainer"]) > int(order["rollout"])  # a trainer is placed before any rollout pod
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in groups.values())]
    for t in templates:
        pod = t["spec"]
        assert pod["serviceAccountName"] == "checkpoint-writer"
        assert {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx"}} in pod["volumes"]
        assert pod["terminationGracePeriodSeconds"] == 30 * 60
        stop = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
        assert stop[:4] == ["/bin/sh", "-c", SAVE_ON_STOP, "save-on-stop"]
        assert stop[4:] == ["/mnt/fsx/checkpoints/grpo-qwen3-30b/RUNNING", "/mnt/fsx/checkpoints/grpo-qwen3-30b/SAVE_NOW", "1"]
        assert t["metadata"]["labels"]["rl.platform/team"] == "alpha"
        assert "app.kubernetes.io/name" not in t["metadata"]["labels"]  # KubeRay's head Service selects its own
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert head["initContainers"][0]["name"] == "stage"  # the run stages its own model in its team's directory
    argv = job_argv(job)
    assert "--sglang-mem-fraction-static" not in argv
    assert argv[argv.index("--actor-num-nodes") + 1] == "8" and argv[argv.index("--rollout-num-gpus") + 1] == "128"
    assert argv[argv.index("--rm-url") + 1].startswith("http://reward.rl.svc.cluster.local")  # the platform's service


def test_the_entrypoint_survives_bash_list2cmdline_and_sh_and_the_argv_travels_in_the_runtime_env(tmp_path):
    """KubeRay's submitter runs `ray job submit ... -- <entrypoint>` through bash; Ray's CLI joins the
    words with list2cmdline and its job supervisor runs the result with sh (shell=True)."""
    job = run_objects(variant(SHARED, {}), load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")).rayjob
    entry = job["spec"]["entrypoint"]
    echo = tmp_path / "args.py"
    echo.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    after_bash = json.loads(subprocess.run(["bash", "-c", f"{sys.executable} {echo} {entry}"], capture_output=True,
                                           text=True, check=True).stdout)
    after_sh = json.loads(subprocess.run(["sh", "-c", f"{sys.executable} {echo} " + subprocess.list2cmdline(after_bash)],
                                         capture_output=True, text=True, check=True).stdout)
    assert after_sh == after_bash == ["python3", "/opt/scripts/miles_launcher.py", "--marker",
                                      "/mnt/fsx/checkpoints/grpo-qwen3-30b/RUNNING", "--attempt", "1"]
    bad = RunFile(name="x", team="alpha", nodes={"train": 1, "rollout": 1}, extra_args=["--wandb-group", "$HOME"])
    with pytest.raises(ValueError, match="'\\$HOME': '\\$' and '`' are expanded by the shell of KubeRay's job submitter"):
        run_objects(variant(SHARED, {}), bad)
    assert job_argv(job)[0] == "/root/miles/train.py"


def test_priority_classes_and_the_schedulers_preempt_and_reclaim_configuration():
    cfg = variant(SHARED, {})
    from workloads.derive.model import derive
    from workloads.render import kuberay_values, volcano_values
    m = derive(cfg)
    classes = priority_classes(m)
    assert {c["metadata"]["name"]: c["value"] for c in classes} == {"rl-low": 1000, "rl-normal": 10000, "rl-high": 100000}
    import kubernetes_validate
    for c in classes:
        kubernetes_validate.validate(c, k8s_version(cfg), strict=True)
    assert kuberay_values(m)["batchScheduler"] == {"name": "volcano"}
    assert "batchScheduler" not in kuberay_values(derive(variant("p5en-prod", {})))  # its RayJob selects a cluster
    conf = yaml.safe_load(volcano_values(m)["custom"]["scheduler_config_override"])  # a string: the chart inserts text
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "preempt", "reclaim", "backfill"]
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert {"priority", "gang", "capacity", "predicates"} <= set(plugins)
    assert "overcommit" not in plugins  # it would keep a run that must preempt out of Inqueue


def test_the_team_directories_are_the_only_parts_of_the_file_system_its_pods_mount():
    cfg = variant(SHARED, {})
    from workloads.derive.model import derive
    m = derive(cfg)
    alpha = cfg.workloads.teams[0]
    pv, pvc = (team_fsx_pv(m, alpha, "fsx", "fs-0123", "fs-0123.fsx.us-east-1.amazonaws.com", "abcdefgh"),
               team_fsx_pvc(m, alpha, "fsx"))
    assert pv["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh/teams/alpha"  # not exported
    assert pv["spec"]["claimRef"] == {"namespace": "team-alpha", "name": "fsx"} and pvc["spec"]["volumeName"] == "team-alpha-fsx"
    assert pv["spec"]["csi"]["volumeHandle"] == "fs-0123::teams/alpha"  # not the root PV's handle
    saves = team_fsx_pv(m, alpha, "fsx-checkpoints", "fs-0123", "fs-0123.fsx.us-east-1.amazonaws.com", "abcdefgh")
    assert saves["spec"]["csi"]["volumeAttributes"]["mountname"] == "abcdefgh/checkpoints/teams/alpha"  # exported
    assert saves["spec"]["csi"]["volumeHandle"] == "fs-0123::checkpoints/teams/alpha"
    assert saves["spec"]["claimRef"] == {"namespace": "team-alpha", "name": "fsx-checkpoints"}
    job = team_directories_job(m)
    assert job["metadata"]["annotations"] == {"pulumi.com/replaceUnready": "true"}
    assert job["spec"]["activeDeadlineSeconds"] == 600  # fails, and is replaced next time, if FSx cannot mount
    # one (init) container per top-level directory, each mounting only that one
    assert [(c["command"], c["volumeMounts"]) for c in job["spec"]["template"]["spec"]["initContainers"]] == [
        (["mkdir", "-p", "/mnt/fsx/checkpoints/teams/alpha", "/mnt/fsx/checkpoints/teams/beta"],
         [{"name": "fsx", "mountPath": "/mnt/fsx/checkpoints", "subPath": "checkpoints"}]),
        (["mkdir", "-p", "/mnt/fsx/teams/alpha", "/mnt/fsx/teams/beta"],
         [{"name": "fsx", "mountPath": "/mnt/fsx/teams", "subPath": "teams"}])]
    import kubernetes_validate
    for o in (pv, pvc, saves, job):
        kubernetes_validate.validate(o, k8s_version(cfg), strict=True)


def test_a_runs_staged_model_and_data_stay_out_of_the_bucket_and_its_checkpoints_go_to_the_teams_prefix():
    """The file system exports ``checkpoints/`` to the bucket: every container of a run that mounts the
    team's directory (model, data: /mnt/fsx/models, /mnt/fsx/datasets) mounts the team's checkpoint
    directory over /mnt/fsx/checkpoints, where Miles saves."""
    cfg = variant(SHARED, TIERS)
    job = run_objects(cfg, load_run(ROOT / "runs" / "grpo-qwen3-30b.yaml")).rayjob
    cluster = job["spec"]["rayClusterSpec"]
    argv = job_argv(job)
    assert argv[argv.index("--save") + 1].startswith("/mnt/fsx/checkpoints/")
    assert not argv[argv.index("--hf-checkpoint") + 1].startswith("/mnt/fsx/checkpoints")
    for template in [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]:
        spec = template["spec"]
        assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}} in spec["volumes"]
        for c in [*spec["containers"], *spec.get("initContainers", [])]:
            mounts = {v["name"]: v["mountPath"] for v in c.get("volumeMounts", [])}
            assert "fsx" not in mounts or mounts.get("checkpoints") == "/mnt/fsx/checkpoints", c["name"]


def test_runs_declared_in_the_stack_are_in_the_graph_with_their_team_objects():
    override = {"workloads": {"runs": [yaml.safe_load((ROOT / "runs" / "beta-lr-sweep.yaml").read_text())]}}
    graph = variant_graph(SHARED, override)
    cfg = variant(SHARED, override)
    jobs = custom_objects(graph, "RayJob")
    assert [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in jobs] == [("team-beta", "beta-lr-sweep-1")]
    for job in jobs:
        validate_custom(job, k8s_version(cfg))
    assert custom_objects(graph, "RayCluster") == []  # no long-lived cluster holds the GPU nodes
    kinds = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in registered_objects(graph)]
    assert ("PersistentVolumeClaim", "team-beta", "fsx") in kinds and ("ConfigMap", "team-beta", "workload-scripts") in kinds
    assert ("PriorityClass", None, "rl-low") in kinds and ("Job", "rl", "team-directories") in kinds
    assert not [k for k in kinds if k[0] == "Job" and k[2].startswith("stage-")]  # each run stages its own model


@pytest.mark.parametrize("override, message", [
    ({"workloads": {"teams": []}}, "workloads.submit: runs are submitted to team queues, and no team is declared"),
    ({"workloads": {"runs": [{"name": "r", "team": "alpha", "nodes": {"train": 17, "rollout": 1}}]}},
     "workloads.runs[r]: run r: pool train: 17 nodes requested"),
])
def test_a_bad_runs_stack_names_the_field(override, message):
    from stackconfig.stack import StackConfigError
    with pytest.raises(StackConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        variant(SHARED, override)  # declared runs: checked by the gate, before any resource
    with pytest.raises(StackConfigError, match=r"workloads.runs\[r\]: run r: stack 'p5en-prod' has workloads.submit "
                                               r"raycluster, where the GPU nodes are held by the stack's own run"):
        variant("p5en-prod", {"workloads": {
            "teams": [{"name": "alpha", "gpus": {"train": {"cap": 8}}}],
            "images": {"requireDigest": False},
            "runs": [{"name": "r", "team": "alpha", "nodes": {"train": 1, "rollout": 1}}]}})


# --- the scripts that make preemption checkpoint first --------------------------------------------

def _sh(*args, env=None, **kw):
    return subprocess.run(["/bin/sh", "-c", *args], env=env, capture_output=True, text=True, **kw)


def test_prestop_asks_for_a_checkpoint_and_waits_for_it_only_while_the_lease_is_fresh(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(f"#!/bin/sh\necho stopped > {tmp_path}/ray-stopped\n")
    (bin_dir / "sleep").write_text(f"#!/bin/sh\nexec {shutil.which('sleep')} 0.05\n")  # the hook's 5 s poll, shorter
    for tool in ("ray", "sleep"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    lease, sentinel = tmp_path / "RUNNING", tmp_path / "SAVE_NOW"

    def hook():
        return subprocess.Popen(["/bin/sh", "-c", SAVE_ON_STOP, "save-on-stop", str(lease), str(sentinel), "2"], env=env)
    # No run in progress: stop at once, no sentinel left behind.
    assert hook().wait(timeout=5) == 0 and not sentinel.exists() and (tmp_path / "ray-stopped").exists()
    # A stale lease (the driver was killed 3 minutes ago), or another attempt's: the same.
    lease.write_text("2")
    os.utime(lease, (time.time() - 180, time.time() - 180))
    assert hook().wait(timeout=5) == 0 and not sentinel.exists()
    lease.write_text("3")
    assert hook().wait(timeout=5) == 0 and not sentinel.exists()
    # This attempt in progress: the sentinel appears, and the hook waits until Miles has saved and removed it.
    lease.write_text("2")
    waiting = hook()
    deadline = time.monotonic() + 5
    while not sentinel.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sentinel.exists() and waiting.poll() is None
    sentinel.unlink()  # Miles: saved, sentinel removed
    assert waiting.wait(timeout=10) == 0


# --- what the run command sends ----------------------------------------------------------------------

class FakeApi(ApiServer):
    """Records every request the real kubernetes client makes and answers it as the API server
    would (``fake_kube``): ``routes`` seed the collections and objects."""

    def __init__(self, routes):
        super().__init__(routes=routes)
        self.calls = []

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        parsed = urlparse(url)
        self.calls.append((method, parsed.path, {k: v[0] for k, v in parse_qs(parsed.query).items()}, body))
        code, data = self.answer(method, parsed.path, body)
        return _Response(json.dumps(data).encode(), code)


class _Response:
    def __init__(self, data, status=200):
        self.data, self.status, self.headers = data, status, {"content-type": "application/json"}
        self.reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict"}.get(status, "")

    def read(self):
        return self.data

    def getheader(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def getheaders(self):
        return self.headers


@pytest.fixture
def api(monkeypatch):
    from kubernetes import client as k8s
    from kubernetes.client import rest

    def make(routes=None):
        fake = FakeApi(routes or {})
        monkeypatch.setattr(rest.RESTClientObject, "request",
                            lambda self, *a, **kw: rest.RESTResponse(fake.request(*a, **kw)))
        cfg = k8s.Configuration(host="https://cluster.example")
        return fake, (lambda: RunClient(k8s.ApiClient(cfg)))
    return make


def _job(name, run, team, attempt_status="RUNNING", deployment="Running"):
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": f"team-{team}",
                         "labels": {"rl.platform/run": run, "rl.platform/team": team}},
            "status": {"jobStatus": attempt_status, "jobDeploymentStatus": deployment}}


def test_submit_sends_the_rayjob_to_the_team_namespace_with_tiers_from_the_hypernodes(api, tmp_path):
    hypernodes = {"items": [
        {"metadata": {"name": "l3-a"}, "spec": {"tier": 1, "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": f"n{i}"}}} for i in range(4)]}},
        {"metadata": {"name": "l2-a"}, "spec": {"tier": 2, "members": [
            {"type": "HyperNode", "selector": {"exactMatch": {"name": "l3-a"}}}]}}]}
    nodes = {"items": [{"metadata": {"name": f"n{i}"}} for i in range(4)]}
    fake, client = api({("GET", "/apis/topology.volcano.sh/v1alpha1/hypernodes"): hypernodes,
                        ("GET", "/api/v1/nodes"): nodes})
    small = tmp_path / "small.yaml"
    small.write_text("name: small\nteam: beta\npriority: low\nnodes: {train: 1, rollout: 2}\n")
    lines = []
    assert main(["submit", SHARED, str(small)], client=client, out=lines.append) == 1  # the image needs its registry
    assert not fake.calls
    pinned = ["--stack-dir", str(pinned_stack_dir(tmp_path))]  # digests a deploy would take
    assert main(["submit", SHARED, str(small), "--repository", REPO, *pinned], client=client, out=lines.append) == 0
    posts = [c for c in fake.calls if c[0] == "POST"]
    assert [c[1] for c in posts] == ["/apis/ray.io/v1/namespaces/team-beta/rayjobs"]  # no budget: the team's is the platform's
    body = posts[0][3]
    assert body["metadata"]["labels"]["volcano.sh/queue-name"] == "team-beta"
    assert body["metadata"]["labels"]["ray.io/priority-class-name"] == "rl-low"
    trainer = body["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    term = trainer["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "topology.k8s.aws/network-node-layer-3"  # 3 nodes fit one tier-1 node (4)
    assert trainer["containers"][0]["image"] == f"{REPO}:miles-49cac7b5-efa1.50.0@sha256:{REAL}"  # the stack's pin
    node_queries = [c[2]["labelSelector"] for c in fake.calls if c[1] == "/api/v1/nodes"]
    assert node_queries == ["rl.platform/pool=train", "rl.platform/pool=rollout", "rl.platform/pool=train"]
    assert "submitted team-beta/small-1" in lines[0] and "tier 1 (hard; pod affinity on topology.k8s.aws/network-node-layer-3)" in lines[0]


def test_resume_submits_the_next_attempt_and_list_reads_every_team(api, tmp_path):
    attempts = [_job("grpo-qwen3-30b-1", "grpo-qwen3-30b", "alpha", "FAILED", "Failed"),
                _job("grpo-qwen3-30b-2", "grpo-qwen3-30b", "alpha", "RUNNING", "Running")]
    busy, busy_client = api({("GET", "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"): {"items": attempts}})
    pinned = ["--stack-dir", str(pinned_stack_dir(tmp_path))]
    assert main(["submit", SHARED, str(ROOT / "runs" / "grpo-qwen3-30b.yaml"), "--resume", "--repository", REPO, *pinned],
                client=busy_client, out=lambda _: None) == 1  # attempt 2 still holds the checkpoint directory
    assert not [c for c in busy.calls if c[0] == "POST"]
    attempts[1] = _job("grpo-qwen3-30b-2", "grpo-qwen3-30b", "alpha", "STOPPED", "Failed")
    fake, client = api({("GET", "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"): {"items": attempts},
        ("GET", "/apis/ray.io/v1/rayjobs"): {"items": [_job("grpo-qwen3-30b-2", "grpo-qwen3-30b", "alpha"),
                                                         _job("beta-lr-sweep-1", "beta-lr-sweep", "beta")]}})
    out = []
    assert main(["submit", SHARED, str(ROOT / "runs" / "grpo-qwen3-30b.yaml"), "--resume", "--repository", REPO, *pinned],
                client=client, out=out.append) == 0
    post = next(c for c in fake.calls if c[0] == "POST")
    assert post[3]["metadata"]["name"] == "grpo-qwen3-30b-3"
    argv = job_argv(post[3])
    assert argv[argv.index("--load") + 1] == "/mnt/fsx/checkpoints/grpo-qwen3-30b"  # same directory: resumes
    lister = next(c for c in fake.calls if c[1] == "/apis/ray.io/v1/namespaces/team-alpha/rayjobs" and c[0] == "GET")
    assert lister[2] == {"labelSelector": "rl.platform/run=grpo-qwen3-30b"}
    out.clear()
    assert main(["list"], client=client, out=out.append) == 0
    assert [c for c in fake.calls if c[1] == "/apis/ray.io/v1/rayjobs"][-1][2] == {"labelSelector": "rl.platform/run"}
    assert [line.split()[:4] for line in out] == [["alpha", "grpo-qwen3-30b", "attempt", "2"],
                                                  ["beta", "beta-lr-sweep", "attempt", "1"]]


def test_cancel_first_asks_for_a_checkpoint_then_deletes_and_with_now_deletes_the_pods_without_grace(api, monkeypatch):
    sentinel = "/mnt/fsx/checkpoints/r/SAVE_NOW"
    lease = "/mnt/fsx/checkpoints/r/RUNNING"
    job = {**_job("r-1", "r", "alpha"), "spec": {
        "entrypoint": f"python3 /opt/scripts/miles_launcher.py --marker {lease} --attempt 1",
        "runtimeEnvYAML": yaml.safe_dump({"env_vars": {
            "MILES_ARGV": json.dumps(["/root/miles/train.py", "--save-trigger-sentinel", sentinel])}})}}
    head = {"metadata": {"name": "r-1-head"}, "status": {"phase": "Running"}}
    routes = {("GET", "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"): {"items": [job]},
              ("GET", "/api/v1/namespaces/team-alpha/pods"): {"items": [head]}}
    fake, client = api(routes)
    execs, answers = [], iter([(0, ""), (0, "waiting\n"), (0, "saved\n")])
    monkeypatch.setattr(RunClient, "_exec", lambda self, team, pod, command: execs.append((team, pod, command))
                        or next(answers))
    monkeypatch.setattr("time.sleep", lambda s: None)
    out = []
    assert main(["cancel", "alpha", "r"], client=client, out=out.append) == 0
    assert execs[0] == ("alpha", "r-1-head", ["touch", sentinel]) and len(execs) == 3
    assert execs[1][2][:3] == ["sh", "-c", SAVE_STATE] and execs[1][2][4:] == [lease, sentinel, "1"]
    pods_query = next(c for c in fake.calls if c[1] == "/api/v1/namespaces/team-alpha/pods")
    assert pods_query[2] == {"labelSelector": "rl.platform/run=r,rl.platform/attempt=1,ray.io/node-type=head"}
    assert not [c for c in fake.calls if c[0] == "DELETE"]  # the attempt is kept, suspended
    patches = [(c[1], c[3]) for c in fake.calls if c[0] == "PATCH"]
    assert patches == [("/apis/ray.io/v1/namespaces/team-alpha/rayjobs/r-1", {"spec": {"suspend": True}})]
    assert out == ["cancelled r-1 (after its checkpoint)"]
    fake.calls.clear()
    execs.clear()
    assert main(["cancel", "alpha", "r", "--now"], client=client, out=lambda _: None) == 0
    assert execs == []
    pods = [c for c in fake.calls if c[0] == "DELETE" and c[1] == "/api/v1/namespaces/team-alpha/pods"]
    assert pods and pods[0][2] == {"labelSelector": "rl.platform/run=r", "gracePeriodSeconds": "0"}


def test_show_reports_attempts_gang_and_pods_and_an_unknown_run_fails(api, capsys):
    routes = {("GET", "/apis/ray.io/v1/namespaces/team-alpha/rayjobs"): {"items": [_job("r-1", "r", "alpha")]},
              ("GET", "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-alpha/podgroups/ray-r-1-pg"):
                  {"status": {"phase": "Inqueue"}},
              ("GET", "/api/v1/namespaces/team-alpha/pods"): {"items": [
                  {"metadata": {"name": "r-1-head"}, "status": {"phase": "Pending"}}]}}
    fake, client = api(routes)
    out = []
    assert main(["show", "alpha", "r"], client=client, out=out.append) == 0
    assert out == ["r-1: Running RUNNING ", "gang (PodGroup): Inqueue", "  r-1-head: Pending"]
    fake2, client2 = api({})
    assert main(["show", "alpha", "nope"], client=client2, out=out.append) == 1
    assert "no run 'nope' in namespace team-alpha" in capsys.readouterr().err


def test_dry_run_prints_the_objects_without_a_cluster_and_plan_exits_non_zero_on_a_run_that_never_fits(tmp_path):
    def no_cluster():
        raise AssertionError("dry run contacted a cluster")
    out = []
    assert main(["submit", SHARED, str(ROOT / "runs" / "grpo-qwen3-30b.yaml"), "--dry-run"], client=no_cluster,
                out=out.append) == 0
    assert [d["kind"] for d in yaml.safe_load_all(out[1])] == ["RayJob"]
    out.clear()
    two = [str(ROOT / "runs" / f) for f in ("beta-lr-sweep.yaml", "grpo-qwen3-30b.yaml")]
    assert main(["plan", SHARED, *two], out=out.append) == 0
    assert any(line.startswith("queue team-alpha: pool train 64/128 GPUs") for line in out)
    assert "pool train: 12/16 nodes claimed by running and starting runs" in out
    assert out[-1].startswith("file system: 1,851 of 4,639 GB usable budgeted")  # 2 runs x 926 GB
    too_big = tmp_path / "too-big.yaml"
    too_big.write_text("name: too-big\nteam: alpha\nnodes: {train: 20, rollout: 1}\n")
    assert main(["plan", SHARED, str(too_big)], out=out.append) == 1


def test_tier_sizes_count_only_the_pools_nodes_and_each_pool_up_to_the_gangs_need():
    hns = [{"metadata": {"name": "a"}, "spec": {"tier": 1, "members": [
               {"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in ("n1", "n2", "cpu1")]}},
           {"metadata": {"name": "b"}, "spec": {"tier": 1, "members": [
               {"type": "Node", "selector": {"exactMatch": {"name": "n3"}}}]}},
           {"metadata": {"name": "top"}, "spec": {"tier": 2, "members": [
               {"type": "HyperNode", "selector": {"exactMatch": {"name": h}}} for h in ("a", "b")]}}]
    assert tier_sizes_from_hypernodes(hns, [({"n1", "n2", "n3"}, 3)]) == {1: 2, 2: 3}
    # train nodes n1, n2 under "a", a rollout node n3 under "b": a gang of 1 train and 1 rollout node
    # fits no tier-1 HyperNode (1 of its 2 nodes in either), only "top"
    assert tier_sizes_from_hypernodes(hns, [({"n1", "n2"}, 1), ({"n3"}, 1)]) == {1: 1, 2: 2}
    from workloads.checks.crds import crd_schema, validate
    schema = crd_schema("topology.volcano.sh/v1alpha1", "HyperNode")  # what label discovery creates
    for h in hns:
        assert validate({"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", **h}, schema) == []


def test_sample_run_files_load(tmp_path: Path):
    for path in (ROOT / "runs").glob("*.yaml"):
        assert load_run(path).team in {"alpha", "beta"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: 1st-run\nteam: alpha\nnodes: {}\n")  # KubeRay wants DNS-1035 names
    with pytest.raises(ValueError, match=f"{bad}: name: '1st-run' is not allowed; allowed: a string matching"):
        load_run(bad)


def test_the_save_state_cancel_polls_reads_sentinel_and_lease_as_the_hook_does(tmp_path):
    lease, sentinel = tmp_path / "RUNNING", tmp_path / "SAVE_NOW"

    def state():
        return subprocess.run(["/bin/sh", "-c", SAVE_STATE, "save-state", str(lease), str(sentinel), "1"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert state() == "saved"
    sentinel.touch()
    lease.write_text("1")
    assert state() == "waiting"
    os.utime(lease, (time.time() - 180, time.time() - 180))
    assert state() == "lapsed"


def _rbac_request(method: str, path: str) -> tuple[str, str, str, str | None]:
    """(verb, API group, resource[/subresource], namespace) of a REST call, as the API server authorizes it."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    ns = None
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    verb = {"GET": "get" if name else "list", "POST": "create", "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection"}[method]
    return verb, group, resource + (f"/{sub}" if sub else ""), ns


def _allows(rules, verb, group, resource) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_a_team_member_may_run_the_run_command_in_the_teams_namespace_and_nowhere_else(api, monkeypatch, tmp_path):
    from workloads.render.teams import run_submitter_cluster_role, team_rbac
    cfg = variant(SHARED, {})
    beta = next(t for t in cfg.workloads.teams if t.name == "beta")
    role, binding, cluster_binding = team_rbac(beta)
    assert binding["subjects"] == cluster_binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "rl-team-beta"}]
    cluster_rules = run_submitter_cluster_role()["rules"]
    sentinel, lease = "/mnt/fsx/checkpoints/small/SAVE_NOW", "/mnt/fsx/checkpoints/small/RUNNING"
    job = {**_job("small-1", "small", "beta"), "spec": {
        "entrypoint": f"python3 /opt/scripts/miles_launcher.py --marker {lease} --attempt 1",
        "runtimeEnvYAML": yaml.safe_dump({"env_vars": {"MILES_ARGV": json.dumps(["x.py", "--save-trigger-sentinel",
                                                                                  sentinel])}})}}
    fake, client = api({("GET", "/apis/ray.io/v1/namespaces/team-beta/rayjobs"): {"items": [job]},
                        ("GET", "/api/v1/namespaces/team-beta/pods"): {"items": [
                            {"metadata": {"name": "small-1-head"}, "status": {"phase": "Running"}}]}})
    execs = []
    monkeypatch.setattr(RunClient, "_exec", lambda self, team, pod, command: execs.append(team) or (0, "saved"))
    small = tmp_path / "small.yaml"
    small.write_text("name: small\nteam: beta\npriority: low\nnodes: {train: 1, rollout: 2}\n")
    for argv in (["show", "beta", "small"], ["list", "--team", "beta"], ["cancel", "beta", "small"],
                 ["cancel", "beta", "small", "--now"]):
        assert main(argv, client=client, out=lambda _: None) == 0, argv
    job["status"] = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}
    fake.routes[("GET", "/api/v1/namespaces/team-beta/pods")] = {"items": []}
    assert main(["submit", SHARED, str(small), "--resume", "--repository", REPO,
                 "--stack-dir", str(pinned_stack_dir(tmp_path))], client=client, out=lambda _: None) == 0
    requests = {_rbac_request(method, path) for method, path, _, _ in fake.calls}
    requests |= {("create", "", "pods/exec", "team-" + t) for t in execs} | {("get", "", "pods/exec", "team-beta")}
    assert {r[:3] for r in requests} >= {("create", "ray.io", "rayjobs"), ("patch", "ray.io", "rayjobs"),
                                         ("list", "", "nodes"),
                                         ("list", "topology.volcano.sh", "hypernodes"), ("deletecollection", "", "pods")}
    for verb, group, resource, ns in sorted(requests, key=str):
        rules = role["rules"] if ns is not None else cluster_rules
        assert ns in (None, "team-beta") and _allows(rules, verb, group, resource), (verb, group, resource, ns)
    # Nothing in another team's namespace, nothing that writes cluster-wide.
    assert all(r["verbs"] == ["get", "list"] for r in cluster_rules)
    assert role["metadata"]["namespace"] == "team-beta"


def test_a_capacity_block_end_asks_every_running_run_of_every_team_for_a_checkpoint(tmp_path):
    from datetime import datetime, timedelta, timezone

    from stackconfig.files import raw_stack
    from stackconfig.stack import load_stack
    from workloads.derive.model import derive
    from workloads.render import trigger_script
    from workloads.schema.stack import ProgramConfig
    raw = raw_stack(SHARED)
    end = datetime.now(timezone.utc) + timedelta(minutes=89)  # the 90-minute lead began a minute ago
    raw["pools"][1]["capacity"]["endTime"] = end.strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["workloads"]["storage"] = {"mountPath": str(tmp_path)}
    m = derive(gate.load(SHARED, raw))
    runs = {name: tmp_path / "checkpoints" / "teams" / team / name
            for team, name in (("alpha", "a1"), ("beta", "b1"), ("beta", "b-done"))}
    for name, d in runs.items():
        d.mkdir(parents=True)
        if name != "b-done":
            (d / "RUNNING").write_text("1")
    out = [subprocess.run(["/bin/sh", "-c", trigger_script(m, team)], capture_output=True, text=True,
                          check=True).stdout for team in ("alpha", "beta")]
    assert [name for name, d in runs.items() if (d / "SAVE_NOW").exists()] == ["a1", "b1"], out


def test_member_arns_get_one_access_entry_in_every_team_group_that_lists_them_and_never_an_admins():
    from stackconfig.stack import StackConfigError
    arn = "arn:aws:iam::123456789012:role/ml-infra"
    teams = {"workloads": {"teams": [
        {"name": "alpha", "members": [arn], "gpus": {"train": {"guarantee": 64, "cap": 128}}},
        {"name": "beta", "members": [arn, "arn:aws:iam::123456789012:user/bob"], "gpus": {"rollout": {"cap": 128}}}]}}
    graph = variant_graph(SHARED, teams)
    entries = {r.inputs["principalArn"]: r.inputs["kubernetesGroups"] for r in graph.of_type("aws:eks/accessEntry:AccessEntry")
               if "kubernetesGroups" in r.inputs}
    assert entries == {arn: ["rl-team-alpha", "rl-team-beta"],
                       "arn:aws:iam::123456789012:user/bob": ["rl-team-beta"]}
    with pytest.raises(StackConfigError, match="members: arn:aws:iam::123456789012:role/ml-infra is in "
                                               "cluster.adminRoleArns too"):
        variant(SHARED, {**teams, "cluster": {"adminRoleArns": [arn]}})
    with pytest.raises(StackConfigError, match="not a service-linked role"):
        variant(SHARED, {"workloads": {"teams": [{"name": "alpha", "members": [
            "arn:aws:iam::123456789012:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS"]}]}})


def test_listing_every_team_without_the_right_says_to_pass_a_team(api, capsys):
    import unittest.mock as mock

    from kubernetes.client import ApiException, CustomObjectsApi
    _, client = api({})

    def forbidden(self, *a, **kw):
        raise ApiException(status=403, reason="Forbidden")
    with mock.patch.object(CustomObjectsApi, "list_cluster_custom_object", forbidden):
        assert main(["list"], client=client, out=lambda _: None) == 1
    assert "a team member passes --team" in capsys.readouterr().err
