"""Reclaim finishes within the stack's bound, on the real Volcano v1.15.1 (``small_shared``): team beta runs
above its deserved share, team alpha, below its guarantee, submits a run that takes it to its deserved share
and needs nodes only beta holds (every GPU node is taken, so each of the run's GPU pods needs a victim: see
docs/design/scheduling.md, "What the plan cannot see", for a run that also needs free nodes). Volcano's
reclaim evicts beta's pods with the pods' own grace period (``checkpointMinutes``, rendered as
``terminationGracePeriodSeconds``); kwok removes them exactly at their deletion time
(``controlplane.cluster.POD_DELETE_AT_DEADLINE``: the worst case, a preStop that waits the whole grace
period); alpha's gang is bound within a few scheduling sessions after that, none of its pods earlier (no
claim pod has a node while a victim is left, its earliest bind time no earlier than the victims' deletion
time), every pod Volcano evicts, the first to the last, is beta-over's, no pod of alpha was a victim, and
none is evicted in the ``SESSIONS`` sessions after the claim is bound."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
import yaml
from conftest import ROOT
from kubernetes import client
from small_shared import CHECKPOINT_MINUTES, small_shared

from workloads.checks.run_plan import Planner
from workloads.checks.runs import load_run
from workloads.render.teams import namespace_of
from workloads.schema.labels import RUN_LABEL

from controlplane import runs
from controlplane.kube import eventually

pytestmark = pytest.mark.controlplane
SESSIONS = 5
"""Scheduling sessions (the chart's ``scheduler_schedule_period``, 1 s) within which the claim is bound once
the victims are gone (API timestamps are whole seconds)."""
LAG = 5
"""Seconds this test's polling may see a removal late on a loaded machine."""
TEMPLATE = yaml.safe_load((ROOT / "runs" / "grpo-qwen3-30b.yaml").read_text())
RUNS = (("alpha-base", "alpha", "normal", {"train": 2, "rollout": 5}),   # 56 GPUs: below alpha's guarantee (64)
        ("beta-over", "beta", "low", {"train": 2, "rollout": 3}),       # 40 GPUs: above beta's deserved (24)
        ("alpha-claim", "alpha", "normal", {"train": 1, "rollout": 1}))  # alpha to 72: its deserved
"""The first two fill every train and rollout node; the claim's two GPU pods each need one of beta's nodes,
and beta keeps 24 GPUs, its deserved share, above its guarantee of 16."""


def _file(tmp_path, name: str, team: str, priority: str, nodes: dict):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**TEMPLATE, "name": name, "team": team, "priority": priority, "nodes": nodes}))
    return path


def _run_one_by_one(platform, files: list, specs) -> None:
    """Each run of ``files`` (``specs``: its row of a RUNS table) submitted as its team's member, then waited for
    until all its pods run, before the next."""
    for f, (name, team, _, nodes) in zip(files, specs):
        runs.submit(platform, f, runs.member_of(platform, team))
        runs.all_running(platform, team, f"{name}-1", 1 + sum(nodes.values()))


def _pods(core: client.CoreV1Api, team: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace_of(team), label_selector=RUN_LABEL).items


def test_alpha_reclaims_its_guarantee_from_beta_within_the_grace_period_and_a_few_sessions(tmp_path):
    platform = small_shared()
    core = client.CoreV1Api(platform.cp.client())
    files = [_file(tmp_path, *r) for r in RUNS]
    decisions = {d.run: d for d in Planner(platform.cfg).plan([load_run(f) for f in files])}
    assert decisions["beta-over"].action == "preempted" and decisions["alpha-claim"].action == "starts", decisions
    grace = CHECKPOINT_MINUTES * 60
    try:
        _run_one_by_one(platform, files[:2], RUNS[:2])
        alpha_before = {p.metadata.uid for p in _pods(core, "alpha")}
        runs.submit(platform, files[2], runs.member_of(platform, "alpha"))
        watch = Evictions(core)
        eventually("a pod evicted, then every evicted pod removed", watch.look, grace + 90, every=0.2)
        claim = runs.all_running(platform, "alpha", "alpha-claim-1", 3, timeout=60)
        runs.through_sessions(platform, SESSIONS, watch.no_more)
        alpha_after = {p.metadata.uid for p in _pods(core, "alpha")}
    finally:
        for name, team, _, _ in RUNS:
            if platform.admin.get(*runs.RAYJOB, f"{name}-1", namespace_of(team)):
                runs.delete_run(platform, team, f"{name}-1")
    victims = list(watch.victims.values())
    assert all(p.metadata.namespace == namespace_of("beta") and p.metadata.labels[RUN_LABEL] == "beta-over"
               for p in victims), [p.metadata.name for p in victims]
    assert alpha_before <= alpha_after, "a pod of alpha's running run was deleted"
    assert all(p.metadata.deletion_grace_period_seconds == grace for p in victims), [p.metadata for p in victims]
    late = {p.metadata.name: f"{watch.gone[p.metadata.uid] - p.metadata.deletion_timestamp.timestamp():+.1f} s"
            for p in victims if abs(watch.gone[p.metadata.uid] - p.metadata.deletion_timestamp.timestamp()) > LAG}
    assert not late, f"victims seen removed this far from their deletion time: {late}"
    assert not watch.early, f"claim pods bound before every victim was gone: {sorted(watch.early)}"
    deadline = max(p.metadata.deletion_timestamp.timestamp() for p in victims)
    first, last = min(_scheduled(p) for p in claim), max(_scheduled(p) for p in claim)
    assert deadline - 1 <= first and last <= deadline + SESSIONS, (
        f"claim pods bound {first - deadline:+.0f}..{last - deadline:+.0f} s from the victims' deletion time "
        f"(grace {grace} s), allowed -1..{SESSIONS}")
    print(f"reclaim: claim bound {last - (deadline - grace):.0f} s after the eviction (grace {grace} s)")


@dataclass
class Evictions:
    """Both teams' pods, polled: each pod seen being deleted (a victim) as first seen, when each was first seen
    gone, and the claim's pods seen on a node before every victim was gone."""

    core: client.CoreV1Api
    victims: dict[str, client.V1Pod] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    early: set[str] = field(default_factory=set)

    def pods(self) -> list[client.V1Pod]:
        return [p for team in ("alpha", "beta") for p in _pods(self.core, team)]

    def look(self) -> bool:
        """One poll; True once some pod was evicted and every evicted pod is gone."""
        pods, now = self.pods(), datetime.now(timezone.utc).timestamp()
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                self.victims.setdefault(pod.metadata.uid, pod)
        present = {p.metadata.uid for p in pods}
        for uid in self.victims.keys() - present:
            self.gone.setdefault(uid, now)
        if not self.victims or len(self.gone) < len(self.victims):
            self.early |= {p.metadata.name for p in pods if p.metadata.labels[RUN_LABEL] == "alpha-claim"
                           and p.spec.node_name}
        return bool(self.victims) and len(self.gone) == len(self.victims)

    def no_more(self) -> str | None:
        """A complaint if a pod is being deleted (a further eviction)."""
        deleted = [p.metadata.name for p in self.pods() if p.metadata.deletion_timestamp]
        return f"pods evicted after the claim was bound: {deleted}" if deleted else None


def _scheduled(pod: client.V1Pod) -> float:
    """When the pod was bound: its PodScheduled condition turning True (the API server's binding sets it)."""
    return next(c.last_transition_time.timestamp() for c in pod.status.conditions
                if c.type == "PodScheduled" and c.status == "True")
