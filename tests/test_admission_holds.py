"""What a team's pod may hold (issue 35 items 1, 2, 4 and 8): a whole GPU node or nothing of it, a head no
bigger than the platform's, a grace period within the checkpoint bound, its PodGroup's priority, NET_RAW
dropped, metadata fixed once KubeRay made it; and a RayJob never deleted leaving its cluster behind. The
numbers come from the stack (``render.pod_limits``), and so do the attacks' expectations. Each table is
also played against the real API server (tests/controlplane/test_cp_tenancy.py)."""

from __future__ import annotations

import copy

import pytest
from test_admission import cfg, operator_cluster, policies, rayjob, refused, run_pods  # noqa: F401 (fixtures)

from workloads.derive.model import derive
from workloads.render.admission import DELETION_POLICY, POD_POLICY, RAYCLUSTER_POLICY, RAYJOB_POLICY
from workloads.render.pod_rules import GROUP_ANNOTATION
from workloads.render.common import container_resources
from workloads.render.runs import PRIORITY_LABEL, TASK_PRIORITY

WHOLE, HEAD, GRACE, PRIORITY, NET_RAW, FIXED, POD_LEVEL = (
    "holds a whole node", "no bigger than the platform's head", "checkpoint grace", "PodGroup's priority", "NET_RAW",
    "are fixed", "per container")


def _edit(pod: dict, edit) -> dict:
    p = copy.deepcopy(pod)
    edit(p["spec"], p["spec"]["containers"][0], p)
    return p


