"""Differential test of the run planner (``runs plan``) against the real Volcano on p5en-shared: random mixes of
two teams' runs are submitted one by one, through the real ``runs submit``, and what Volcano binds is compared
with what the planner said (which runs start, which wait).

Mixes where the planner expects a preemption or a reclaim are left out here: the Volcano built for the tier
(v1.14.1, ``controlplane.versions.VOLCANO_SERVED``) picks queues at random in its preempt action, which v1.15.1
no longer does, so its victims can differ from the pinned release's. Each run is submitted after the previous
run's gang settled (v1.14.1 admits the next PodGroup one session later than v1.15.1)."""

from __future__ import annotations

import random

import pytest
import yaml
from conftest import ROOT, recorded

from workloads.checks.run_plan import Planner
from workloads.checks.runs import load_run
from workloads.render.teams import namespace_of

from controlplane import runs
from controlplane.kube import eventually
from controlplane.session import platform_of

pytestmark = pytest.mark.controlplane
MIXES = 6
SEED = 20261205
TEMPLATE = yaml.safe_load((ROOT / "runs" / "grpo-qwen3-30b.yaml").read_text())


def _mix(rng: random.Random, directory) -> list:
    files = []
    for i in range(rng.randint(2, 4)):
        doc = {**TEMPLATE, "name": f"mix-{i}", "team": rng.choice(["alpha", "beta"]), "priority": "normal",
               "nodes": {"train": rng.choice([1, 2, 4, 8]), "rollout": rng.choice([2, 4, 8, 16])}}
        path = directory / f"mix-{i}.yaml"
        path.write_text(yaml.safe_dump(doc))
        files.append(path)
    return files


def _settled_placed(platform, team: str, run: str) -> bool:
    """Whether the run's gang is bound, once Volcano has had a few sessions since its PodGroup appeared."""
    ns = namespace_of(team)
    group = eventually(f"{run}'s PodGroup", lambda: next((g for g in platform.admin.list(*runs.PODGROUP, namespace=ns)
                                                           if g["metadata"]["name"].startswith(f"ray-{run}-")), None), 90)
    try:
        eventually(f"{run} Running", lambda: (platform.admin.get(*runs.PODGROUP, group["metadata"]["name"], ns)
                                             .get("status") or {}).get("phase") == "Running", 25)
        return True
    except AssertionError:
        return False


def _clean(platform, teams) -> None:
    for team in teams:
        for job in runs.rayjobs(platform.admin, team):
            runs.delete_run(platform, team, job["metadata"]["name"])
        eventually(f"{team}'s PodGroups gone", lambda: not platform.admin.list(*runs.PODGROUP, namespace=namespace_of(team)), 90)


def test_volcano_binds_what_the_planner_predicts(tmp_path):
    platform = platform_of("p5en-shared", recorded)
    rng, compared, disagreements = random.Random(SEED), 0, []
    while compared < MIXES:
        files = _mix(rng, tmp_path)
        run_files = [load_run(f) for f in files]
        decisions = Planner(platform.cfg).plan(run_files)
        if any(d.action == "preempted" for d in decisions):
            continue
        predicted = {d.run: d.placed for d in decisions}
        observed = {}
        try:
            for path, run in zip(files, run_files):
                runs.submit(platform, path, runs.member_of(platform, run.team))
                observed[run.name] = _settled_placed(platform, run.team, f"{run.name}-1")
        finally:
            _clean(platform, {"alpha", "beta"})
        compared += 1
        if observed != predicted:
            disagreements.append(f"mix {compared}: " + "; ".join(
                f"{r.name} ({r.team} {dict(r.nodes)}): planner {'starts' if predicted[r.name] else 'waits'}, "
                f"Volcano {'bound' if observed[r.name] else 'pending'}" for r in run_files))
    assert not disagreements, "\n".join(disagreements)
