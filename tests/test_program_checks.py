"""``program.build`` refuses a stack before registering anything when a check that needs the
program's other parts fails: the region's EKS add-on registry, the runs declared in the stack."""

from __future__ import annotations

import pytest
from test_workloads import variant

import program
from analysis import mocks
from stackconfig.stack import StackConfigError

SHARED = "p5en-shared"


def refused(cfg) -> tuple[str, list]:
    graph = mocks.Graph()
    with pytest.raises(StackConfigError) as err:
        mocks.run(lambda: program.build(cfg), region=cfg.region, stack=cfg.stack, graph=graph)
    return str(err.value), graph.resources


def test_a_region_without_a_derivable_registry_is_refused_before_anything_is_registered():
    raw = {"region": "cn-north-1", "availabilityZone": "cn-north-1a", "secondaryAvailabilityZone": "cn-north-1b"}
    message, registered = refused(variant("dev", raw))
    assert message.startswith("stack 'dev': invalid configuration\n  region: no EKS add-on image registry for "
                              "'cn-north-1' (its listed registry ") and "allowed: af-south-1, " in message
    assert registered == []


def test_a_declared_run_that_cannot_be_submitted_is_refused_before_anything_is_registered():
    """The schema no longer checks declared runs (it would import the model and the renderers);
    ``program.build`` does, with the schema's message form."""
    bad = {"workloads": {"runs": [{"name": "r", "team": "alpha", "nodes": {"train": 17, "rollout": 1}}]}}
    cfg = variant(SHARED, bad)  # the schema accepts it
    message, registered = refused(cfg)
    assert message.startswith("stack 'p5en-shared': invalid configuration\n  workloads.runs[r]: run r: pool train: "
                              "17 nodes requested, the pool has 16")
    assert registered == []


