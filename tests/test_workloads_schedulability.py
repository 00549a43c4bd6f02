"""The schedulability check: every shipped stack's pods fit their pools; stacks that would leave
pods Pending fail before anything is registered, naming the pod, the pool and the resource."""

from __future__ import annotations

import copy

import pytest
from conftest import load
from test_workloads import container, typed, variant

import program
from analysis import mocks
from stackconfig.stack import Role, StackConfigError
from workloads.derive.model import derive
from workloads.derive import layout as L
from workloads import render as M
from workloads.derive.resources import (EFA, GPU, HUGEPAGES, DAEMONSET_RESERVE_MI, DAEMONSET_RESERVE_MILLICPU, MI,
                                 allocatable, kube_reserved_millicpu, pods_per_node)
from workloads.checks.schedulability import _template_problems, check, node_capacity


def build_error(cfg) -> tuple[str, mocks.Graph]:
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        mocks.run(lambda: program.build(cfg), region=cfg.region, stack=cfg.stack, graph=graph)
    return str(err.value), graph


def test_every_pod_template_of_every_stack_fits(stack):
    cfg = load(stack)
    placements = check(derive(cfg))
    prefix = {"raycluster": "ray", "torchx": "torchx", "runs": "run"}[cfg.workloads.submit.value]
    staged = set() if prefix == "run" else {"stage"}  # a run's head stages its own model
    assert {p.pod for p in placements} >= {f"{prefix}-head", f"{prefix}-trainer", f"{prefix}-rollout"} | staged
    assert [p.problems for p in placements if not p.fits] == []
    by_pod = {p.pod: p for p in placements}
    assert by_pod[f"{prefix}-trainer"].pool == cfg.pool(Role.TRAIN).name
    assert by_pod[f"{prefix}-rollout"].pool == cfg.pool(Role.ROLLOUT).name
    assert by_pod[f"{prefix}-trainer"].replicas == cfg.pool(Role.TRAIN).nodes.desired


def test_allocatable_follows_the_documented_model():
    cfg = load("p5en-prod")
    pool = cfg.pool(Role.TRAIN)
    it = pool.instance
    alloc = allocatable(pool)
    # kube-reserved CPU: 6 % + 1 % + 2 x 0.5 % + 0.25 % of every further core (EKS formula).
    assert kube_reserved_millicpu(it.vcpu) == round(1000 * (0.06 + 0.01 + 2 * 0.005 + (it.vcpu - 4) * 0.0025))
    assert alloc.millicpu == it.vcpu * 1000 - kube_reserved_millicpu(it.vcpu)
    assert alloc.hugepages == 5128 * 2 * MI and alloc.gpus == it.gpus and alloc.efa == pool.efa_devices
    reserved = (255 + 11 * pods_per_node(pool) + 100) * MI
    assert alloc.memory == int(it.memory_gib * 1024 ** 3 * 0.925) - reserved - alloc.hugepages
    assert allocatable(cfg.pool(Role.CPU)).hugepages == 0  # no EFA, no pre-allocated huge pages
    cap = node_capacity(derive(cfg), pool)
    assert cap["cpu"] == alloc.millicpu - DAEMONSET_RESERVE_MILLICPU
    assert cap["memory"] == alloc.memory - DAEMONSET_RESERVE_MI * MI


@pytest.mark.parametrize("override, pod, pool, resource", [
    ({"workloads": {"reward": {"cpu": 64}}}, "reward", "reward", "CPU"),
    ({"workloads": {"ray": {"headMemoryGib": 512}}}, "ray-head", "cpu", "GiB memory"),
    ({"workloads": {"preprocess": {"memoryGib": 4096}}}, "stage", "cpu", "GiB memory"),
])
def test_a_pod_larger_than_a_node_fails_the_build_before_any_registration(override, pod, pool, resource):
    cfg = typed("p5en-prod", override)
    message, graph = build_error(cfg)
    assert message.startswith("stack 'p5en-prod': invalid configuration\n")
    line = next(ln for ln in message.splitlines() if f"pod {pod}:" in ln)
    assert f"pool {pool}" in line and resource in line
    assert graph.resources == []  # checked before Platform(cfg)


def test_pods_that_fit_alone_but_not_together_are_reported():
    # dev's cpu pool: one m7i.4xlarge for the head, a preprocessing worker and the Job.
    cfg = typed("dev", {"workloads": {"ray": {"preprocessNodeFraction": 0.6}}})
    bad = [p for p in check(derive(cfg)) if not p.fits]
    assert bad and all(p.pool == "cpu" for p in bad)
    assert any("do not fit on the 1 desired nodes of pool cpu" in m for p in bad for m in p.problems)
    message, graph = build_error(cfg)
    assert "pool cpu" in message and graph.resources == []


def test_shm_outside_the_memory_limit_is_reported():
    cfg = typed("p5en-prod", {"workloads": {"ray": {"gpuShmGib": 4096}}})
    bad = {p.pod: p for p in check(derive(cfg)) if not p.fits}
    assert set(bad) == {"ray-trainer", "ray-rollout"}
    assert any("/dev/shm" in m and "pool train" in m for m in bad["ray-trainer"].problems)


def _trainer(cfg) -> dict:
    return M.ray_pod_template(derive(cfg), L.worker(cfg, "trainer"))


def test_missing_toleration_wrong_selector_and_too_many_devices_are_named():
    cfg = load("p5en-prod")
    pool = cfg.pool(Role.TRAIN)
    cap = node_capacity(derive(cfg), pool)
    labels = derive(cfg).node_labels(pool)  # the pool's labels and what its node setup proves
    assert _template_problems("ray-trainer", pool, labels, _trainer(cfg), cap) == []

    t = _trainer(cfg)
    del t["spec"]["tolerations"]
    (problem,) = _template_problems("ray-trainer", pool, labels, t, cap)
    assert "does not tolerate taint nvidia.com/gpu=true:NoSchedule of pool train" in problem

    t = _trainer(cfg)
    t["spec"]["nodeSelector"] = {"rl.platform/pool": "rollout"}
    assert any("node selector rl.platform/pool=rollout does not match pool train" in p
               for p in _template_problems("ray-trainer", pool, labels, t, cap))

    for resource, value in ((EFA, str(pool.efa_devices + 1)), (GPU, str(pool.instance.gpus + 1)),
                            (HUGEPAGES, "20Gi")):
        t = _trainer(cfg)
        res = container(t)["resources"]
        res["requests"][resource] = res["limits"][resource] = value
        (problem,) = _template_problems("ray-trainer", pool, labels, t, cap)
        assert resource in problem and "pool train" in problem and "pod ray-trainer" in problem


def test_fewer_advertised_efa_devices_are_requested_exactly():
    """p5en nodes have been seen advertising 15 EFA devices: a stack can say so, pods follow."""
    cfg = variant("p5en-prod", {"workloads": {"efaDevices": {"train": 15, "rollout": 15}}})
    res = container(_trainer(cfg))["resources"]
    assert res["limits"][EFA] == "15"
    assert all(p.fits for p in check(derive(cfg)))
    default = load("p5en-prod")
    t = copy.deepcopy(M.ray_pod_template(derive(default), L.worker(default, "trainer")))  # 16 devices
    (problem,) = _template_problems("ray-trainer", cfg.pool(Role.TRAIN), derive(cfg).node_labels(cfg.pool(Role.TRAIN)), t,
                                    node_capacity(derive(cfg), cfg.pool(Role.TRAIN)))
    assert "16 vpc.amazonaws.com/efa" in problem and "15 vpc.amazonaws.com/efa" in problem
