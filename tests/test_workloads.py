"""Workloads as the program registers them: every Kubernetes object against the official schema of
the pinned Kubernetes version, every custom resource against its CRD, the reference shape of
p5en-prod, environment per family and DeepEP mode, the checkpoint path to S3, reward and Job."""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from conftest import ROOT, STACKS, graph_of, load, raw_config, recorded

from analysis import mocks
from stackconfig.stack import POOL_LABEL, Role, StackConfigError, load_stack
from stackconfig.files import raw_stack
from program import ProgramConfig
from software import profiles
from workloads.derive.model import derive
from workloads.deploy.submit import run_objects
from workloads.schema.run import RunFile
from workloads.checks import gate
from workloads.checks.queues import gpu_pools, queue_shares
from workloads.derive import layout as L
from workloads.derive.deepep import resolve_deepep
from workloads.derive.paths import CHECKPOINT_DIR, paths
from workloads import render as M
from workloads.checks.crds import SCHEMAS, crd_schema, validate  # noqa: F401  (SCHEMAS: re-used by other test modules)
from workloads.checks.flags import argv_pairs
from workloads.derive.resources import EFA, GPU, HUGEPAGES, allocatable, effective_requests, parse_quantity

HELM = "kubernetes:helm.sh/v3:Release"
K8S_PROVIDER = "pulumi:providers:kubernetes"


# --- helpers shared by the workload tests --------------------------------------------------------


def software_with(test=lambda p: True) -> str:
    """The names of the catalog's profiles that pass ``test``, as a refusal lists them (a pattern): a new
    profile in software/profiles.yaml changes the lists without a test to edit."""
    return re.escape(", ".join(n for n, p in profiles().items() if test(p)))

def merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def variant(stack: str, override: dict) -> ProgramConfig:
    """``stack`` with ``override`` merged in, through the gate every command uses."""
    return gate.load(stack, merge(raw_config(stack), override))


def typed(stack: str, override: dict) -> ProgramConfig:
    """The same, typed only (the schema, not the gate): for tests of what the gate refuses."""
    return load_stack(stack, merge(raw_config(stack), override), ProgramConfig)


def variant_graph(stack: str, override: dict) -> mocks.Graph:
    """The recorded graph of ``variant(stack, override)`` (shared: see ``conftest.recorded``)."""
    return recorded(variant(stack, override))


RAYJOB = {"workloads": {"run": {"rayJob": True}}}


@functools.cache
def schema(api_version: str, kind: str) -> dict:
    return crd_schema(api_version, kind)


def k8s_version(cfg) -> str:
    return f"{cfg.versions.kubernetes}.0"


BUILTIN_GROUPS = {"networking.k8s.io", "rbac.authorization.k8s.io", "storage.k8s.io", "scheduling.k8s.io",
                  "admissionregistration.k8s.io",
                  "node.k8s.io", "coordination.k8s.io", "discovery.k8s.io"}
"""Built-in API groups with a dot in their name (the others, core/apps/batch/policy, have none)."""


def is_core_object(r: mocks.Registered) -> bool:
    group = r.type.split(":")[1]
    return r.custom and r.type.startswith("kubernetes:") and r.type != HELM and (
        group.startswith("core/") or "." not in group.split("/")[0] or group.split("/")[0] in BUILTIN_GROUPS)


def is_custom_resource(r: mocks.Registered) -> bool:
    return r.custom and r.type.startswith("kubernetes:") and r.type != HELM and not is_core_object(r)


def obj_of(r: mocks.Registered) -> dict:
    return dict(r.inputs)


def custom_objects(graph: mocks.Graph, kind: str) -> list[dict]:
    return [obj_of(r) for r in graph.resources if is_custom_resource(r) and r.inputs.get("kind") == kind]


def objects(graph: mocks.Graph, kind: str) -> list[dict]:
    return [obj_of(r) for r in graph.resources if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind]


def one(graph: mocks.Graph, kind: str, namespace: str | None = None) -> dict:
    """The one object of ``kind`` (in ``namespace`` when given)."""
    found = [obj_of(r) for r in graph.resources if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
             and namespace in (None, (r.inputs.get("metadata") or {}).get("namespace"))]
    assert len(found) == 1, (kind, len(found))
    return found[0]


def pod_templates_of(obj: dict) -> list[tuple[str, dict]]:
    """(where, pod template) of every pod template inside a custom resource."""
    spec = obj["spec"]
    if obj["kind"] == "RayCluster":
        return [("head", spec["headGroupSpec"]["template"])] + [
            (g["groupName"], g["template"]) for g in spec["workerGroupSpecs"]]
    if obj["kind"] == "RayJob":
        own = spec.get("rayClusterSpec")
        return pod_templates_of({"kind": "RayCluster", "spec": own}) if own else []
    if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano.sh"):
        return [(t["name"], t["template"]) for t in spec["tasks"]]
    return []


def validate_pod_template(template: dict, version: str) -> None:
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                                  "template": template}, version, strict=True)


