"""The mock engine skips SDK work whose result no engine that supports alias specs reads: what it
hands the program and records stays what the SDK's full path gives, and an alias ``pulumi up``
refuses is refused under mocks too."""

from __future__ import annotations

import dataclasses

import pulumi
import pulumi.resource
import pytest
from conftest import load
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime.proto import resource_pb2

import program
from analysis import mocks


def _registrations(monkeypatch, skip: bool) -> tuple[list, mocks.Graph]:
    """Each registration's type, name, alias specs and alias URNs as the engine receives them, and
    the graph, with the mock engine's alias handling (``skip``) or the SDK's own."""
    sent = []
    register = mocks._RecordingMonitor.RegisterResource

    def recording(self, request):
        sent.append((request.type, request.name, [a.SerializeToString() for a in request.aliases],
                     list(request.aliasURNs)))
        return register(self, request)

    monkeypatch.setattr(mocks._RecordingMonitor, "RegisterResource", recording)
    monkeypatch.setattr(pulumi.resource, "collapse_alias_to_urn", runtime_resource.collapse_alias_to_urn)
    if not skip:
        monkeypatch.setattr(mocks, "_skip_alias_urns", lambda: None)
    cfg = load("dev")
    graph = mocks.run(lambda: program.build(cfg), region=cfg.region, stack="dev")
    return sorted(sent), graph


def test_the_engine_receives_the_same_aliases_without_the_sdks_urn_collapse(monkeypatch):
    skipped, graph = _registrations(monkeypatch, skip=True)
    full, full_graph = _registrations(monkeypatch, skip=False)
    assert skipped == full
    assert sum(len(aliases) for _, _, aliases, _ in full) > 50  # pulumi_kubernetes' aliases are sent as specs
    assert _recorded(graph) == _recorded(full_graph)


def _recorded(graph: mocks.Graph) -> list[str]:
    """What the graph holds; dependencies as a set (their order varies from run to run either way)."""
    return sorted(repr(dataclasses.replace(r, dependencies=sorted(r.dependencies))) for r in graph.resources)


@pytest.mark.parametrize("alias", [pulumi.Alias(name=None), pulumi.Alias(type_=None)], ids=["no name", "no type"])
def test_an_alias_the_sdk_refuses_is_refused_under_mocks(monkeypatch, alias):
    monkeypatch.setattr(pulumi.resource, "collapse_alias_to_urn", runtime_resource.collapse_alias_to_urn)
    with pytest.raises(Exception, match="No valid '(name|type_)' passed in for alias"):
        mocks.run(lambda: pulumi.ComponentResource("test:index:Part", "part", None,
                                                   pulumi.ResourceOptions(aliases=[alias])),
                  region="us-east-1", stack="dev")


def test_the_mock_engine_takes_alias_specs_as_the_cli_does():
    features = mocks._RecordingMonitor(mocks._Mocks("us-east-1"), mocks.Graph()).GetDeploymentInfo(None)
    assert resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS in features.supportedFeatures