def _sized(resources: dict) -> callable:
    """The main container asks ``resources`` (requests = limits), with no init container asking more."""
    def edit(s, c, p):
        s.pop("initContainers", None)
        c["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return edit


def hold_attacks(pods: list[dict], grace_seconds: int) -> dict[str, tuple[dict, str]]:
    """name -> (a run's pod changed, what the first refusal says); ``pods``: head, trainer, rollout."""
    head, trainer, rollout = pods
    small = {"cpu": "2", "memory": "4Gi"}
    efa_1gpu = {**small, "nvidia.com/gpu": "1", "vpc.amazonaws.com/efa": "16", "hugepages-2Mi": "5120Mi"}
    return {
        "0-GPU pod on train": (_edit(trainer, _sized(small)), WHOLE),
        "0-GPU pod on rollout": (_edit(rollout, _sized(small)), WHOLE),
        "gpu '0' with EFA on train": (_edit(trainer, _sized({**efa_1gpu, "nvidia.com/gpu": "0"})), "without GPUs"),
        "1 GPU with every EFA device and huge pages": (_edit(trainer, _sized(efa_1gpu)), WHOLE),
        "every GPU, 2 vCPU": (_edit(trainer, _sized({**container_resources_of(trainer), "cpu": "2"})), WHOLE),
        "every GPU, split over two containers": (_edit(trainer, _split), WHOLE),
        "GPUs as a limit only, one short": (_edit(trainer, _limits_only), WHOLE),
        "a 60-vCPU head": (_edit(head, _sized({"cpu": "60", "memory": "110G"})), HEAD),
        "a head with a second container": (_edit(head, _second_container), HEAD),
        "a head with a sidecar": (_edit(head, _sidecar), HEAD),
        "a head's init container above the head": (_edit(head, _big_init), HEAD),
        "a 60-vCPU head as pod-level resources": (_edit(head, _pod_level("60", "110G")), POD_LEVEL),
        "a trainer's pod-level resources": (_edit(trainer, _pod_level("200", "2100G")), POD_LEVEL),
        "grace of a day": (_edit(trainer, lambda s, c, p: s.update(terminationGracePeriodSeconds=86400)), GRACE),
        "grace just past the bound": (_edit(head, lambda s, c, p: s.update(
            terminationGracePeriodSeconds=grace_seconds + 1)), GRACE),
        "grace of int32 max, preStop sleeping": (_edit(trainer, _forever), GRACE),
        "no priorityClassName": (_edit(trainer, lambda s, c, p: s.pop("priorityClassName")), PRIORITY),
        "another rl- priority than the PodGroup's": (_edit(trainer, _other_priority), PRIORITY),
        "NET_RAW kept": (_edit(trainer, lambda s, c, p: c["securityContext"]["capabilities"].update(drop=["SYS_ADMIN"])),
                         NET_RAW),
        "no capabilities drop in an init container": (_edit(trainer, lambda s, c, p: s["initContainers"][0][
            "securityContext"].pop("capabilities")), NET_RAW),
    }


def container_resources_of(pod: dict) -> dict:
    return dict(pod["spec"]["containers"][0]["resources"]["requests"])


def _split(s, c, p):
    s.pop("initContainers", None)
    half = {k: v for k, v in c["resources"]["requests"].items()}
    half["nvidia.com/gpu"] = str(int(half["nvidia.com/gpu"]) // 2)
    c["resources"] = {"requests": dict(half), "limits": dict(half)}
    s["containers"].append({**copy.deepcopy(c), "name": "second"})


def _limits_only(s, c, p):
    s.pop("initContainers", None)
    limits = dict(c["resources"]["limits"])
    limits["nvidia.com/gpu"] = str(int(limits["nvidia.com/gpu"]) - 1)
    c["resources"] = {"limits": limits}


def _second_container(s, c, p):
    s["containers"].append({**copy.deepcopy(c), "name": "second"})


def _sidecar(s, c, p):
    s["initContainers"].append({**copy.deepcopy(c), "name": "sidecar", "restartPolicy": "Always"})


def _big_init(s, c, p):
    s["initContainers"][0]["resources"] = {"requests": {"cpu": "60", "memory": "110G"},
                                           "limits": {"cpu": "60", "memory": "110G"}}


def _pod_level(cpu: str, memory: str) -> callable:
    """Pod-level resources (PodLevelResources, on by default since Kubernetes 1.34): Volcano sizes the pod by them
    (v1.15.1 pkg/scheduler/api/pod_info.go:241-254) while its containers stay at the platform's shape. The API
    server requires them at least the containers' aggregate (a smaller one is an invalid pod, not an attack)."""
    def edit(s, c, p):
        s["resources"] = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    return edit


def _forever(s, c, p):
    s["terminationGracePeriodSeconds"] = 2147483647
    c["lifecycle"] = {"preStop": {"sleep": {"seconds": 2147483647}}}


def _other_priority(s, c, p):
    s["priorityClassName"] = next(x for x in ("rl-high", "rl-normal") if x != s["priorityClassName"])


def pod_update_attacks(pod: dict) -> dict[str, tuple[dict, str]]:
    """name -> (``pod`` after a metadata-only UPDATE, what the first refusal says)."""
    def meta(where: str, key: str, value: str) -> dict:
        out = copy.deepcopy(pod)
        out["metadata"].setdefault(where, {})[key] = value
        return out
    return {
        "not preemptable added": (meta("annotations", "volcano.sh/preemptable", "false"), "preemptable"),
        "not preemptable label added": (meta("labels", "volcano.sh/preemptable", "false"), "preemptable"),
        "another PodGroup": (meta("annotations", GROUP_ANNOTATION, "ray-other-pg"), FIXED),
        "task priority raised": (meta("annotations", TASK_PRIORITY, "100"), FIXED),
        "priority label changed": (meta("labels", PRIORITY_LABEL, "rl-high"), PRIORITY),
    }


def rayjob_attacks(rayjob: dict, grace_seconds: int) -> dict[str, tuple[dict, str]]:
    """name -> (the run's RayJob changed, what the first refusal says)."""
    def templates(edit) -> dict:
        out = copy.deepcopy(rayjob)
        cluster = out["spec"]["rayClusterSpec"]
        for t in [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]:
            edit(t["spec"])
        return out
    def group(index: int, edit) -> dict:
        out = copy.deepcopy(rayjob)
        cluster = out["spec"]["rayClusterSpec"]
        t = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])][index]
        edit(t["spec"], t["spec"]["containers"][0], t)
        return out
    orphan = copy.deepcopy(rayjob)
    orphan["metadata"]["finalizers"] = ["orphan"]
    return {
        "templates' grace past the bound": (templates(lambda s: s.update(
            terminationGracePeriodSeconds=grace_seconds + 1)), GRACE),
        "templates at another priority": (templates(lambda s: s.update(priorityClassName="rl-high")), "run's priority"),
        "templates without a priority": (templates(lambda s: s.pop("priorityClassName")), "run's priority"),
        "the orphan finalizer": (orphan, "orphan"),
        "a 60-vCPU head template": (group(0, _sized({"cpu": "60", "memory": "110G"})), HEAD),
        "a 0-GPU trainer template": (group(1, _sized({"cpu": "2", "memory": "4Gi"})), WHOLE),
        "a head template with pod-level resources": (group(0, _pod_level("60", "110G")), "per container"),
        **{f"workers: {name}": (_workers(rayjob, change), "runs workers") for name, change in IDLE_HEADS.items()},
    }


