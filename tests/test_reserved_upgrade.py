"""Upgrading a reserved pool in ``raycluster`` mode (issue 32 item 3), against the rendered objects:
EKS drains each old node of a managed node group through the eviction API, which a
PodDisruptionBudget of ``maxUnavailable: 0`` refuses for as long as it selects a pod there; after 15
minutes per node the update fails with PodEvictionFailure (EKS user guide, "Understand each phase of
node updates", upgrade phase). ``ray job stop`` ends the job, not the RayCluster's pods."""

from __future__ import annotations

from conftest import ROOT, graph_of, load
from test_teardown import plain
from test_workloads import variant, variant_graph
from test_workloads_security import registered_objects

from stackconfig.stack import RESERVED
from workloads.derive.model import derive
from workloads.render import ray_pod_labels

SUSPEND = {"workloads": {"run": {"suspend": True}}}
PAGE = ROOT / "docs" / "operations" / "failures.md"


def selects(selector: dict, labels: dict) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present = labels.get(e["key"])
        ok = {"In": present in e.get("values", []), "NotIn": present not in e.get("values", []),
              "Exists": e["key"] in labels, "DoesNotExist": e["key"] not in labels}[e["operator"]]
        if not ok:
            return False
    return True


def refused_evictions(objects: list[dict], cfg, pool: str) -> list[tuple[str, str]]:
    """(budget, Ray group) of every pod on ``pool``'s nodes that a zero-disruption budget protects."""
    m = derive(cfg)
    (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
    spec = cluster["spec"]
    if spec.get("suspend"):
        return []  # KubeRay v1.7.0 deletes every pod of a suspended RayCluster (raycluster_controller.go:943-955)
    groups = [("head", spec["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in spec["workerGroupSpecs"] if g.get("replicas", 0) > 0]
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget" and o["spec"].get("maxUnavailable") == 0]
    return [(b["metadata"]["name"], group) for group, template in groups
            if template["spec"]["nodeSelector"].get("rl.platform/pool") == pool
            for b in budgets if selects(b["spec"]["selector"], ray_pod_labels(m, group))]


def reserved_pools(cfg) -> list[str]:
    return [p.name for p in cfg.pools if p.capacity.type in RESERVED]


def test_after_ray_job_stop_the_reserved_pools_cannot_be_drained():
    """What the old procedure left: the RayCluster's pods and their budgets (stopping the job changes
    no object), so every reserved pool's update fails at its first node."""
    cfg, objects = load("p5en-prod"), registered_objects(graph_of("p5en-prod"))
    assert cfg.workloads.submit.value == "raycluster" and reserved_pools(cfg) == ["train", "rollout"]
    for pool in reserved_pools(cfg):
        assert refused_evictions(objects, cfg, pool), pool


def test_a_suspended_raycluster_lets_every_reserved_pool_drain_and_changes_nothing_else():
    cfg = variant("p5en-prod", SUSPEND)
    suspended, running = variant_graph("p5en-prod", SUSPEND), graph_of("p5en-prod")
    objects = registered_objects(suspended)
    assert next(o for o in objects if o["kind"] == "RayCluster")["spec"]["suspend"] is True
    assert [refused_evictions(objects, cfg, pool) for pool in reserved_pools(cfg)] == [[], []]
    before = {r.urn: plain(r.inputs) for r in running.resources}
    changed = [r.urn.rsplit("::", 1)[1] for r in suspended.resources if before.get(r.urn) != plain(r.inputs)]
    assert changed == ["raycluster-miles"]  # the `pulumi up` that suspends touches the RayCluster alone


def test_the_procedure_suspends_before_the_upgrade_and_resumes_after():
    text = PAGE.read_text()
    section = text[text.index("## Upgrade a reserved pool"):]
    suspend = section.index("pulumi config set --path platform.workloads.run.suspend true")
    upgrade = section.index("Change the version or pin and `pulumi up`")
    resume = section.index("pulumi config set --path platform.workloads.run.suspend false")
    assert suspend < upgrade < resume
    assert "ray job stop" not in section[suspend:]