def validate_custom(obj: dict, version: str) -> None:
    errors = validate(obj, schema(obj["apiVersion"], obj["kind"]))
    assert errors == [], f"{obj['kind']} {obj['metadata'].get('name')}: {errors}"
    for where, template in pod_templates_of(obj):
        validate_pod_template(template, version)


def job_argv(rayjob: dict) -> list[str]:
    """The Miles entry point and flags a RayJob runs (its runtime environment's MILES_ARGV)."""
    env = yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"])["env_vars"]
    assert shlex.split(rayjob["spec"]["entrypoint"])[:2] == ["python3", "/opt/scripts/miles_launcher.py"]
    return json.loads(env["MILES_ARGV"])


def full_run(cfg) -> RunFile:
    """The largest run of a runs-mode stack's first team: as many training and rollout nodes as its queue may
    hold on each pool (a run above the queue's limit there never starts: check_queue_limit)."""
    team = cfg.workloads.teams[0].name
    shares = queue_shares(cfg.workloads.teams, gpu_pools(cfg))[team].pools
    return RunFile(name="all-nodes", team=team, nodes={
        p.name: min(p.nodes.desired, shares[p.name].limit // p.instance.gpus)
        for p in (cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT))})


def ray_cluster(cfg, graph: mocks.Graph) -> dict:
    """The stack's RayCluster; with ``submit: runs``, the own cluster of a run taking every GPU node."""
    if cfg.workloads.submit.value == "runs":
        return {"spec": run_objects(cfg, full_run(cfg)).rayjob["spec"]["rayClusterSpec"]}
    return one(graph, "RayCluster")


def groups(raycluster: dict) -> dict[str, dict]:
    spec = raycluster["spec"]
    return {"head": spec["headGroupSpec"], **{g["groupName"]: g for g in spec["workerGroupSpecs"]}}


def container(template: dict) -> dict:
    (c,) = template["spec"]["containers"]
    return c


def env_of(c: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def recorded_argv(graph: mocks.Graph) -> list[str]:
    return job_argv(one(graph, "RayJob"))


def flag_values(argv: list[str]) -> dict[str, list[str]]:
    return {f: v for f, v in argv_pairs(argv)}


def expected_tolerations(pool) -> list[dict]:
    return [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in pool.taints]


# --- every object against its schema ------------------------------------------------------------

def test_every_kubernetes_object_validates_against_the_pinned_kubernetes_schema(stack):
    cfg, graph = load(stack), graph_of(stack)
    objects = [obj_of(r) for r in graph.resources if is_core_object(r)]
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ServiceAccount", "ConfigMap", "PersistentVolume", "PersistentVolumeClaim", "Job",
            "NetworkPolicy", "PodDisruptionBudget"} <= kinds
    assert ({"Deployment", "Service"} <= kinds) == (L.reward_group(cfg) is not None)
    for obj in objects:
        kubernetes_validate.validate(obj, k8s_version(cfg), strict=True)


def test_strict_validation_catches_a_misspelt_field():
    cfg = load("p5en-prod")
    bad = M.reward_deployment(derive(cfg))
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, k8s_version(cfg), strict=True)
    rc = M.raycluster(derive(cfg))
    rc["spec"]["workerGroupSpecs"][0]["replica"] = 3
    assert validate(rc, schema("ray.io/v1", "RayCluster")) == [".spec.workerGroupSpecs[0].replica: unknown field"]


def test_every_custom_resource_validates_against_its_crd(stack):
    cfg, graph = load(stack), graph_of(stack)
    crs = [obj_of(r) for r in graph.resources if is_custom_resource(r)]
    runs = cfg.workloads.submit.value == "runs"
    expected = ["Queue"] * (1 + len(cfg.workloads.teams)) if runs else ["Queue", "RayCluster"]
    assert sorted(o["kind"] for o in crs) == expected
    for obj in crs:
        validate_custom(obj, k8s_version(cfg))


@pytest.mark.parametrize("stack", ["p5en-prod", "p4d"])
def test_the_opt_in_rayjob_validates_against_its_crd(stack):
    cfg, graph = variant(stack, RAYJOB), variant_graph(stack, RAYJOB)
    (job,) = custom_objects(graph, "RayJob")
    validate_custom(job, k8s_version(cfg))
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": L.RAY_CLUSTER}
    assert json.loads(job["spec"]["entrypointResources"]) == {L.GPU_NODE_RESOURCE: 0.001}
    assert custom_objects(graph_of(stack), "RayJob") == []  # opt-in: not in the stock stack