IDLE_HEADS = {
    "no worker groups": None,
    "every group at 0 replicas": {"replicas": 0, "minReplicas": 0},
    "maxReplicas 0": {"maxReplicas": 0, "minReplicas": 0},
    "every group suspended": {"suspend": True},
    "numOfHosts 0": {"numOfHosts": 0},
}
"""A Ray cluster of its head alone, KubeRay counting its workers (GetWorkerGroupDesiredReplicas, utils/util.go:389-407,
v1.7.0): name -> the change to every worker group (None: no worker groups)."""


def _workers(rayjob: dict, change: dict | None) -> dict:
    out = copy.deepcopy(rayjob)
    cluster = out["spec"]["rayClusterSpec"]
    if change is None:
        del cluster["workerGroupSpecs"]
    for g in cluster.get("workerGroupSpecs", []):
        g.update(change)
    return out


ORPHAN_DELETES = [{"propagationPolicy": "Orphan"}, {"orphanDependents": True},
                  {"propagationPolicy": "Orphan", "orphanDependents": False}]
CASCADING_DELETES = [{}, {"propagationPolicy": "Background"}, {"propagationPolicy": "Foreground"},
                     {"orphanDependents": False}]


# --- the tests ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def grace(cfg):
    return cfg.workloads.capacity_block_end.checkpoint_minutes * 60


def test_the_pod_limits_are_the_stacks_own_shapes(cfg, policies, grace):
    """The numbers the policy holds are what the run's pods ask, from the catalog, not literals."""
    m = derive(cfg)
    variables = {v["name"]: v["expression"] for v in policies[POD_POLICY]["spec"]["variables"]}
    for g in (g for g in m.workers if g.gpus):
        for k, q in container_resources(g)["requests"].items():
            assert f"'{g.pool.name}': {{" in variables["gpuShapes"] and f"'{k}': '{q}'" in variables["gpuShapes"]
    assert variables["headShape"] == "{" + ", ".join(
        f"'{k}': '{v}'" for k, v in sorted(container_resources(m.head)["requests"].items())) + "}"
    assert variables["graceSeconds"] == str(grace) and grace == 1800
    for name in (RAYJOB_POLICY, RAYCLUSTER_POLICY):
        assert {"name": "graceSeconds", "expression": str(grace)} in policies[name]["spec"]["variables"]


def test_the_runs_own_pods_pass_at_the_bound(policies, rayjob, grace):
    pods = run_pods(rayjob)
    assert [p["spec"]["terminationGracePeriodSeconds"] for p in pods] == [grace] * 3
    for pod in pods:
        assert refused(policies[POD_POLICY], pod) == []
        relabelled = copy.deepcopy(pod)
        relabelled["metadata"]["labels"]["example.com/note"] = "x"  # a harmless metadata-only update
        assert refused(policies[POD_POLICY], relabelled, "UPDATE", pod) == []
        unfinalized = copy.deepcopy(pod)
        unfinalized["metadata"]["finalizers"] = []
        assert refused(policies[POD_POLICY], unfinalized, "UPDATE", {**pod, "metadata": {
            **pod["metadata"], "finalizers": ["example.com/x"]}}) == []


