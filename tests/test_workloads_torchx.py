"""The TorchX component dry-runs offline (no cluster) to the Volcano Job it would submit, and that
Job carries the same Miles argv, resources and placement as the Pulumi-declared run."""

from __future__ import annotations

import json
import shlex

import functools
import warnings

from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from test_workloads import (RAYJOB, container, env_of, groups, k8s_version, one, recorded_argv, validate_custom,
                            variant, variant_graph)

from workloads.derive.model import derive
from workloads.derive import layout as L
from workloads.derive.paths import paths
from workloads.render.common import VOLCANO_QUEUE
from workloads.derive.resources import effective_requests, parse_quantity
from workloads.deploy.torchx_miles import DRIVER_ARG0, HEAD_ROLE, appdef

STACKS = ["p5en-prod", "p4d", "p6-b300"]


TORCHX = {"workloads": {"submit": "torchx"}}
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rl-p5en-prod/workloads"
"""What ``pulumi stack output imageRepository`` prints (AWS's documentation account id)."""

def scheduler_cfg(cfg) -> dict:
    # validate_spec=False: no API server to dry-run against; reserved_*=0: requests == limits.
    return {"namespace": cfg.checkpoints.namespace, "queue": VOLCANO_QUEUE, "reserved_millicpu": 0,
            "reserved_memmb": 0, "validate_spec": False}


def serialize(resource: dict) -> dict:
    from kubernetes.client import ApiClient
    return ApiClient().sanitize_for_serialization(resource)


@functools.cache
def volcano_job(stack: str) -> dict:
    from torchx.runner import get_runner
    cfg = variant(stack, RAYJOB)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = get_runner().dryrun(appdef(derive(cfg), REPOSITORY), "kubernetes", cfg=scheduler_cfg(cfg),
                                   workspace=None)
    return serialize(info.request.resource)


