"""The TorchX component dry-runs offline (no cluster) to the Volcano Job it would submit, and that
Job carries the same Miles argv, resources and placement as the Pulumi-declared run."""

from __future__ import annotations

import functools
import warnings

import pytest
from conftest import ROOT
from test_workloads import (RAYJOB, container, env_of, groups, k8s_version, one, recorded_argv, validate_custom,
                            variant, variant_graph)

from workloads.model import derive
from workloads import layout as L
from workloads.render.common import VOLCANO_QUEUE
from workloads.resources import effective_requests, parse_quantity
from workloads.torchx_miles import DRIVER_ARG0, HEAD_ROLE, appdef

STACKS = ["p5en-prod", "p4d", "p6-b300"]


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
        info = get_runner().dryrun(appdef(derive(cfg)), "kubernetes", cfg=scheduler_cfg(cfg), workspace=None)
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
    assert command[:2] == ["bash", "-c"] and command[3] == DRIVER_ARG0
    assert command[4:] == recorded_argv(variant_graph(stack, RAYJOB))
    assert '-- "$@"' in command[2] and "--entrypoint-resources" in command[2]


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
            assert {"/dev/shm", L.paths(cfg).mount} <= mounts
    if stack == "p5en-prod":  # the figures, in the TorchX request too
        assert (len(tasks["trainer"]), len(tasks["rollout"])) == (16, 32)
        for t in tasks["trainer"] + tasks["rollout"]:
            limits = container(t["template"])["resources"]["limits"]
            assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "16")
            assert parse_quantity(limits["hugepages-2Mi"]) > 0


def test_the_component_runs_from_its_file_like_the_cli():
    from torchx.runner import get_runner
    cfg = variant("p5en-prod", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = get_runner().dryrun_component(f"{ROOT / 'workloads' / 'torchx_miles.py'}:miles_grpo",
                                             ["--stack", "p5en-prod"], "kubernetes", cfg=scheduler_cfg(cfg))
    job = serialize(info.request.resource)
    assert len(job["spec"]["tasks"]) == 1 + sum(g.replicas for g in L.ray_workers(cfg))