def test_the_opt_in_rayjob_is_submitted_by_the_operator_without_a_submitter_pod():
    """HTTPMode on the selected RayCluster: no submitter Job to fail a healthy run (kuberay#4921).
    No no-head-restart annotation: KubeRay acts on it only on a cluster it creates for the job."""
    from workloads.render.runs import NO_HEAD_RESTART
    cfg = variant("p5en-prod", RAYJOB)
    m = derive(cfg)
    job = M.rayjob(m)
    spec = job["spec"]
    validate_custom(job, k8s_version(cfg))
    assert spec["submissionMode"] == "HTTPMode" and "submitterPodTemplate" not in spec
    assert "clusterSelector" in spec and "rayClusterSpec" not in spec
    assert spec.get("backoffLimit", 0) == 0  # KubeRay refuses backoffLimit > 0 with a clusterSelector
    assert NO_HEAD_RESTART not in job["metadata"].get("annotations", {})
    assert [name for name, *_ in M.pod_templates(m) if "submitter" in name] == []
    assert [p for p in M.network_policies(m) if "submitter" in p["metadata"]["name"]] == []
    # The operator finds the dashboard by the head Service port named "dashboard" (utils/util.go:1022-1054),
    # which KubeRay copies from the head container's ports (common/service.go:403-433).
    ports = container(M.raycluster(m)["spec"]["headGroupSpec"]["template"])["ports"]
    assert {"name": "dashboard", "containerPort": 8265} in ports
    (head,) = [p for p in M.network_policies(m) if p["metadata"]["name"] == "ray-head"]
    assert head["spec"]["ingress"] == [{"from": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": M.KUBERAY_NAMESPACE}}}], "ports": [{"protocol": "TCP", "port": 8265}]}]


# --- the Ray cluster ----------------------------------------------------------------------------

def test_p5en_prod_reference_shape_and_argv():
    """The issue's figures: 16 trainer pods x 8 GPUs, 32 rollout pods x 8 GPUs (256), 16 EFA each; the
    reference stack runs miles-deepep-v2: DeepEP V2 across two-node engines. Megatron stays on its NCCL
    all-to-all: its deepepv2 backend (235952df) sizes the ElasticBuffer from each rank's own token count,
    which --use-dynamic-batch-size makes differ between ranks (workloads.derive.moe_backend.choose)."""
    cfg, graph = variant("p5en-prod", RAYJOB), variant_graph("p5en-prod", RAYJOB)
    g = groups(one(graph, "RayCluster"))
    assert (g["trainer"]["replicas"], g["rollout"]["replicas"]) == (16, 32)
    for name in ("trainer", "rollout"):
        res = container(g[name]["template"])["resources"]
        assert res["requests"] == res["limits"]
        assert res["limits"][GPU] == "8" and res["limits"][EFA] == "16"
    rollout_gpus = g["rollout"]["replicas"] * int(container(g["rollout"]["template"])["resources"]["limits"][GPU])
    assert rollout_gpus == 256
    argv = flag_values(recorded_argv(graph))
    assert argv["--actor-num-nodes"] == ["16"] and argv["--actor-num-gpus-per-node"] == ["8"]
    assert argv["--rollout-num-gpus"] == ["256"] and argv["--num-gpus-per-node"] == ["8"]
    assert argv["--rollout-num-gpus-per-engine"] == ["16"] and argv["--sglang-ep-size"] == ["16"]
    assert argv["--sglang-moe-a2a-backend"] == ["deepep_v2"] and argv["--sglang-deepep-v2-mode"] == ["hybrid"]
    assert argv["--sglang-moe-runner-backend"] == ["deep_gemm"]
    assert "--use-dynamic-batch-size" in argv
    assert argv["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-flex-dispatcher-backend" not in argv
    assert "--moe-enable-deepep" not in argv
    assert "--use-fault-tolerance" not in argv  # rollout pool is an ODCR, not Spot
    assert cfg.pool(Role.ROLLOUT).capacity.type.value == "ODCR"


def test_argv_layout_follows_the_pools(stack):
    cfg = load(stack)
    train, rollout = cfg.pool(Role.TRAIN), cfg.pool(Role.ROLLOUT)
    g = groups(M.raycluster(derive(cfg)))
    argv = flag_values(job_argv(M.rayjob(derive(cfg))))
    assert int(argv["--actor-num-nodes"][0]) == g["trainer"]["replicas"] == train.nodes.desired
    assert int(argv["--actor-num-gpus-per-node"][0]) == train.instance.gpus
    assert int(argv["--rollout-num-gpus"][0]) == g["rollout"]["replicas"] * rollout.instance.gpus
    engine = int(argv["--rollout-num-gpus-per-engine"][0])
    assert engine == cfg.workloads.run.rollout.nodes_per_engine * rollout.instance.gpus
    assert int(argv["--rollout-num-gpus"][0]) % engine == 0
    assert ("--use-fault-tolerance" in argv) == (rollout.capacity.type.value == "SPOT")


def test_every_pod_sits_on_its_pool_with_exactly_its_taints(stack):
    cfg, graph = load(stack), graph_of(stack)
    g = groups(ray_cluster(cfg, graph))
    runs = cfg.workloads.submit.value == "runs"  # a run's own cluster: head and GPU groups only
    pools = {"head": L.head_pool(cfg), "trainer": cfg.pool(Role.TRAIN), "rollout": cfg.pool(Role.ROLLOUT)}
    if cfg.pool(Role.MEMORY) and not runs:
        pools["buffer"] = cfg.pool(Role.MEMORY)
    if cfg.pool(Role.CPU) and not runs:
        pools["preprocess"] = cfg.pool(Role.CPU)
    assert set(g) == set(pools)
    templates = {n: grp["template"] for n, grp in g.items()}
    if L.reward_group(cfg):
        pools["reward"] = L.reward_group(cfg).pool
        templates["reward"] = one(graph, "Deployment", cfg.checkpoints.namespace)["spec"]["template"]
    if not runs:
        pools["stage"] = L.preprocess_job(cfg).pool
        templates["stage"] = one(graph, "Job")["spec"]["template"]
    m = derive(cfg)
    for name, pool in pools.items():
        spec = templates[name]["spec"]
        # GPU pods of a DeepEP V2 run also select what their nodes' setup proves (gdrdrv, EFA-GDA).
        assert spec["nodeSelector"] == {POOL_LABEL: pool.name, **m.capabilities(pool)}, name
        assert pool.node_labels[POOL_LABEL] == pool.name
        # A GPU pod (its preflight keeps a boot record) also outlasts its node down (workloads.render.ray).
        down = M.ray.NODE_DOWN_TOLERATIONS if any(c["name"] == "preflight" for c in spec.get("initContainers", [])) else []
        assert spec.get("tolerations", []) == [*expected_tolerations(pool), *down], name
    assert not L.head_pool(cfg).instance.is_gpu and L.head_pool(cfg).capacity.type.value != "SPOT"


def test_gpu_pods_take_the_whole_node(stack):
    cfg, graph = load(stack), graph_of(stack)
    g = groups(ray_cluster(cfg, graph))
    deepep = resolve_deepep(cfg)
    for name, role in (("trainer", Role.TRAIN), ("rollout", Role.ROLLOUT)):
        pool, template = cfg.pool(role), g[name]["template"]
        c = container(template)
        req = effective_requests(c["resources"])
        alloc = allocatable(pool, cfg.workloads.efa_devices)
        assert req[GPU] == pool.instance.gpus
        assert req.get(EFA, 0) == pool.efa_devices  # every EFA device the node advertises
        assert (req.get(HUGEPAGES, 0) > 0) == (pool.efa_devices > 0)
        assert req["cpu"] <= alloc.millicpu / 1000 and req["memory"] <= alloc.memory
        assert req["memory"] >= 0.95 * alloc.memory and req["cpu"] >= 0.95 * alloc.millicpu / 1000
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        (shm,) = [v for v in template["spec"]["volumes"] if v["name"] == M.SHM_VOLUME]
        assert shm["emptyDir"]["medium"] == "Memory"
        assert parse_quantity(shm["emptyDir"]["sizeLimit"]) < parse_quantity(c["resources"]["limits"]["memory"])
        params = g[name]["rayStartParams"]
        assert params["num-gpus"] == str(pool.instance.gpus)
        assert int(params["object-store-memory"]) <= parse_quantity(shm["emptyDir"]["sizeLimit"])
        env = env_of(c)
        if pool.efa_devices:
            assert env["FI_PROVIDER"] == "efa" and env["NCCL_NET_PLUGIN"] == "ofi"
            assert ("NCCL_GIN_TYPE" in env) == (deepep.version.value == "v2" and role is Role.ROLLOUT)
    # The driver's entrypoint resource exists only on training nodes (never Spot).
    assert "gpu_node" in g["trainer"]["rayStartParams"]["resources"]
    assert "gpu_node" not in g["rollout"]["rayStartParams"]["resources"]
    assert g["head"]["rayStartParams"]["num-gpus"] == "0"


def _gpu_env(cfg) -> dict[str, str]:
    return env_of(container(groups(M.raycluster(derive(cfg)))["rollout"]["template"]))


def test_environment_by_family_and_deepep_mode():
    gda = _gpu_env(load("p5en-prod"))  # miles-deepep-v2 on p5en: GPU-initiated EFA (GIN type 5)
    assert (gda["NCCL_GIN_TYPE"], gda["NCCL_GIN_ENABLE"], gda["NCCL_CUMEM_ENABLE"]) == ("5", "1", "1")
    assert gda["NCCL_SYM_GIN_KERNELS_ENABLE"] == "0" and gda["NCCL_NVLS_ENABLE"] == "1"
    off = _gpu_env(variant("p5en-prod", MILES_01))  # bf16 on Miles' SGLang fork: DeepEP off
    assert not any(k.startswith(("NCCL_GIN", "NCCL_SYM", "NVSHMEM")) for k in off)
    proxy = _gpu_env(variant("p5e", FP8_V2))  # p5e is no GDA family: the CPU proxy (type 2)
    assert proxy["NCCL_GIN_TYPE"] == "2" and "NCCL_SYM_GIN_KERNELS_ENABLE" not in proxy
    a100 = load("p4d")  # A100: DeepEP off
    env = _gpu_env(a100)
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_NVLS_ENABLE"] == "0"
    assert not any(k.startswith(("NCCL_GIN", "NVSHMEM")) for k in env)
    argv = flag_values(job_argv(M.rayjob(derive(a100))))
    assert argv["--moe-token-dispatcher-type"] == ["alltoall"] and "--sglang-moe-a2a-backend" not in argv
    assert "--use-fault-tolerance" in argv  # p4d's rollout pool is Spot


def test_efa_env_follows_the_plugins_own_guide():
    """aws-ofi-nccl 1.21 doc/efa-env-var.md: no RDMAV_FORK_SAFE, no FI_EFA_FORK_SAFE, and
    FI_EFA_USE_DEVICE_RDMA nowhere; the sockets fabric keeps NCCL off EFA and runs no DeepEP."""
    for stack in STACKS:
        for g in derive(load(stack)).workers:
            assert not {"RDMAV_FORK_SAFE", "FI_EFA_FORK_SAFE", "FI_EFA_USE_DEVICE_RDMA"} & set(g.env), (stack, g.name)
    sockets = variant("p5en-prod", {"workloads": {"run": {"fabric": "sockets", "deepep": {"version": "off"}}}})
    env = _gpu_env(sockets)
    assert (env["NCCL_NET"], env["NCCL_NET_PLUGIN"]) == ("Socket", "none") and "FI_PROVIDER" not in env
    assert "--sglang-moe-a2a-backend" not in flag_values(list(derive(sockets).argv))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: v2 needs RDMA .* fabric is sockets"):
        variant("p5en-prod", {"workloads": {"run": {"fabric": "sockets", "deepep": {"version": "v2"}}}})


@pytest.mark.parametrize("override, field", [
    ({"workloads": {"run": {"deepep": {"version": "v2"}}}}, "workloads.run.deepep.version"),
    ({"workloads": {"run": {"entryPoint": "train_rl.py"}}}, "workloads.run.entryPoint"),
    ({"workloads": {"run": {"parallel": {"tensor": 3}}}}, "workloads.run.parallel.tensor"),
    ({"workloads": {"ray": {"headPool": "train"}}}, "workloads.ray.headPool"),
    ({"workloads": {"run": {"colour": "blue"}}}, "workloads.run.colour"),
    ({"workloads": {"run": {"model": "org/unknown-moe"}}}, "workloads.run.modelArgs"),
    ({"workloads": {"efaDevices": {"train": 5}}}, "workloads.efaDevices.train"),
])
def test_inconsistent_workloads_fail_like_every_config_error(override, field):
    with pytest.raises(StackConfigError) as err:
        variant("p4d", override)
    first, second = str(err.value).splitlines()[:2]
    assert first == "stack 'p4d': invalid configuration"
    assert second.startswith(f"  {field}: "), second


DIGEST = "sha256:" + "1" * 64
FP8_V2 = {"workloads": {"run": {"software": "miles-deepep-v2", "model": "Qwen/Qwen3-30B-A3B-FP8",
                                "modelArgs": ["--num-layers", "48"], "deepep": {"version": "v2"},
                                "rollout": {"nodesPerEngine": 2}}},
          "versions": {"software": {"images": {"miles-deepep-v2": f"registry.example/miles:v2@{DIGEST}"}}}}
"""DeepEP V2 on the miles-deepep-v2 profile (SGLang 0.5.19 line, NCCL 2.31.2), its image pinned by digest."""
MILES_01 = {"workloads": {"run": {"software": "miles-0.1", "model": "Qwen/Qwen3-30B-A3B",
                                  "rollout": {"nodesPerEngine": 1}}}}
"""The platform's first stack (Miles 49cac7b5 on its 0.5.16-line fork) with bf16 experts."""


def test_deepep_v2_needs_its_profile_and_gpu_initiated_needs_a_gda_family():
    """V2 is refused on a profile without GIN, naming the profiles that have it; GPU-initiated EFA
    (type 5) exists on p5en, p6-b200 and p6-b300 only."""
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: v2 is not available with software "
                                               rf"miles-0.1 .*allowed: off, v1, or software: "
                                               rf"{software_with(lambda p: 'v2' in p.a2a)}$"):
        variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"software": "miles-0.1"}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.ginBackend: .*p5en, p6-b200 and p6-b300"):
        variant("p5e", merge(FP8_V2, {"workloads": {"run": {"deepep": {"ginBackend": "gpu"}}}}))
    cfg = variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"deepep": {"ginBackend": "proxy"}}}}))
    assert _gpu_env(cfg)["NCCL_GIN_TYPE"] == "2"