def tasks_by_role(job: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for t in job["spec"]["tasks"]:
        role = t["template"]["metadata"]["labels"]["torchx.pytorch.org/role-name"]
        out.setdefault(role, []).append(t)
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_volcano_job_validates_against_the_volcano_crd(stack):
    job = volcano_job(stack)
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert job["spec"]["queue"] == VOLCANO_QUEUE and job["spec"]["schedulerName"] == "volcano"
    validate_custom(job, k8s_version(variant(stack, RAYJOB)))


@pytest.mark.parametrize("stack", STACKS)
def test_torchx_submits_the_same_argv_as_the_rayjob(stack):
    tasks = tasks_by_role(volcano_job(stack))
    (head,) = tasks[HEAD_ROLE]
    command = container(head["template"])["command"]
    assert command[:2] == ["bash", "-c"] and command[3:] == [DRIVER_ARG0]
    submit = shlex.split(next(line for line in command[2].splitlines() if line.startswith("ray job submit")))
    runtime = json.loads(next(w for w in submit if w.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert json.loads(runtime["env_vars"]["MILES_ARGV"]) == recorded_argv(variant_graph(stack, RAYJOB))
    assert submit[submit.index("--") + 1:] == ["python3", "/opt/scripts/miles_launcher.py"]
    assert any(w.startswith("--entrypoint-resources=") for w in submit)


@pytest.mark.parametrize("stack", STACKS)
def test_torchx_pods_match_the_rayclusters_resources_and_placement(stack):
    cfg = variant(stack, RAYJOB)
    declared = groups(one(variant_graph(stack, RAYJOB), "RayCluster"))
    tasks = tasks_by_role(volcano_job(stack))
    assert set(tasks) == set(declared)
    for name, group in declared.items():
        replicas = group.get("replicas", 1)
        assert len(tasks[name]) == replicas, name
        want = group["template"]
        want_c = container(want)
        for task in tasks[name]:
            got = task["template"]
            got_c = container(got)
            assert effective_requests(got_c["resources"]) == effective_requests(want_c["resources"]), name
            limits = {k: parse_quantity(v) for k, v in got_c["resources"]["limits"].items()}
            assert limits == {k: parse_quantity(v) for k, v in want_c["resources"]["limits"].items()}, name
            assert got["spec"]["nodeSelector"] == want["spec"]["nodeSelector"], name
            assert got["spec"].get("tolerations", []) == want["spec"].get("tolerations", []), name
            assert got["spec"]["serviceAccountName"] == want["spec"]["serviceAccountName"]
            assert env_of(want_c).items() <= env_of(got_c).items(), name
            assert got_c.get("securityContext", {}) == want_c.get("securityContext", {}), name
            shm = {v["name"]: v for v in got["spec"]["volumes"]}["dshm"]["emptyDir"]
            want_shm = {v["name"]: v for v in want["spec"]["volumes"]}["dshm"]["emptyDir"]
            assert parse_quantity(shm["sizeLimit"]) == parse_quantity(want_shm["sizeLimit"]), name
            mounts = {m["mountPath"] for m in got_c["volumeMounts"]}
            assert {"/dev/shm", paths(cfg).mount} <= mounts
            volumes = {v["name"] for v in got["spec"]["volumes"]}
            for c in [*got["spec"].get("initContainers", []), *got["spec"]["containers"]]:
                # the API server refuses a pod whose mount names no volume of the pod
                assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, (name, c["name"])
    if stack == "p5en-prod":  # the figures, in the TorchX request too
        assert (len(tasks["trainer"]), len(tasks["rollout"])) == (16, 32)
        for t in tasks["trainer"] + tasks["rollout"]:
            limits = container(t["template"])["resources"]["limits"]
            assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "16")
            assert parse_quantity(limits["hugepages-2Mi"]) > 0


def torchx_stack_dir(tmp_path, stack: str = "p5en-prod") -> Path:
    """``stack``'s file changed to TorchX submission, in a folder of its own."""
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["moe-rl-platform:platform"]["workloads"] = {"submit": "torchx"}
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def test_the_component_runs_from_its_file_like_the_cli(tmp_path):
    from torchx.runner import get_runner
    cfg = variant("p5en-prod", TORCHX)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = get_runner().dryrun_component(f"{ROOT / 'workloads' / 'deploy' / 'torchx_miles.py'}:miles_grpo",
                                             ["--stack", "p5en-prod", "--stack_dir", str(torchx_stack_dir(tmp_path)),
                                              "--repository", REPOSITORY],
                                             "kubernetes", cfg=scheduler_cfg(cfg))
    job = serialize(info.request.resource)
    assert len(job["spec"]["tasks"]) == 1 + sum(g.replicas for g in L.ray_workers(cfg))


def test_torchx_refuses_a_stack_whose_raycluster_holds_the_gpu_nodes():
    """Both paths take whole GPU nodes: with workloads.submit raycluster a TorchX gang stays Pending."""
    from workloads.deploy.torchx_miles import miles_grpo
    with pytest.raises(ValueError, match="workloads.submit is raycluster"):
        miles_grpo("p5en-prod")


def test_torchx_stack_registers_no_raycluster_and_its_job_pods_are_what_the_proof_counts():
    from test_workloads import variant_graph
    from workloads.render import pod_templates
    graph = variant_graph("p5en-prod", TORCHX)
    kinds = {r.inputs.get("kind") for r in graph.resources if r.type.startswith("kubernetes:")}
    assert "RayCluster" not in kinds and "Queue" in kinds
    assert not [r for r in graph.resources if r.inputs.get("kind") == "PodDisruptionBudget"
                and r.inputs["metadata"]["name"].startswith("ray-")]
    m = derive(variant("p5en-prod", TORCHX))
    counted = {name: replicas for name, _, _, replicas in pod_templates(m)}
    job = appdef(m, REPOSITORY)
    assert {f"torchx-{r.name}": r.num_replicas for r in job.roles} == {
        n: c for n, c in counted.items() if n.startswith("torchx-") and c}


def test_a_stack_file_changed_to_torchx_plans_clean(tmp_path, capsys):
    from analysis.plan import main
    assert main(["p5en-prod", "--stack-dir", str(torchx_stack_dir(tmp_path))]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "torchx-trainer" in out and "ray-trainer" not in out


def test_rayjob_with_torchx_submission_is_a_config_error():
    from stackconfig.stack import StackConfigError
    with pytest.raises(StackConfigError, match="workloads.run.rayJob: a RayJob runs on the stack's RayCluster"):
        variant("p5en-prod", {"workloads": {"submit": "torchx", "run": {"rayJob": True}}})


def test_torchx_runs_the_stacks_ecr_image_and_asks_for_the_repository():
    from workloads.deploy.torchx_miles import image_of
    m = derive(variant("p5en-prod", TORCHX))
    assert image_of(m, REPOSITORY) == f"{REPOSITORY}:{m.profile.image.tag}@sha256:{'0' * 64}"  # p5en-prod's pin
    with pytest.raises(ValueError, match="pass --repository"):
        image_of(m, "")
    pinned = derive(variant("p5en-prod", {"workloads": {"submit": "torchx"}, "versions": {"software": {
        "images": {"miles-deepep-v2": f"registry.example/miles@sha256:{'1' * 64}"}}}}))
    assert image_of(pinned, "") == f"registry.example/miles@sha256:{'1' * 64}"
