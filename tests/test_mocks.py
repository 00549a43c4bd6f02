"""The mock engine skips two pieces of SDK work whose results no engine that supports alias specs
reads: what it hands the program and records stays what the SDK's full path gives."""

from __future__ import annotations

import dataclasses

import pulumi.resource
from conftest import load
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime.proto import resource_pb2

import program
from analysis import mocks


def _registrations(monkeypatch, collapse) -> tuple[list, mocks.Graph]:
    """Each registration's name, alias specs and alias URNs as the engine receives them, and the graph."""
    sent = []
    register = mocks._RecordingMonitor.RegisterResource

    def recording(self, request):
        sent.append((request.type, request.name, [a.SerializeToString() for a in request.aliases],
                     list(request.aliasURNs)))
        return register(self, request)

    monkeypatch.setattr(mocks._RecordingMonitor, "RegisterResource", recording)
    monkeypatch.setattr(mocks, "_skip_alias_urns", lambda: setattr(pulumi.resource, "collapse_alias_to_urn", collapse))
    cfg = load("dev")
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack="dev")
    return sorted(sent), graph


def test_the_engine_receives_the_same_aliases_without_the_sdks_urn_collapse(monkeypatch):
    skipped, graph = _registrations(monkeypatch, lambda alias, name, type_, parent: alias)
    full, full_graph = _registrations(monkeypatch, runtime_resource.collapse_alias_to_urn)
    assert skipped == full
    assert sum(len(aliases) for _, _, aliases, _ in full) > 50  # pulumi_kubernetes' aliases are sent as specs
    assert _recorded(graph) == _recorded(full_graph)


def _recorded(graph: mocks.Graph) -> list[str]:
    """What the graph holds; dependencies as a set (their order varies from run to run either way)."""
    return sorted(repr(dataclasses.replace(r, dependencies=sorted(r.dependencies))) for r in graph.resources)


def test_the_mock_engine_takes_alias_specs_as_the_cli_does():
    features = mocks._RecordingMonitor(mocks._Mocks("us-east-1"), mocks.Graph()).GetDeploymentInfo(None)
    assert resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS in features.supportedFeatures
