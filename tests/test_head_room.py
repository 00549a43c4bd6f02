"""The teams' runs at once fit the head pool (issue 35, review item M2): each RayJob brings one head onto the head
pool, and Volcano places a run's head only with its whole gang, so more heads than the pool holds would keep one
team's runs waiting for a head while another team's hold every slot. The stack refuses ``maxRuns`` adding up to
more heads than the head pool holds at its desired size, in one line naming the field and what is allowed."""

from __future__ import annotations

import pytest
from conftest import raw_config
from test_workloads import variant

from stackconfig.stack import StackConfigError
from workloads.derive.layout import head_pool, heads_per_node, ray_head
from workloads.derive.resources import allocatable, usable

SHARED = "p5en-shared"


def _teams(*runs: int | None) -> dict:
    """The stack's two teams with these ``maxRuns`` (None: the default)."""
    quotas = [{"train": {"guarantee": 64, "deserved": 80, "cap": 128}, "rollout": {"guarantee": 128, "cap": 256}},
              {"train": {"deserved": 48, "cap": 64}, "rollout": {"guarantee": 64, "cap": 128}}]
    return {"workloads": {"teams": [{"name": name, "gpus": q, **({"maxRuns": n} if n is not None else {})}
                                    for name, q, n in zip(("alpha", "beta"), quotas, runs)]}}


def test_a_head_pool_node_holds_as_many_platform_heads_as_fit_beside_its_daemonsets():
    cfg = variant(SHARED, {})
    head = ray_head(cfg)
    mcpu, memory = usable(allocatable(head_pool(cfg)))
    n = heads_per_node(cfg)
    assert n == 3 and head_pool(cfg).nodes.desired == 2  # c7i.16xlarge: 3 heads of 34 GB, a fourth does not fit
    assert n * head.cpu * 1000 <= mcpu and n * head.memory_bytes <= memory
    assert (n + 1) * head.memory_bytes > memory or (n + 1) * head.cpu * 1000 > mcpu


def test_the_stacks_teams_fit_the_head_pool_at_the_default():
    cfg = variant(SHARED, {})
    assert sum(t.max_runs for t in cfg.workloads.teams) <= heads_per_node(cfg) * head_pool(cfg).nodes.desired


@pytest.mark.parametrize("runs", [(4, 4), (4, None), (6, 1)])
def test_more_runs_than_the_head_pool_holds_are_refused_naming_the_field(runs):
    with pytest.raises(StackConfigError) as e:
        variant(SHARED, _teams(*runs))
    lines = [line.strip() for line in str(e.value).splitlines()[1:]]
    assert [line for line in lines if "maxRuns" in line] == [
        f"workloads.teams[beta].maxRuns: the teams' runs at once sum to {sum(n or 3 for n in runs)} "
        f"(alpha {runs[0]} + beta {runs[1] or 3}), more heads than the 6 the head pool cpu holds at its desired size "
        "(2 nodes of 3 heads); allowed: a sum <= 6, or more nodes (pools[cpu].nodes.desired)"]


def test_a_larger_head_pool_admits_them():
    larger = variant(SHARED, {**_teams(4, 4), "pools": [
        {**p, "nodes": {**p["nodes"], "desired": 3}} if p["name"] == "cpu" else p for p in raw_config(SHARED)["pools"]]})
    assert [t.max_runs for t in larger.workloads.teams] == [4, 4]