def _misses(policy: dict, attacks: dict[str, tuple[dict, str]], operation: str = "CREATE",
            old: dict | None = None) -> list[str]:
    """The attacks ``policy`` admits, or refuses first for another reason than the table says."""
    out = []
    for name, (obj, part) in attacks.items():
        messages = refused(policy, obj, operation, old)
        if not messages or part not in messages[0]:
            out.append(f"{name}: {messages or 'admitted'}")
    return out


def test_a_pod_holding_a_node_part_way_past_the_grace_or_at_another_priority_is_refused(policies, rayjob, grace):
    attacks = hold_attacks(run_pods(rayjob), grace)
    assert len(attacks) == 20 and _misses(policies[POD_POLICY], attacks) == []


def test_a_metadata_only_update_of_a_pod_is_judged(policies, rayjob):
    """The pod policy skipped every UPDATE that kept the spec: a label or annotation added to a running pod
    (``volcano.sh/preemptable``, read from the pod by Volcano, pod_info.go:125-150) passed."""
    trainer = run_pods(rayjob)[1]
    assert _misses(policies[POD_POLICY], pod_update_attacks(trainer), "UPDATE", trainer) == []


@pytest.mark.parametrize("name", ["templates' grace past the bound", "templates at another priority",
                                  "templates without a priority", "the orphan finalizer",
                                  "a 60-vCPU head template", "a 0-GPU trainer template",
                                  "a head template with pod-level resources",
                                  *(f"workers: {name}" for name in IDLE_HEADS)])
def test_a_rayjob_and_its_cluster_are_held_to_the_grace_the_priority_workers_and_no_orphaning(policies, rayjob, grace, name):
    bad, part = rayjob_attacks(rayjob, grace)[name]
    messages = refused(policies[RAYJOB_POLICY], bad)
    assert messages and part in messages[0], messages
    cluster = operator_cluster(bad)
    cluster["metadata"]["finalizers"] = bad["metadata"].get("finalizers", [])
    messages = refused(policies[RAYCLUSTER_POLICY], cluster)
    assert messages and part in messages[0], messages


def test_the_orphan_finalizer_is_refused_on_an_update_that_changes_nothing_else(policies, rayjob, grace):
    bad, _ = rayjob_attacks(rayjob, grace)["the orphan finalizer"]
    assert refused(policies[RAYJOB_POLICY], bad, "UPDATE", rayjob) == [
        refused(policies[RAYJOB_POLICY], bad)[0]]
    removed = copy.deepcopy(rayjob)
    removed["metadata"]["finalizers"] = []
    assert refused(policies[RAYJOB_POLICY], removed, "UPDATE", bad) == []  # GC taking it off passes


@pytest.mark.parametrize("options", ORPHAN_DELETES)
def test_a_rayjob_deleted_leaving_its_cluster_is_refused(policies, rayjob, options):
    messages = refused(policies[DELETION_POLICY], None, "DELETE", rayjob, {"kind": "DeleteOptions", **options})
    assert len(messages) == 1 and "with its dependents" in messages[0]


@pytest.mark.parametrize("options", CASCADING_DELETES)
def test_a_rayjob_deleted_with_its_cluster_passes(policies, rayjob, options):
    assert refused(policies[DELETION_POLICY], None, "DELETE", rayjob, {"kind": "DeleteOptions", **options}) == []


def test_a_gpu_pool_the_shapes_lack_admits_no_pod(policies, rayjob):
    """The whole-node rule reads the pool list the policy pack checks (``variables.gpuPools``): a ``gpuShapes``
    edited to drop a pool closes that pool instead of opening it."""
    narrowed = copy.deepcopy(policies[POD_POLICY])
    shapes = next(v for v in narrowed["spec"]["variables"] if v["name"] == "gpuShapes")
    shapes["expression"] = shapes["expression"].split(", 'train': ")[0] + "}"
    head, trainer, rollout = run_pods(rayjob)
    assert refused(narrowed, rollout) == [] and refused(narrowed, head) == []
    assert WHOLE in refused(narrowed, trainer)[0]
