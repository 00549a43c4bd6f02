"""The platform's own pods (the KubeRay operator, the shared reward service) run above every team run
(issue 26 item 4): under node pressure the kubelet evicts by priority, and at priority 0 they would
go before any team's pods."""

from __future__ import annotations

import pytest
from conftest import graph_of, load
from test_workloads import HELM

PC = "kubernetes:scheduling.k8s.io/v1:PriorityClass"


@pytest.mark.parametrize("stack", ["p5en-shared", "p5en-prod"])
def test_the_operator_and_the_reward_pods_have_the_platform_priority(stack):
    cfg, graph = load(stack), graph_of(stack)
    classes = {r.inputs["metadata"]["name"]: r for r in graph.of_type(PC)}
    platform = [r for n, r in classes.items() if not n.startswith("rl-")]
    assert len(platform) == 1, sorted(classes)
    (pc,) = platform
    name = pc.inputs["metadata"]["name"]
    assert pc.inputs["value"] > max(cfg.workloads.priority_classes.values())
    assert pc.inputs["preemptionPolicy"] == "Never" and pc.inputs["globalDefault"] is False
    kuberay = next(r for r in graph.of_type(HELM) if r.inputs["name"] == "kuberay-operator")
    assert kuberay.inputs["values"]["priorityClassName"] == name and pc.urn in kuberay.dependencies
    (reward,) = [r for r in graph.resources if r.inputs.get("kind") == "Deployment"
                 and "reward" in r.inputs["metadata"]["name"]]
    assert reward.inputs["spec"]["template"]["spec"]["priorityClassName"] == name and pc.urn in reward.dependencies