def test_upstream_moe_rules_refuse_what_cannot_run_and_pick_what_can():
    """bf16 with DeepEP V2 on SGLang 0.5.19, legacy DeepEP across EFA nodes or in low_latency mode
    (IBGDA), bf16 legacy DeepEP in normal mode before SGLang 0.5.17, and DeepEP on A100 are refused
    before anything is created; bf16 on Miles' fork runs without DeepEP."""
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: .*bf16 from 0.5.21.*working alternatives"):
        variant("p5en-prod", merge(FP8_V2, {"workloads": {"run": {"model": "Qwen/Qwen3-30B-A3B"}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: .*low_latency mode only"):
        variant("p5en-prod", merge(MILES_01, {"workloads": {"run": {"deepep": {"version": "v1"}}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: .*IBGDA"):
        variant("p5en-prod", merge(MILES_01, {"workloads": {"run": {"deepep": {"version": "v1", "sglangMode": "low_latency"}}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: "):
        variant("p4d", {"workloads": {"run": {"deepep": {"version": "v1"}}}})
    argv = flag_values(list(derive(variant("p5en-prod", MILES_01)).argv))
    assert "--sglang-moe-a2a-backend" not in argv and argv["--moe-token-dispatcher-type"] == ["alltoall"]
    fp8 = merge(MILES_01, {"workloads": {"run": {"model": "Qwen/Qwen3-30B-A3B-FP8", "modelArgs": ["--num-layers", "48"]}}})
    v1 = flag_values(list(derive(variant("p5en-prod", fp8)).argv))  # FP8 experts: legacy DeepEP in a node
    assert v1["--sglang-moe-a2a-backend"] == ["deepep"] and v1["--sglang-moe-runner-backend"] == ["deep_gemm"]
    assert v1["--sglang-deepep-mode"] == ["normal"]
    v2 = flag_values(list(derive(variant("p5en-prod", FP8_V2)).argv))
    assert v2["--sglang-moe-a2a-backend"] == ["deepep_v2"] and v2["--sglang-deepep-v2-mode"] == ["hybrid"]
    assert v2["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-enable-deepep" not in v2  # trainer: NCCL


def test_software_stack_is_one_place_and_overridable():
    cfg = variant("p5en-prod", {"versions": {"software": {"images": {"miles-deepep-v2": f"registry.example/miles@{DIGEST}"}}}})
    images = {container(t)["image"] for _, t in pod_templates_of(M.raycluster(derive(cfg)))}
    images |= {container(M.stage_template(derive(cfg)))["image"], container(M.reward_template(derive(cfg)))["image"]}
    assert images == {f"registry.example/miles@{DIGEST}"}
    assert M.raycluster(derive(cfg))["spec"]["rayVersion"] == derive(cfg).profile.ray
    with pytest.raises(StackConfigError, match=rf"versions.software.images: .miles-2. is not a software profile; "
                                               rf"allowed: {software_with()}"):
        variant("p5en-prod", {"versions": {"software": {"images": {"miles-2": "registry.example/x:1"}}}})


# --- operators, provider, ordering ---------------------------------------------------------------

def test_operators_pinned_on_the_cluster_provider(stack):
    cfg, graph = load(stack), graph_of(stack)
    releases = {r.inputs["name"]: r for r in graph.of_type(HELM)}
    charts = cfg.versions.charts
    for name, chart in (("kuberay-operator", charts.kuberay_operator), ("volcano", charts.volcano),
                        ("aws-fsx-csi-driver", charts.fsx_csi_driver)):
        r = releases[name]
        assert (r.inputs["chart"], r.inputs["version"], r.inputs["repositoryOpts"]["repo"]) == (
            chart.chart, chart.version, chart.repo)
    assert charts.kuberay_operator.version == "1.7.0"  # the CRDs in workloads/schemas/crds/ray.io_*.json
    assert releases["kuberay-operator"].inputs["values"]["nodeSelector"] == {POOL_LABEL: cfg.pool(Role.SYSTEM).name}
    (provider,) = [r for r in graph.resources if r.type == K8S_PROVIDER]
    workload_k8s = [r for r in graph.resources if r.type.startswith("kubernetes:")]
    assert workload_k8s and all(r.provider == provider.urn for r in workload_k8s)
    if cfg.workloads.submit.value == "runs":
        return  # no RayCluster in the graph: runs bring their own (test_runs)
    (rc,) = [r for r in graph.resources if is_custom_resource(r) and r.inputs["kind"] == "RayCluster"]
    needs = {releases["kuberay-operator"].urn, releases["nvidia-device-plugin"].urn,
             releases["aws-efa-k8s-device-plugin"].urn}
    assert needs <= set(rc.dependencies)
    node_groups = {r.inputs["nodeGroupName"]: r.urn for r in graph.of_type("aws:eks/nodeGroup:NodeGroup")}
    for role in (Role.TRAIN, Role.ROLLOUT):
        assert node_groups[f"{cfg.cluster_name}-{cfg.pool(role).name}"] in rc.dependencies


# --- checkpoints reach S3 ------------------------------------------------------------------------

def test_checkpoints_are_written_to_fsx_linked_to_the_bucket(stack):
    cfg, graph = load(stack), graph_of(stack)
    (fs,) = graph.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    (dra,) = graph.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    (bucket,) = graph.of_type("aws:s3/bucket:Bucket")
    node_subnet = graph.named("aws:ec2/subnet:Subnet", f"{cfg.cluster_name}-nodes")
    assert fs.inputs["deploymentType"] == "PERSISTENT_2" and fs.inputs["subnetIds"] == node_subnet.outputs["id"]
    assert fs.inputs["storageCapacity"] == cfg.workloads.storage.capacity_gib
    assert dra.inputs["fileSystemId"] == fs.outputs["id"]
    assert dra.inputs["dataRepositoryPath"] == f"s3://{bucket.outputs['bucket']}/{CHECKPOINT_DIR}/"
    # Retention deletes old saves on the file system; the export must not delete them in S3.
    assert sorted(dra.inputs["s3"]["autoExportPolicy"]["events"]) == ["CHANGED", "NEW"]
    assert sorted(dra.inputs["s3"]["autoImportPolicy"]["events"]) == ["CHANGED", "NEW"]  # an S3 delete never deletes a file
    assert fs.inputs["logConfiguration"] == {"level": "WARN_ERROR"}  # a failed export is logged
    # Lustre ports from the file system itself and from the nodes' cluster security group.
    (sg,) = [r for r in graph.of_type("aws:ec2/securityGroup:SecurityGroup") if r.urn in fs.dependencies]
    cluster_sg = graph.of_type("aws:eks/cluster:Cluster")[0].outputs["vpcConfig"]["clusterSecurityGroupId"]
    rules = graph.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    into_fsx = {(r.inputs["fromPort"], r.inputs["toPort"], r.inputs["referencedSecurityGroupId"])
                for r in rules if r.inputs["securityGroupId"] == sg.outputs["id"]}
    assert into_fsx == {(988, 988, sg.outputs["id"]), (1018, 1023, sg.outputs["id"]), (988, 988, cluster_sg),
                        (1018, 1023, cluster_sg)}
    # Miles saves under the association's directory; every Ray pod and the Job mount the claim there.
    p = paths(cfg)
    argv = flag_values(job_argv(M.rayjob(derive(cfg))))
    assert argv["--save"] == argv["--load"] == [p.checkpoints]
    assert p.checkpoints.startswith(f"{p.mount}{dra.inputs['fileSystemPath']}/")
    pv = next(o for o in objects(graph, "PersistentVolume") if o["metadata"]["name"] == f"{cfg.checkpoints.namespace}-fsx")
    pvc = next(o for o in objects(graph, "PersistentVolumeClaim") if o["metadata"]["namespace"] == cfg.checkpoints.namespace)
    assert pv["spec"]["csi"]["volumeHandle"] == fs.outputs["id"]
    assert pv["spec"]["csi"]["volumeAttributes"] == {"dnsname": fs.outputs["dnsName"],
                                                     "mountname": fs.outputs["mountName"]}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pv["spec"]["accessModes"] == ["ReadWriteMany"]
    jobs = [] if cfg.workloads.submit.value == "runs" else [one(graph, "Job")["spec"]["template"]]
    templates = [t for _, t in pod_templates_of({"kind": "RayCluster", **ray_cluster(cfg, graph)})] + jobs
    for t in templates:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in t["spec"]["volumes"]
                  if "persistentVolumeClaim" in v}
        team = cfg.workloads.submit.value == "runs"  # a team's run: its checkpoint directory over its own
        assert {m["mountPath"] for m in container(t)["volumeMounts"] if m["name"] in claims} == (
            {p.mount, f"{p.mount}/checkpoints"} if team else {p.mount})
        assert set(claims.values()) == {pvc["metadata"]["name"], *(["fsx-checkpoints"] if team else [])}


# --- reward service and preprocessing Job ----------------------------------------------------------

def test_reward_service_is_on_demand_and_is_what_miles_calls():
    """On-demand in the reference stack: Miles' remote reward call is one POST without retry
    (rollout/rm_hub), so a reclaimed reward node would fail rollouts."""
    cfg, graph = variant("p5en-prod", RAYJOB), variant_graph("p5en-prod", RAYJOB)
    dep, svc = one(graph, "Deployment", cfg.checkpoints.namespace), one(graph, "Service")
    (pdb,) = [obj_of(r) for r in graph.resources if r.inputs.get("kind") == "PodDisruptionBudget"
              and r.inputs["metadata"]["name"] == "reward"]
    reward = cfg.pool(Role.REWARD)
    assert reward.capacity.type.value == "ON_DEMAND"
    spec = dep["spec"]
    assert spec["replicas"] >= 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"] == spec["selector"]
    pod = spec["template"]["spec"]
    assert pod["nodeSelector"] == {POOL_LABEL: reward.name}
    assert pod["tolerations"] == expected_tolerations(reward)  # the GPU taint of the g6e pool
    c = container(spec["template"])
    assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(c)
    url = urlparse(flag_values(recorded_argv(graph))["--rm-url"][0])
    assert url.hostname == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local"
    assert url.port == svc["spec"]["ports"][0]["port"] == c["ports"][0]["containerPort"]
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    # The default server's source is shipped in the ConfigMap the pod mounts.
    cm = next(o for o in objects(graph, "ConfigMap") if "reward-server.py" in o["data"])
    assert cm["data"]["reward-server.py"] == (ROOT / "workloads" / "pod" / "reward_server.py").read_text()


def test_without_a_reward_pool_miles_computes_rewards_in_process():
    cfg = load("dev")
    assert cfg.pool(Role.REWARD) is None and L.reward_group(cfg) is None
    argv = flag_values(job_argv(M.rayjob(derive(cfg))))
    assert argv["--rm-type"] == [cfg.workloads.run.rm_type] and "--rm-url" not in argv


def test_reward_on_gpus_by_config():
    cfg = variant("p5en-prod", {"workloads": {"reward": {"gpus": 2}}})
    c = container(M.reward_template(derive(cfg)))
    assert c["resources"]["limits"][GPU] == "2"
    with pytest.raises(StackConfigError, match="workloads.reward.gpus"):
        variant("p5", {"workloads": {"reward": {"gpus": 1}}})  # p5's reward pool is c7i (CPU)


def test_preprocessing_job_stages_what_the_run_reads(stack):
    cfg, graph = load(stack), graph_of(stack)
    if cfg.workloads.submit.value == "runs":
        pytest.skip("with submit runs, each run's head stages its model (test_runs)")
    job = one(graph, "Job")
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {POOL_LABEL: (cfg.pool(Role.CPU) or L.head_pool(cfg)).name}
    env = env_of(container(job["spec"]["template"]))
    argv = flag_values(job_argv(M.rayjob(derive(cfg))))
    assert argv["--hf-checkpoint"] == [env["MODEL_DIR"]] and env["MODEL"] == cfg.workloads.run.model
    assert argv["--prompt-data"] == [f"{env['DATA_DIR']}/{env['PROMPT_FILE']}"]


def test_stack_files_load_with_the_program_schema():
    for stack in STACKS:
        cfg = load(stack)
        declared = raw_stack(stack).get("workloads")
        assert isinstance(cfg, ProgramConfig) and (declared is not None or
                                                   cfg.workloads == ProgramConfig.model_fields["workloads"].default)
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.p5en-prod.yaml").read_text())
    assert doc["config"]["moe-rl-platform:platform"]["workloads"]["run"]["software"] == "miles-deepep-v2"


def test_gpu_pools_scaled_to_zero_keep_the_cluster_but_declare_no_run():
    idle = {"pools": [dict(p, nodes={"min": 0, "desired": 0, "max": 1}) if p["role"] == "train" else p
                      for p in raw_stack("dev")["pools"]]}
    cfg = gate.load("dev", merge(raw_stack("dev"), idle))
    import program
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack="dev")
    assert groups(one(graph, "RayCluster"))["trainer"]["replicas"] == 0
    assert custom_objects(graph, "RayJob") == []
    with pytest.raises(ValueError, match="0 desired nodes"):
        M.rayjob(derive(cfg))
    with pytest.raises(StackConfigError, match=r"workloads.run.rayJob: pool 'train' has 0 desired nodes"):
        gate.load("dev", merge(merge(raw_stack("dev"), idle), RAYJOB))


def test_engines_without_expert_parallelism_shard_the_experts_by_tp_where_the_fp8_blocks_allow():
    """``rollout.expertParallel: false``: ``--sglang-ep-size 1``, no all-to-all, no DeepEP. SGLang shards each
    expert over the engine's GPUs, and refuses at model load a blockwise-FP8 checkpoint whose expert
    columns per GPU are not a multiple of the 128 block (sglang 0.5.19 model_executor/model_runner_components/
    moe_ep_setup.py:106-148; contracts/tests/test_sglang_resolve.py runs it): Qwen3-30B-A3B's 768 over 8
    GPUs is 96."""
    tp = {"workloads": {"run": {"rollout": {"nodesPerEngine": 1, "gpusPerEngine": 2, "expertParallel": False,
                                            "dpAttention": False}, "deepep": {"version": "off"}}}}
    argv = flag_values(list(derive(variant("p5en-prod", tp)).argv))
    assert argv["--sglang-ep-size"] == ["1"] and argv["--rollout-num-gpus-per-engine"] == ["2"]
    assert "--sglang-moe-a2a-backend" not in argv and "--sglang-enable-dp-attention" not in argv
    with pytest.raises(StackConfigError, match=r"workloads.run.rollout.gpusPerEngine: .*768 expert columns over 8 "
                                               r"GPUs are 96 each, not a multiple of the FP8 block \(128\)"):
        variant("p5en-prod", merge(tp, {"workloads": {"run": {"rollout": {"gpusPerEngine": 8}}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.deepep.version: v2 .*expertParallel: false"):
        variant("p5en-prod", merge(tp, {"workloads": {"run": {"deepep": {"version": "v2"}}}}))
    with pytest.raises(StackConfigError, match=r"workloads.run.rollout.gpusPerEngine: 3 does not divide"):
        variant("p5en-prod", merge(tp, {"workloads": {"run": {"rollout": {"gpusPerEngine": 3}}}}))
